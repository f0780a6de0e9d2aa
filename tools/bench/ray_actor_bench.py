"""The actor benchmarks of ``actor_bench.py``, the same work written for Ray
(run in ``.bench-venvs/ray``). Ray has no meshes, so a "mesh" here is a list
of actors, each in its own worker process; ``ray.init()`` runs once, before
anything is timed, and its time is reported as ``init``.

- ``spawn8``: create 8 actors and get one call from each (best of
  ``--repeat``, after one warm-up actor);
- ``call_one``: ``ray.get(a.ping.remote())`` (median);
- ``call8``: ``ray.get([a.ping.remote() for a in actors])`` (median);
- ``call_one_cpu``, ``call8_cpu``: the machine's CPU per such call;
- ``pipelined``: 5,000 ``a.add.remote(i)`` submitted, then one ``ray.get``
  of all (calls/s);
- ``broadcast``: ``a.poke.remote()`` to each of the 8 actors without waiting,
  repeated, then one ``count`` call to each, which Ray runs after the pokes
  (broadcasts/s);
- ``echo_1m``, ``echo_64m``: bytes to an actor that returns them (bytes
  round-tripped per second, both directions, median);
- ``sweep``: spawn time and median gather over ``--sweep`` actor counts.

Prints one JSON object with those keys.

    python tools/bench/ray_actor_bench.py [--quick] [--sweep 1,2,4]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from _timing import SWEEP, log, machine_cpu, median_time, sizes


def workload(args: argparse.Namespace) -> dict[str, Any]:
    import ray

    results: dict[str, Any] = {}
    start = time.perf_counter()
    ray.init(
        num_cpus=os.cpu_count(),
        object_store_memory=2 * 10**9,
        include_dashboard=False,
        log_to_driver=False,
    )
    results["init"] = time.perf_counter() - start
    results["version"] = ray.__version__
    log(f"ray.init {results['init']:.2f} s (not counted)")

    # num_cpus=0 so that 64 actors fit on a small machine, as processes do in
    # the Monarch workload; each actor still gets a worker process of its own.
    @ray.remote(num_cpus=0)
    class Bench:
        def __init__(self) -> None:
            self.pokes = 0

        def ping(self) -> int:
            return 0

        def add(self, x: int) -> int:
            return x + 1

        def poke(self) -> None:
            self.pokes += 1

        def count(self) -> int:
            return self.pokes

        def echo(self, data: bytes) -> bytes:
            return data

    quick = args.quick

    def spawn(n: int) -> tuple[list[Any], float]:
        start = time.perf_counter()
        actors = [Bench.remote() for _ in range(n)]  # type: ignore[attr-defined]
        assert ray.get([a.ping.remote() for a in actors]) == [0] * n
        return actors, time.perf_counter() - start

    def stop(actors: list[Any]) -> None:
        for a in actors:
            ray.kill(a)

    stop(spawn(1)[0])  # warm-up
    best = float("inf")
    for i in range(args.repeat):
        actors, spawned = spawn(8)
        best = min(best, spawned)
        if i < args.repeat - 1:
            stop(actors)
    results["spawn8"] = best
    log(f"spawn8 {best:.3f} s")

    one = actors[1]
    results["call_one"] = median_time(
        lambda: ray.get(one.ping.remote()), 200 if quick else 2000, 200
    )
    log(f"call_one {results['call_one'] * 1e6:.0f} µs")
    results["call8"] = median_time(
        lambda: ray.get([a.ping.remote() for a in actors]), 100 if quick else 500, 50
    )
    log(f"call8 {results['call8'] * 1e6:.0f} µs")
    results["call_one_cpu"] = machine_cpu(
        lambda: ray.get(one.ping.remote()), 200 if quick else 2000
    )
    results["call8_cpu"] = machine_cpu(
        lambda: ray.get([a.ping.remote() for a in actors]), 100 if quick else 500
    )

    calls = 1000 if quick else 5000
    best = float("inf")
    for _ in range(args.repeat):
        start = time.perf_counter()
        refs = [one.add.remote(i) for i in range(calls)]
        assert ray.get(refs) == list(range(1, calls + 1))
        best = min(best, time.perf_counter() - start)
    results["pipelined"] = calls / best
    log(f"pipelined {results['pipelined']:,.0f} calls/s")

    casts = 200 if quick else 1000
    best = float("inf")
    for _ in range(args.repeat):
        before = ray.get([a.count.remote() for a in actors])
        start = time.perf_counter()
        for _ in range(casts):
            for a in actors:
                a.poke.remote()
        after = ray.get([a.count.remote() for a in actors])
        best = min(best, time.perf_counter() - start)
        assert [x - y for x, y in zip(after, before, strict=True)] == [casts] * 8
    results["broadcast"] = casts / best
    log(f"broadcast {results['broadcast']:,.0f} broadcasts/s")

    for key, size, samples in (("echo_1m", 1 << 20, 50), ("echo_64m", 64 << 20, 5)):
        data = os.urandom(size)

        def echo(data: bytes = data) -> None:
            assert len(ray.get(one.echo.remote(data))) == len(data)

        samples = 3 if quick else samples
        results[key] = 2 * size / median_time(echo, samples, 1)
        log(f"{key} {results[key] / 1e9:.3f} GB/s")
    stop(actors)

    sweep = {}
    for n in args.sweep:
        actors, took = spawn(n)
        call = median_time(
            lambda actors=actors: ray.get([a.ping.remote() for a in actors]),
            20,
            5,
        )
        sweep[str(n)] = {"spawn": took, "call": call}
        log(f"sweep {n}: spawn {took:.2f} s, call {call * 1e3:.2f} ms")
        stop(actors)
    results["sweep"] = sweep
    ray.shutdown()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--impl", choices=["ray"], default="ray")
    parser.add_argument("--repeat", type=int, default=3, help="spawns and rate runs; best counts")
    parser.add_argument("--quick", action="store_true", help="fewer iterations (a smoke test)")
    parser.add_argument(
        "--sweep",
        type=sizes,
        default=list(SWEEP),
        help="actor counts for the latency sweep, comma separated ('' for none)",
    )
    args = parser.parse_args()
    start = time.perf_counter()
    results = workload(args)
    results["wall"] = time.perf_counter() - start
    print(json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
