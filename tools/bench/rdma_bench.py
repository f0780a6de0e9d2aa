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

from _timing import log, median_time

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--impl", choices=("ours", "monarch"), required=True)
    parser.add_argument("--repeat", type=int, default=1, help="ignored (medians of many)")
    args = parser.parse_args()
    os.environ.setdefault("MONARCH_PRELOAD", "torch")
    print(json.dumps(workload(args)))


if __name__ == "__main__":
    main()
