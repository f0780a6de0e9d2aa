"""Actor runtime benchmarks, written once against the public ``monarch.actor``
API, so the same file runs against this project (``--impl ours``) and against
torchmonarch 0.7.0 (``--impl monarch``, in its own virtual environment). The
same work for Ray is in ``ray_actor_bench.py``.

This process is the client. It spawns processes on this host, one actor in
each, and measures:

- ``spawn8``: ``spawn_procs(per_host={"gpus": 8})``, spawning the actors and
  the first ``call()`` to all 8 returning (seconds, best of ``--repeat``),
  after one warm-up spawn of a single process (bringing the host up, as
  Ray's ``ray.init()`` is left out on that side);
- ``call_one``: ``call_one().get()`` round trip to one actor in another
  process (seconds, median);
- ``call8``: ``call().get()`` to the 8 actors (seconds, median);
- ``call_one_cpu``, ``call8_cpu``: the CPU seconds the whole machine
  (every process, user and kernel) spends per such call, over as many more;
- ``pipelined``: 5,000 ``call_one`` issued, then all awaited (calls/s);
- ``broadcast``: ``broadcast()`` to the 8 actors, repeated, then one
  ``call()`` that returns after all of them (broadcasts/s);
- ``echo_1m``, ``echo_64m``: bytes sent to an actor that returns them (bytes
  round-tripped per second, counting both directions, median);
- ``sweep``: for each size in ``--sweep``, a fresh proc mesh
  ``{"gpus": n}``: its spawn time and the median ``call().get()`` with a tiny
  payload; each mesh is stopped before the next.

Prints one JSON object with those keys. ``--plot`` instead draws the sweep
of several result files (see ``run.py``) into a PNG with matplotlib.

    python tools/bench/actor_bench.py --impl ours [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from _timing import SWEEP, best_time, log, machine_cpu, median_time, sizes


def workload(args: argparse.Namespace) -> dict[str, Any]:
    from monarch.actor import Actor, endpoint, this_host

    class Bench(Actor):
        def __init__(self) -> None:
            self.pokes = 0

        @endpoint
        def ping(self) -> int:
            return 0

        @endpoint
        def add(self, x: int) -> int:
            return x + 1

        @endpoint
        def poke(self) -> None:
            self.pokes += 1

        @endpoint
        def count(self) -> int:
            return self.pokes

        @endpoint
        def echo(self, data: bytes) -> bytes:
            return data

    quick = args.quick
    host = this_host()

    def spawn(n: int) -> tuple[Any, Any, float]:
        start = time.perf_counter()
        procs = host.spawn_procs(per_host={"gpus": n})
        actors = procs.spawn("bench", Bench)
        assert actors.ping.call().get().values() == [0] * n
        return procs, actors, time.perf_counter() - start

    results: dict[str, Any] = {}
    procs, _, _ = spawn(1)  # warm-up: brings the host (agent, fork server) up
    procs.stop().get()
    best = float("inf")
    for i in range(args.repeat):
        procs, actors, spawned = spawn(8)
        best = min(best, spawned)
        if i < args.repeat - 1:
            procs.stop().get()
    results["spawn8"] = best
    log(f"spawn8 {best:.3f} s")

    one = actors.slice(gpus=1)
    results["call_one"] = median_time(
        lambda: one.ping.call_one().get(), 200 if quick else 2000, 200
    )
    log(f"call_one {results['call_one'] * 1e6:.0f} µs")
    results["call8"] = median_time(lambda: actors.ping.call().get(), 100 if quick else 500, 50)
    log(f"call8 {results['call8'] * 1e6:.0f} µs")
    # the CPU the whole machine spends on each (see _timing.machine_cpu)
    results["call_one_cpu"] = machine_cpu(lambda: one.ping.call_one().get(), 200 if quick else 2000)
    results["call8_cpu"] = machine_cpu(lambda: actors.ping.call().get(), 100 if quick else 500)
    cpu_one, cpu8 = results["call_one_cpu"] * 1e6, results["call8_cpu"] * 1e6
    log(f"CPU: call_one {cpu_one:.0f} µs, call8 {cpu8:.0f} µs")

    calls = 1000 if quick else 5000

    def pipelined() -> None:
        futures = [one.add.call_one(i) for i in range(calls)]
        assert [f.get() for f in futures] == list(range(1, calls + 1))

    results["pipelined"] = calls / best_time(pipelined, args.repeat)
    log(f"pipelined {results['pipelined']:,.0f} calls/s")

    casts = 200 if quick else 1000

    def broadcasts() -> None:
        before = actors.count.call().get().values()
        start = time.perf_counter()
        for _ in range(casts):
            actors.poke.broadcast()
        after = actors.count.call().get().values()
        cast_times.append(time.perf_counter() - start)
        assert [a - b for a, b in zip(after, before, strict=True)] == [casts] * 8

    cast_times: list[float] = []
    for _ in range(args.repeat):
        broadcasts()
    results["broadcast"] = casts / min(cast_times)
    log(f"broadcast {results['broadcast']:,.0f} broadcasts/s")

    for key, size, samples in (("echo_1m", 1 << 20, 50), ("echo_64m", 64 << 20, 5)):
        data = os.urandom(size)

        def echo(data: bytes = data) -> None:
            assert len(one.echo.call_one(data).get()) == len(data)

        samples = 3 if quick else samples
        results[key] = 2 * size / median_time(echo, samples, 1)
        log(f"{key} {results[key] / 1e9:.3f} GB/s")
    procs.stop().get()

    sweep = {}
    for n in args.sweep:
        procs, actors, took_s = spawn(n)
        call = median_time(lambda actors=actors: actors.ping.call().get(), 20, 5)
        sweep[str(n)] = {"spawn": took_s, "call": call}
        log(f"sweep {n}: spawn {took_s:.2f} s, call {call * 1e3:.2f} ms")
        procs.stop().get()
    results["sweep"] = sweep
    return results


def plot(files: list[str], out: str) -> None:
    """Draw call latency against mesh size, one line per ``label=results.json``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    for spec in files:
        label, path = spec.split("=", 1)
        with open(path) as f:
            sweep = json.load(f).get("sweep") or {}
        sizes = sorted(int(n) for n in sweep)
        if sizes:
            values = [sweep[str(n)]["call"] * 1e3 for n in sizes]
            ax.plot(sizes, values, marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(list(SWEEP), [str(n) for n in SWEEP])
    ax.set_xlabel("processes in the mesh (one actor each)")
    ax.set_ylabel("mesh.ep.call().get(), median (ms)")
    ax.set_title("Call to every actor and gather, by mesh size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--impl", choices=["ours", "monarch"])
    parser.add_argument("--repeat", type=int, default=3, help="spawns and rate runs; best counts")
    parser.add_argument("--quick", action="store_true", help="fewer iterations (a smoke test)")
    parser.add_argument(
        "--sweep",
        type=sizes,
        default=list(SWEEP),
        help="mesh sizes for the latency sweep, comma separated ('' for none)",
    )
    parser.add_argument("--plot", nargs="+", metavar="LABEL=FILE", help="draw the sweep instead")
    parser.add_argument("--out", default="broadcast-latency.png", help="where --plot draws")
    args = parser.parse_args()
    if args.plot:
        plot(args.plot, args.out)
        return
    if not args.impl:
        parser.error("--impl is required")
    start = time.perf_counter()
    results = workload(args)
    results["wall"] = time.perf_counter() - start
    print(json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
