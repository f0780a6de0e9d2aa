"""Distributed-tensor benchmarks, written once against Monarch's public
``monarch`` API, so the same file runs against this project (``--impl ours``)
and torchmonarch 0.7.0 (``--impl monarch``, in its own virtual environment).

Four processes on this host (``{"gpus": 4}``), CPU tensors. It measures:

- ``dispatch``: element-wise ops issued per second at the controller (the
  script's own loop; nothing waits);
- ``complete``: element-wise ops per second issued *and* finished on every
  process (a ``fetch_shard`` of the last result ends the clock);
- ``fetch``: ``fetch_shard(...).get()`` of a small tensor (seconds, median).
- ``reduce_64m`` (``--reduce``, ours only: Monarch 0.7.0 cannot reduce on
  CPU): ``reduce_`` of 64 MiB of float32 over the 4 processes, and plain
  ``torch.distributed`` gloo ``all_reduce`` of the same size in the same
  processes (bytes/s, best of a few).

Prints one JSON object with those keys.

    python tools/bench/tensor_bench.py --impl ours [--quick] [--reduce]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from _timing import log, median_time


def workload(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from monarch import fetch_shard
    from monarch.actor import this_host

    procs = this_host().spawn_procs(per_host={"gpus": 4})
    results: dict[str, Any] = {}
    ops = 500 if args.quick else 5000

    with procs.activate():
        x = torch.ones(16)
        warm = x
        for _ in range(50):
            warm = warm + 1
        fetch_shard(warm, gpus=0).get()

        start = time.perf_counter()
        y = x
        for _ in range(ops):
            y = y + 1
        issued = time.perf_counter() - start
        last = fetch_shard(y, gpus=3).get()
        finished = time.perf_counter() - start
    assert float(last[0]) == ops + 1, last
    results["dispatch"] = ops / issued
    results["complete"] = ops / finished
    log(f"dispatch: {results['dispatch']:.0f} ops/s, complete: {results['complete']:.0f} ops/s")

    with procs.activate():
        small = torch.rand(4, 4)
        results["fetch"] = median_time(
            lambda: fetch_shard(small, gpus=1).get(), 50 if args.quick else 500, 10
        )
    log(f"fetch_shard: {results['fetch'] * 1e6:.0f} us")

    if args.reduce:
        results.update(reduce_vs_gloo(procs, 2 if args.quick else 5))
    procs.stop().get()
    return results


def reduce_vs_gloo(procs: Any, repeat: int) -> dict[str, float]:
    """``reduce_`` of 64 MiB against gloo ``all_reduce`` in the same processes."""
    import torch

    from monarch import fetch_shard, remote

    size = 64 << 20

    def gloo_seconds(repeat: int) -> list[float]:  # runs on each process
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group("gloo")
        buf = torch.ones((64 << 20) // 4)
        dist.all_reduce(buf)
        seconds = []
        for _ in range(repeat):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(buf)
            seconds.append(time.perf_counter() - start)
        return seconds

    with procs.activate():
        t = torch.ones(size // 4)
        t.reduce_("gpus", "sum")
        fetch_shard(t[:1], gpus=0).get()
        best = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            t.reduce_("gpus", "sum")
            fetch_shard(t[:1], gpus=0).get()
            best = min(best, time.perf_counter() - start)
        gloo = remote(gloo_seconds, propagate="inspect")
        seconds = gloo.call(repeat).get()
    gloo_best = min(min(s) for s in seconds.values())
    log(f"reduce_ 64 MiB: {size / best / 1e9:.2f} GB/s, gloo: {size / gloo_best / 1e9:.2f} GB/s")
    return {"reduce_64m": size / best, "gloo_64m": size / gloo_best}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", choices=["ours", "monarch"], required=True)
    parser.add_argument("--quick", action="store_true", help="fewer iterations (a smoke test)")
    parser.add_argument("--reduce", action="store_true", help="also reduce_ vs gloo all_reduce")
    args = parser.parse_args()
    print(json.dumps(workload(args)), flush=True)


if __name__ == "__main__":
    main()
