"""Benchmarks across hosts, written once against the public ``monarch.actor``
and ``monarch.rdma`` API, so the same file runs against this project
(``--impl ours``) and torchmonarch 0.7.0 (``--impl monarch``, in its own
virtual environment).

This process is the controller; the workers (``run_worker_loop_forever``,
one per host) are already running at ``--workers``. It measures:

- ``attach``: ``attach_to_workers(...)`` until ``initialized`` (seconds);
- ``spawn``: ``spawn_procs(per_host={"gpus": 2})`` on every host, spawning
  one actor per proc, until a first ``call()`` to all returns (seconds);
- ``call_one``: ``call_one().get()`` round trip to an actor on another host
  (seconds, median);
- ``call_all``: ``call().get()`` to every actor (seconds, median);
- ``broadcast``: ``broadcast()`` to every actor, repeated, then one
  ``call()`` that returns after all of them (broadcasts/s);
- ``rdma_64m``: an actor on the first host reads 64 MiB that an actor on the
  second host registered as an ``RDMABuffer`` (bytes/s, median).

Prints one JSON object with those keys.

    python tools/bench/hosts_bench.py --impl ours --workers tcp://10.0.0.2:26600,...
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from _timing import log, median_time


def workload(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from monarch.actor import Actor, attach_to_workers, endpoint
    from monarch.rdma import RDMABuffer

    class Bench(Actor):
        def __init__(self) -> None:
            self.pokes = 0
            self.data = torch.ones(64 << 20, dtype=torch.uint8)
            self.into = torch.zeros(64 << 20, dtype=torch.uint8)

        @endpoint
        def ping(self) -> int:
            return 0

        @endpoint
        def poke(self) -> None:
            self.pokes += 1

        @endpoint
        def count(self) -> int:
            return self.pokes

        @endpoint
        def buffer(self) -> Any:
            return RDMABuffer(self.data.view(-1))

        @endpoint
        def read(self, buffer: Any, times: int) -> list[float]:
            seconds = []
            for _ in range(times):
                start = time.perf_counter()
                buffer.read_into(self.into.view(-1)).get()
                seconds.append(time.perf_counter() - start)
            return seconds

    workers = args.workers.split(",")
    if args.listen:  # Monarch's client listens on Unix sockets unless told
        from monarch.actor import enable_transport

        enable_transport(args.listen)
    results: dict[str, Any] = {}
    start = time.perf_counter()
    hosts = attach_to_workers(workers=workers, ca="trust_all_connections")
    hosts.initialized.get()
    results["attach"] = time.perf_counter() - start
    log(f"attach: {results['attach']:.3f} s")

    start = time.perf_counter()
    procs = hosts.spawn_procs(per_host={"gpus": 2})
    actors = procs.spawn("bench", Bench)
    n = len(workers) * 2
    assert list(actors.ping.call().get().values()) == [0] * n
    results["spawn"] = time.perf_counter() - start
    log(f"spawn {n}: {results['spawn']:.3f} s")

    quick = args.quick
    remote = actors.slice(hosts=len(workers) - 1, gpus=0)
    results["call_one"] = median_time(
        lambda: remote.ping.call_one().get(), 50 if quick else 1000, 20
    )
    log(f"call_one: {results['call_one'] * 1e6:.0f} us")
    results["call_all"] = median_time(lambda: actors.ping.call().get(), 20 if quick else 300, 10)
    log(f"call_all: {results['call_all'] * 1e6:.0f} us")

    rounds = 100 if quick else 2000
    start = time.perf_counter()
    for _ in range(rounds):
        actors.poke.broadcast()
    counts = actors.count.call().get().values()
    results["broadcast"] = rounds / (time.perf_counter() - start)
    assert all(c >= rounds for c in counts), counts
    log(f"broadcast: {results['broadcast']:.0f}/s")

    owner = actors.slice(hosts=1, gpus=0)
    reader = actors.slice(hosts=0, gpus=0)
    buffer = owner.buffer.call_one().get()
    seconds = reader.read.call_one(buffer, 3 if quick else 15).get()
    seconds = sorted(seconds)[1:] if len(seconds) > 2 else seconds  # the first warms up
    results["rdma_64m"] = (64 << 20) / sorted(seconds)[len(seconds) // 2]
    log(f"rdma 64 MiB: {results['rdma_64m'] / 1e9:.2f} GB/s")

    hosts.shutdown().get()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", choices=["ours", "monarch"], required=True)
    parser.add_argument("--workers", required=True, help="comma-separated worker addresses")
    parser.add_argument("--quick", action="store_true", help="fewer iterations (a smoke test)")
    parser.add_argument(
        "--listen", help="where this controller listens, for enable_transport (tcp://IP:0)"
    )
    args = parser.parse_args()
    print(json.dumps(workload(args)))


if __name__ == "__main__":
    main()
