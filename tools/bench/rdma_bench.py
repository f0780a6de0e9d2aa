"""RDMA buffer benchmarks, written once against the public ``monarch.rdma``
and ``monarch.actor`` API, so the same file runs against this project
(``--impl ours``) and against torchmonarch 0.7.0 (``--impl monarch``, in its
own virtual environment, where it uses its TCP fallback: no RDMA NIC here).

One actor in another process on this host owns 1 MiB and 64 MiB tensors and
hands out ``RDMABuffer``s; this process (the client) measures
``read_into`` and ``write_from`` of the whole buffer, as bytes per second
(median of many). For ours it measures each backend that can serve a
same-host pair: ``auto`` (which picks ``cma``) and ``tcp`` forced. It also
measures, in the same run, this machine's single-threaded memcpy bandwidth
(``ctypes.memmove`` of 64 MiB, median) and an in-process ``torch`` copy of
each size (``dst.copy_(src)``, which uses every core: the ceiling a
same-host transfer is held to). The copies are timed between the
transfers of each row, just before and just after them, so that a change of
load on a shared machine weighs on both alike.

Prints one JSON object: ``{"memcpy_64m": B/s, "copy_1m": B/s, "copy_64m": B/s,
"<backend>": {"read_1m": B/s, "copy_read_1m": B/s, ...}}`` (``copy_read_1m``:
the copies timed around those reads).

    python tools/bench/rdma_bench.py --impl ours

With ``--cuda`` (ours only) it measures CUDA memory instead, on one GPU: the
owner's buffers are CUDA tensors of 1, 16 and 256 MiB and 1 GiB, this process reads
into and writes from CUDA tensors with the ``cuda_ipc`` backend (forced, so
a fallback would fail rather than be measured), and, in the same run, an
in-process device copy of each size (``dst.copy_(src)``, timed from the host
around ``torch.cuda.synchronize()``, and by CUDA events); each best of N.
Prints one JSON object with B/s per row and the ratios to the host-timed
copy, or ``{"skipped": reason}`` (and the reason on stderr) without CUDA.

    python tools/bench/rdma_bench.py --impl ours --cuda
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from _timing import cuda_skip_reason, log, median_time

SIZES = {"1m": 1 << 20, "64m": 64 << 20}
SAMPLES = {"1m": 200, "64m": 15}
SETTLE = 0.1  # seconds for torch's threads to stop spinning after a copy_


def memcpy_bandwidth(samples: int) -> float:
    size = SIZES["64m"]
    src = (ctypes.c_char * size)()
    dst = (ctypes.c_char * size)()
    ctypes.memset(src, 1, size)
    ctypes.memset(dst, 2, size)
    seconds = median_time(lambda: ctypes.memmove(dst, src, size), samples, 3)
    return size / seconds


def bracketed_times(
    run: Callable[[], object], copy: Callable[[], object], samples: int, warmup: int
) -> tuple[list[float], list[float]]:
    """Seconds of ``run``, and of ``copy`` just before and just after them.

    Not interleaved one by one: torch's worker threads spin for some
    milliseconds after a ``copy_``, taking a core from whatever runs next;
    so the transfers start after a pause."""
    copies = [median_time(copy, 1, 0) for _ in range(samples)]
    time.sleep(SETTLE)
    for _ in range(warmup):
        run()
    runs = [median_time(run, 1, 0) for _ in range(samples)]
    copies += [median_time(copy, 1, 0) for _ in range(samples)]
    time.sleep(SETTLE)
    return runs, copies


def workload(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from monarch.actor import Actor, endpoint, this_host
    from monarch.rdma import RDMABuffer

    class Owner(Actor):
        def __init__(self) -> None:
            self.tensors: dict[str, torch.Tensor] = {}

        @endpoint
        def buffer(self, key: str, size: int) -> RDMABuffer:
            tensor = torch.ones(size, dtype=torch.uint8)
            self.tensors[key] = tensor
            return RDMABuffer(tensor)

    results: dict[str, Any] = {"memcpy_64m": memcpy_bandwidth(21)}
    copies: dict[str, list[float]] = {key: [] for key in SIZES}
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    owner = procs.spawn("owner", Owner)
    buffers = {key: owner.buffer.call_one(key, size).get() for key, size in SIZES.items()}
    if args.impl == "ours":
        import monarch_rdma

        backends = ["auto", "tcp"]
    else:
        backends = ["monarch"]
    for backend in backends:
        if args.impl == "ours":
            monarch_rdma.configure(backend=backend)
        row: dict[str, float] = {}
        for key, size in SIZES.items():
            buffer = buffers[key]
            local = torch.zeros(size, dtype=torch.uint8)
            src, dst = torch.ones(size, dtype=torch.uint8), torch.zeros(size, dtype=torch.uint8)
            for op in ("read", "write"):
                run = (
                    (lambda b=buffer, t=local: b.read_into(t).get())
                    if op == "read"
                    else (lambda b=buffer, t=local: b.write_from(t).get())
                )
                runs, copy = bracketed_times(run, lambda s=src, d=dst: d.copy_(s), SAMPLES[key], 3)
                copies[key] += copy
                seconds = statistics.median(runs)
                row[f"{op}_{key}"] = size / seconds
                row[f"copy_{op}_{key}"] = size / statistics.median(copy)  # timed alongside
                log(f"{args.impl}/{backend} {op} {key}: {size / seconds / 1e9:.2f} GB/s")
        if args.impl == "ours":
            row["backend"] = buffers["64m"].backend  # type: ignore[assignment]
        results[backend] = row
    for key, size in SIZES.items():
        results[f"copy_{key}"] = size / statistics.median(copies[key])
        log(f"torch copy_ {key}: {results[f'copy_{key}'] / 1e9:.2f} GB/s")
    procs.stop().get()
    return results


CUDA_SIZES = {"1m": 1 << 20, "16m": 16 << 20, "256m": 256 << 20, "1g": 1 << 30}
CUDA_SAMPLES = {"1m": 200, "16m": 50, "256m": 30, "1g": 10}


def cuda_workload(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    import monarch_rdma
    from monarch.actor import Actor, endpoint, this_host
    from monarch.rdma import RDMABuffer

    class CudaOwner(Actor):
        def __init__(self) -> None:
            self.tensors: dict[str, torch.Tensor] = {}

        @endpoint
        def buffer(self, key: str, size: int) -> RDMABuffer:
            tensor = torch.ones(size, dtype=torch.uint8, device="cuda")
            torch.cuda.synchronize()
            self.tensors[key] = tensor
            return RDMABuffer(tensor)

    def best(fn: Callable[[], object], samples: int) -> tuple[float, float]:
        times = []
        for _ in range(samples):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times), statistics.median(times)

    def synchronized_copy(dst: Any, src: Any) -> None:
        dst.copy_(src)
        torch.cuda.synchronize()

    def event_copy_seconds(dst: Any, src: Any, samples: int) -> float:
        times = []
        for _ in range(samples):
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            dst.copy_(src)
            end.record()
            end.synchronize()
            times.append(begin.elapsed_time(end) / 1e3)
        return min(times)

    procs = this_host().spawn_procs(per_host={"gpus": 1})
    owner = procs.spawn("owner", CudaOwner)
    monarch_rdma.configure(backend="cuda_ipc")
    results: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    for key in args.cuda_sizes.split(","):
        size = CUDA_SIZES[key]
        buffer = owner.buffer.call_one(key, size).get()
        local = torch.zeros(size, dtype=torch.uint8, device="cuda")
        src = torch.ones(size, dtype=torch.uint8, device="cuda")
        dst = torch.zeros(size, dtype=torch.uint8, device="cuda")
        samples = args.cuda_samples or CUDA_SAMPLES[key]
        row: dict[str, Any] = {"backend": buffer.backend}
        for _ in range(3):  # warm up: first opens, allocator, streams
            buffer.read_into(local).get()
            buffer.write_from(local).get()
            synchronized_copy(dst, src)
        torch.cuda.synchronize()
        copy_best, copy_median = best(lambda d=dst, s=src: synchronized_copy(d, s), samples)
        for op in ("read", "write"):
            run = (
                (lambda b=buffer, t=local: b.read_into(t).get())
                if op == "read"
                else (lambda b=buffer, t=local: b.write_from(t).get())
            )
            fastest, median = best(run, samples)
            row[f"{op}_{key}"] = size / fastest
            row[f"{op}_{key}_median"] = size / median
        again_best, again_median = best(lambda d=dst, s=src: synchronized_copy(d, s), samples)
        copy_best = min(copy_best, again_best)  # timed before and after the transfers
        row[f"copy_{key}"] = size / copy_best
        row[f"copy_{key}_median"] = size / statistics.median([copy_median, again_median])
        row[f"copy_events_{key}"] = size / event_copy_seconds(dst, src, samples)
        for op in ("read", "write"):
            row[f"ratio_{op}_{key}"] = row[f"{op}_{key}"] / row[f"copy_{key}"]
            row[f"ratio_events_{op}_{key}"] = row[f"{op}_{key}"] / row[f"copy_events_{key}"]
            log(
                f"cuda_ipc {op} {key}: {row[f'{op}_{key}'] / 1e9:.0f} GB/s, device copy "
                f"{row[f'copy_{key}'] / 1e9:.0f} GB/s (host-timed; "
                f"{row[f'copy_events_{key}'] / 1e9:.0f} by events): "
                f"{row[f'ratio_{op}_{key}']:.0%} ({row[f'ratio_events_{op}_{key}']:.0%})"
            )
        results[key] = row
        del local, src, dst, buffer  # before the next size's tensors
    procs.stop().get()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--impl", choices=("ours", "monarch"), required=True)
    parser.add_argument("--repeat", type=int, default=1, help="ignored (medians of many)")
    parser.add_argument(
        "--cuda", action="store_true", help="cuda_ipc on CUDA tensors beside a device copy (ours)"
    )
    parser.add_argument(
        "--cuda-sizes",
        default=",".join(CUDA_SIZES),
        help=f"with --cuda: which sizes, comma-separated (default {','.join(CUDA_SIZES)})",
    )
    parser.add_argument(
        "--cuda-samples",
        type=int,
        default=0,
        help="with --cuda: samples per size (0: each size's own)",
    )
    args = parser.parse_args()
    os.environ.setdefault("MONARCH_PRELOAD", "torch")
    if args.cuda:
        unknown = set(args.cuda_sizes.split(",")) - set(CUDA_SIZES)
        if unknown:
            parser.error(f"unknown --cuda-sizes {sorted(unknown)}: choose from {list(CUDA_SIZES)}")
        if args.impl != "ours":
            parser.error("--cuda measures this project's cuda_ipc backend: use --impl ours")
        reason = cuda_skip_reason()
        if reason is not None:
            log(f"rdma_bench --cuda skipped: {reason}")
            print(json.dumps({"skipped": reason}))
            return
        print(json.dumps(cuda_workload(args)))
        return
    print(json.dumps(workload(args)))


if __name__ == "__main__":
    main()
