"""Benchmarks across hosts, written once against the public ``monarch.actor``
and ``monarch.rdma`` API, so the same file runs against this project
(``--impl ours``) and torchmonarch 0.7.0 (``--impl monarch``, in its own
virtual environment).

This process is the controller; the workers (``run_worker_loop_forever``,
one per host) were started at ``--workers`` with it. It measures:

- ``worker_start`` (with ``--launched``, the wall-clock time the workers
  were started): seconds until the last of them accepts a TCP connection
  (seconds); attaching waits for that first, so that ``attach`` measures
  attaching to running workers, not their start;
- ``attach``: ``attach_to_workers(...)`` until ``initialized`` (seconds);
- ``spawn``: ``spawn_procs(per_host={"gpus": 2})`` on every host, spawning
  one actor per proc, until a first ``call()`` to all returns (seconds);
- ``spawn_again``: the same for a second proc mesh on the same hosts, which
  is then stopped (seconds): the first spawn, right after attaching, may
  also wait for what the workers still do at their own start;
- ``call_one``: ``call_one().get()`` round trip to an actor on another host
  (seconds, median);
- ``call_all``: ``call().get()`` to every actor (seconds, median);
  ``call_all_cpu``: the CPU seconds the whole machine (every process, user
  and kernel) spends per such call, over as many more calls;
- ``broadcast``: ``broadcast()`` to every actor, repeated, then one
  ``call()`` that returns after all of them (broadcasts/s);
- ``rdma_64m``: an actor on the first host reads 64 MiB that an actor on the
  second host registered as an ``RDMABuffer`` (bytes/s, median);
- ``lost`` (only with ``--kill PGID``): with a call to an actor on the last
  host pending, SIGKILL that host's worker process group (the worker and its
  procs), then seconds until the pending call raises (``lost``) and until
  ``unhandled_fault_hook`` hears of it (``lost_hook``); None where it did not
  within ``--lost-timeout`` (30 s);
- ``cut`` (only with ``--cut PREFIX:HOST``, the last host): the same with
  that host unplugged from the network instead
  (``tools/netns_hosts.py``'s ``cut``: nothing is closed, packets are lost),
  ``cut`` and ``cut_hook``;
- ``memory``: the resident (RSS) and proportional (PSS) set of one proc, of
  each worker (``--worker-pids``) and of this controller, after the spawn, in
  bytes.

``--per-host`` sets the procs per host (2), ``--measures`` which of the
above to take (all but ``lost`` and ``cut``; ``spawn`` always runs). Prints one JSON
object with those keys.

    python tools/bench/hosts_bench.py --impl ours --workers tcp://10.0.0.2:26600,...
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import time
from typing import Any

from _timing import log, machine_cpu, median_time

MEASURES = ("attach", "spawn", "spawn_again", "call_one", "call_all", "broadcast", "rdma_64m")


def memory(pid: int | str = "self") -> dict[str, int]:
    """Resident and proportional set size of a process, in bytes (Linux)."""
    sizes = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("Rss", "Pss"):
                sizes[key.lower()] = int(rest.split()[0]) * 1024
    return sizes


def wait_listening(addresses: list[str], seconds: float) -> None:
    """Return once every ``tcp://HOST:PORT`` accepts a connection (closed
    at once: neither runtime's worker minds one that says nothing)."""
    deadline = time.monotonic() + seconds
    for address in addresses:
        host, _, port = address.removeprefix("tcp://").rpartition(":")
        while True:
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"worker {address} did not listen in {seconds} s") from None
                time.sleep(0.002)


def workload(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    workers = args.workers.split(",")
    if args.launched:
        wait_listening(workers, 60)
        results["worker_start"] = time.time() - args.launched
        log(f"workers listening after {results['worker_start']:.3f} s")

    from monarch.actor import Actor, attach_to_workers, endpoint

    measures = set(args.measures.split(",")) | {"spawn"}

    class Bench(Actor):
        # torch is imported where it is used: a mesh that only calls stays light
        def __init__(self) -> None:
            self.pokes = 0

        @endpoint
        def ping(self) -> int:
            return 0

        @endpoint
        def memory(self) -> dict[str, int]:
            return memory()

        @endpoint
        def nap(self, seconds: float) -> float:
            time.sleep(seconds)
            return seconds

        @endpoint
        def poke(self) -> None:
            self.pokes += 1

        @endpoint
        def count(self) -> int:
            return self.pokes

        @endpoint
        def buffer(self) -> Any:
            import torch

            from monarch.rdma import RDMABuffer

            self.data = torch.ones(64 << 20, dtype=torch.uint8)
            return RDMABuffer(self.data.view(-1))

        @endpoint
        def read(self, buffer: Any, times: int) -> list[float]:
            import torch

            self.into = torch.zeros(64 << 20, dtype=torch.uint8)
            seconds = []
            for _ in range(times):
                start = time.perf_counter()
                buffer.read_into(self.into.view(-1)).get()
                seconds.append(time.perf_counter() - start)
            return seconds

    if args.listen:  # Monarch's client listens on Unix sockets unless told
        from monarch.actor import enable_transport

        enable_transport(args.listen)
    start = time.perf_counter()
    hosts = attach_to_workers(workers=workers, ca="trust_all_connections")
    hosts.initialized.get()
    results["attach"] = time.perf_counter() - start
    log(f"attach: {results['attach']:.3f} s")

    start = time.perf_counter()
    procs = hosts.spawn_procs(per_host={"gpus": args.per_host})
    actors = procs.spawn("bench", Bench)
    n = len(workers) * args.per_host
    assert list(actors.ping.call().get(timeout=args.timeout).values()) == [0] * n
    results["spawn"] = time.perf_counter() - start
    log(f"spawn {n}: {results['spawn']:.3f} s")
    if "spawn_again" in measures:
        # a second mesh on the same hosts: the workers are settled by now (the
        # first spawn, right after attaching, also waits for what they still do
        # at their own start, as they start with this controller)
        start = time.perf_counter()
        more = hosts.spawn_procs(per_host={"gpus": args.per_host})
        again = more.spawn("bench", Bench)
        assert list(again.ping.call().get(timeout=args.timeout).values()) == [0] * n
        results["spawn_again"] = time.perf_counter() - start
        log(f"spawn {n} again: {results['spawn_again']:.3f} s")
        more.stop().get(timeout=args.timeout)
    results["memory"] = {
        "proc": actors.slice(hosts=0, gpus=0).memory.call_one().get(),
        "workers": [memory(pid) for pid in args.worker_pids.split(",") if pid],
        "controller": memory(),
    }
    log(f"memory: {results['memory']}")

    quick = args.quick
    # fewer rounds for bigger meshes: each round reaches every actor
    scale = max(1, n // 6)
    if "call_one" in measures:
        remote = actors.slice(hosts=len(workers) - 1, gpus=0)
        results["call_one"] = median_time(
            lambda: remote.ping.call_one().get(), 50 if quick else 1000, 20
        )
        log(f"call_one: {results['call_one'] * 1e6:.0f} us")
    if "call_all" in measures:
        samples = 20 if quick else max(30, 300 // scale)
        results["call_all"] = median_time(lambda: actors.ping.call().get(), samples, 10)
        log(f"call_all: {results['call_all'] * 1e6:.0f} us")
        # what the machine's cores spend on one: with every process on this
        # one machine, the call cannot take less than this over the core count
        results["call_all_cpu"] = machine_cpu(lambda: actors.ping.call().get(), samples)
        log(f"call_all_cpu: {results['call_all_cpu'] * 1e6:.0f} us")

    if "broadcast" in measures:
        rounds = 100 if quick else max(50, 2000 // scale)
        start = time.perf_counter()
        for _ in range(rounds):
            actors.poke.broadcast()
        counts = actors.count.call().get(timeout=args.timeout).values()
        results["broadcast"] = rounds / (time.perf_counter() - start)
        assert all(c >= rounds for c in counts), counts
        log(f"broadcast: {results['broadcast']:.0f}/s")

    if "rdma_64m" in measures:
        results["rdma_64m"] = rdma(actors, quick)
        log(f"rdma 64 MiB: {results['rdma_64m'] / 1e9:.2f} GB/s")

    if args.cut:
        prefix, host = args.cut.split(":")
        results.update(
            lose(actors, len(workers) - 1, "cut", args.lost_timeout, lambda: cut(prefix, host))
        )
    elif args.kill:
        pgid = args.kill
        results.update(
            lose(
                actors,
                len(workers) - 1,
                "lost",
                args.lost_timeout,
                lambda: os.killpg(pgid, signal.SIGKILL),  # the worker and every proc
            )
        )
    if args.cut or args.kill:
        return results  # the mesh is broken: the caller ends the hosts

    hosts.shutdown().get()
    return results


def lose(actors: Any, host: int, key: str, timeout: float, end: Any) -> dict[str, Any]:
    """With a call to an actor on ``host`` pending, ``end()`` that host; then
    seconds until the call raises (``key``) and until ``unhandled_fault_hook``
    hears of it (``key_hook``), None where that did not happen in ``timeout``."""
    import monarch.actor

    heard: list[float] = []
    monarch.actor.unhandled_fault_hook = lambda failure: heard.append(time.perf_counter())
    pending = actors.slice(hosts=host, gpus=0).nap.call_one(120.0)
    time.sleep(0.5)  # the call is delivered and running
    start = time.perf_counter()
    end()
    results: dict[str, Any] = {key: None, f"{key}_hook": None, f"{key}_timeout": timeout}
    try:
        pending.get(timeout=timeout)
    except Exception as error:  # whatever each implementation raises
        took = time.perf_counter() - start
        results[f"{key}_error"] = f"{type(error).__name__}: {str(error)[:300]}"
        if "timeout" not in type(error).__name__.lower():  # not our own bound
            results[key] = took
        log(f"{key} after {took:.3f} s: {results[f'{key}_error']}")
    deadline = start + timeout
    while not heard and time.perf_counter() < deadline:
        time.sleep(0.01)
    results[f"{key}_hook"] = heard[0] - start if heard else None
    log(f"{key}_hook: {results[f'{key}_hook']}")
    return results


def cut(prefix: str, host: str) -> None:
    """Unplug network-namespace host ``host`` of ``prefix`` (tools/netns_hosts.py)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import netns_hosts

    netns_hosts.cut(prefix, host)


def rdma(actors: Any, quick: bool) -> float:
    owner = actors.slice(hosts=1, gpus=0)
    reader = actors.slice(hosts=0, gpus=0)
    buffer = owner.buffer.call_one().get()
    seconds = reader.read.call_one(buffer, 3 if quick else 15).get()
    seconds = sorted(seconds)[1:] if len(seconds) > 2 else seconds  # the first warms up
    return (64 << 20) / sorted(seconds)[len(seconds) // 2]


def plot(data: str, out: str) -> None:
    """Draw the scale suite's results (``run.py``'s JSON: label -> procs ->
    result) as four panels against mesh size, one line per implementation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    with open(data) as f:
        results = json.load(f)
    panels = (
        ("spawn", "spawn + first call to all (s)", 1),
        ("call_all", "call to all and gather, median (ms)", 1e3),
        ("broadcast", "broadcasts/s", 1),
        ("lost", "lost host: pending call raises (s)", 1),
    )
    # the lost-host panel shows a host killed (solid) and one cut off (dashed)
    beside = {"lost": ("cut", "cut off", "--")}
    colors = {label: f"C{i}" for i, label in enumerate(results)}
    fig, axes = plt.subplots(2, 2, figsize=(9.6, 6.4), dpi=110)
    sizes: set[int] = set()
    for ax, (key, title, unit) in zip(axes.flat, panels, strict=True):
        series = [(key, "killed" if key in beside else "", "-")]
        if key in beside:
            series.append(beside[key])
        for label, by_size in results.items():
            for measure, how, style in series:
                points = sorted(
                    (int(n), r[measure] * unit)
                    for n, r in by_size.items()
                    if r and r.get(measure) is not None
                )
                if points:
                    sizes |= {n for n, _ in points}
                    name = f"{label}, {how}" if how else label
                    ax.plot(
                        *zip(*points, strict=True),
                        marker="o",
                        linestyle=style,
                        color=colors[label],
                        label=name,
                    )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    for ax in axes.flat:
        ax.set_xticks(sorted(sizes), [str(n) for n in sorted(sizes)])
        ax.xaxis.set_minor_locator(ticker.NullLocator())
        ax.yaxis.set_major_locator(ticker.LogLocator(subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    for ax in axes[1]:
        ax.set_xlabel("procs in the mesh (hosts = min(16, procs / 2))")
    fig.suptitle("Scale: one actor per proc, up to 16 network-namespace hosts")
    fig.tight_layout()
    fig.savefig(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", choices=["ours", "monarch"])
    parser.add_argument("--workers", help="comma-separated worker addresses")
    parser.add_argument("--quick", action="store_true", help="fewer iterations (a smoke test)")
    parser.add_argument(
        "--listen", help="where this controller listens, for enable_transport (tcp://IP:0)"
    )
    parser.add_argument(
        "--launched", type=float, help="when the workers were started (time.time()): wait for them"
    )
    parser.add_argument("--per-host", type=int, default=2, help="procs per host")
    parser.add_argument(
        "--measures", default=",".join(MEASURES), help=f"which of {','.join(MEASURES)}"
    )
    # one way to lose the last host a run: the other's report would follow a broken mesh
    lose_by = parser.add_mutually_exclusive_group()
    lose_by.add_argument("--kill", type=int, help="then kill this worker process group (lost)")
    lose_by.add_argument(
        "--cut",
        help="PREFIX:HOST: then unplug this network-namespace host, the last one (cut)",
    )
    parser.add_argument("--worker-pids", default="", help="comma-separated, for their memory")
    parser.add_argument(
        "--lost-timeout", type=float, default=30, help="how long to wait for a lost host's report"
    )
    parser.add_argument("--timeout", type=float, default=300, help="bound on the spawn's call")
    parser.add_argument("--plot", help="instead: draw the scale suite's JSON into --out")
    parser.add_argument("--out", help="the PNG --plot draws")
    args = parser.parse_args()
    if args.plot:
        plot(args.plot, args.out)
        return
    if not args.impl or not args.workers:
        parser.error("--impl and --workers are required (unless --plot)")
    results = workload(args)
    print(json.dumps(results), flush=True)
    if args.kill or args.cut:  # a lost host may leave either runtime waiting on it at exit
        os._exit(0)


if __name__ == "__main__":
    main()
