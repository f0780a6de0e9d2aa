"""Run the benchmarks side by side with Monarch (torchmonarch) and write the
ratios into docs/benchmarks.md.

    hatch run bench mesh            # measure, print the table
    hatch run bench mesh --write    # ... and update docs/benchmarks.md
    hatch run bench actor --write   # actors: ours, Monarch and Ray; draws the plot
    hatch run bench cpu --write     # CPU per call_one: ours, Monarch, the plain Python floor
    hatch run bench rdma --write    # RDMA buffers: ours (same host, tcp), Monarch, memcpy
    hatch run bench hosts --write   # 3 hosts in network namespaces: ours and Monarch (root)
    hatch run bench scale --write   # 8 to 256 procs on up to 16 namespace hosts (root)
    hatch run bench tensor --write  # distributed tensors on 4 procs: ours and Monarch
    hatch run bench cuda            # 64 MiB CUDA tensor echo: IPC, staged, CPU (needs a GPU)

torchmonarch is installed into a virtual environment of its own (its module
name clashes with ours), created on first use under .bench-venvs/; so is Ray
for the actor suite.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[2]
BENCH = Path(__file__).resolve().parent
VENVS = ROOT / ".bench-venvs"
MONARCH = ("torch==2.13.0", "torchmonarch==0.7.0")
RAY = ("ray",)
CONSTRAINTS = ROOT / "tools" / "constraints.txt"
console = Console(stderr=True)


def bench_python(name: str, packages: tuple[str, ...], explicit: str | None) -> Path:
    """A Python with ``packages``, in ``.bench-venvs/<name>``, made on first use."""
    if explicit:
        return Path(explicit)
    python = VENVS / name / "bin" / "python"
    if not python.exists():
        console.print(f"[bold]creating {python.parent.parent}[/] with {', '.join(packages)} ...")
        venv.create(python.parent.parent, with_pip=True)
        pip = [python, "-m", "pip", "install", "--quiet", "-c", CONSTRAINTS]
        subprocess.run([*pip, *packages], check=True)
    return python


def monarch_python(explicit: str | None) -> Path:
    """A Python with torchmonarch 0.7.0 (its ``monarch`` clashes with ours)."""
    return bench_python("torchmonarch", MONARCH, explicit)


def measure(python: Path | str, script: str, impl: str, repeat: int) -> dict[str, float]:
    console.print(f"measuring [bold]{impl}[/] with {python} ...")
    out = subprocess.run(
        [str(python), str(BENCH / script), "--impl", impl, "--repeat", str(repeat)],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": ""},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


class Both:
    """One table, printed on the terminal (rich) and kept as markdown rows
    for the page. Tables on the page stay at most six columns wide: wider
    ones do not fit the docs' text column."""

    def __init__(self, title: str, header: tuple[str, ...] | list[str]) -> None:
        self.table = Table(title=title)
        for i, column in enumerate(header):
            self.table.add_column(column, justify="left" if i == 0 else "right")
        self.rows = [md_row(header), "|" + "---|" * len(header)]

    def add(self, *cells: str) -> None:
        self.table.add_row(*cells)
        self.rows.append(md_row(cells))

    def done(self) -> list[str]:
        """Print the table; its markdown rows."""
        Console().print(self.table)
        return self.rows


def md_row(cells: tuple[str, ...] | list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def duration(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def mesh(args: argparse.Namespace) -> str:
    ours = measure(sys.executable, "mesh_ops.py", "ours", args.repeat)
    theirs = measure(monarch_python(args.monarch_python), "mesh_ops.py", "monarch", args.repeat)
    both = Both(
        "mesh algebra on a 1,000,000-rank mesh {hosts: 125000, gpus: 8}",
        ("operation", "ours", "Monarch 0.7.0", "ours / Monarch (time)"),
    )
    for name, ours_s in ours.items():
        theirs_s = theirs.get(name)
        ratio = f"{ours_s / theirs_s:.1f}×" if theirs_s else "—"
        both.add(name, duration(ours_s), duration(theirs_s) if theirs_s else "n/a", ratio)
    rows = both.done()
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    return "\n".join([f"Measured on {machine}; best of {args.repeat} runs.", "", *rows])


def transport(args: argparse.Namespace) -> str:
    console.print("measuring transports against raw pynng and raw sockets ...")
    out = subprocess.run(
        [sys.executable, str(BENCH / "transport_bench.py")],
        check=True,
        capture_output=True,
        text=True,
    )
    results = json.loads(out.stdout.strip().splitlines()[-1])
    tables = (
        Both("round trip of a small message", ("backend / family", "ours", "floor", "× floor")),
        Both("one-way small messages per second", ("backend / family", "ours", "floor")),
        Both(
            "64 MiB echo (GB/s)",
            ("backend / family", "ours", "floor", "× floor (time)"),
        ),
    )
    for family in ("ipc", "tcp"):
        for backend, floor in (("nng", "raw-pynng"), ("socket", "raw-socket")):
            ours, raw = results[f"{backend}/{family}"], results[f"{floor}/{family}"]
            name = f"{backend} / {family}"
            tables[0].add(
                name,
                f"{ours['rt_us']:.0f} µs",
                f"{raw['rt_us']:.0f} µs",
                f"{ours['rt_us'] / raw['rt_us']:.2f}×",
            )
            tables[1].add(name, f"{ours['msgs_per_s']:,.0f}", f"{raw['msgs_per_s']:,.0f}")
            tables[2].add(
                name,
                f"{ours['big_gbps']:.2f}",
                f"{raw['big_gbps']:.2f}",
                f"{raw['big_gbps'] / ours['big_gbps']:.2f}×",
            )
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    rows = [f"Measured on {machine}. The floor is raw pynng or raw sockets doing the same work."]
    for both in tables:
        rows += ["", f"**{both.table.title[0].upper()}{both.table.title[1:]}**", "", *both.done()]
    return "\n".join(rows)


def ray_python(explicit: str | None) -> Path:
    """A Python with Ray."""
    return bench_python("ray", RAY, explicit)


def run_json(python: Path | str, argv: list[str], timeout: float) -> dict[str, Any] | None:
    """Run a benchmark script, return the JSON object on its last line; None if
    it fails or overruns (its whole process group is killed then)."""
    console.print(f"running {Path(argv[0]).name} {' '.join(argv[1:])} with {python} ...")
    proc = subprocess.Popen(
        [str(python), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": ""},
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        console.print(f"[red]timed out after {timeout:.0f} s[/]")
    lines = out.strip().splitlines()
    if proc.returncode == 0 and lines:
        return json.loads(lines[-1])
    console.print(f"[red]failed (exit {proc.returncode})[/]:\n" + "\n".join(err.splitlines()[-25:]))
    return None


# (key, measure, "time" or "rate", unit of a rate, target: (≤ or ≥, factor) or None)
ACTOR_ROWS: tuple[tuple[str, str, str, str, tuple[str, float] | None], ...] = (
    ("spawn8", "spawn 8 procs + actors, first call to all back", "time", "", ("≤", 0.5)),
    ("call_one", "call_one round trip, one actor", "time", "", ("≤", 0.2)),
    ("call8", "call to 8 actors and gather", "time", "", ("≤", 0.2)),
    ("call_one_cpu", "CPU of the whole machine per call_one", "time", "", None),
    ("call8_cpu", "CPU of the whole machine per call to 8", "time", "", None),
    ("pipelined", "5,000 pipelined calls to one actor", "rate", "calls/s", ("≥", 4.0)),
    ("broadcast", "broadcast to 8 actors", "rate", "broadcasts/s", ("≥", 4.0)),
    ("echo_1m", "1 MiB echo", "rate", "GB/s", None),
    ("echo_64m", "64 MiB echo", "rate", "GB/s", ("≥", 2.0)),
)


def best_of(
    turns: list[dict[str, Any] | None],
    measures: tuple[tuple[str, str, str, str, tuple[str, float] | None], ...],
) -> dict[str, Any] | None:
    """One result from several turns of the same benchmark: the least time
    and the highest rate of each measure; anything else from the first
    turn that has it."""
    done = [turn for turn in turns if turn]
    if not done:
        return None
    best: dict[str, Any] = {}
    for turn in done:
        for key, value in turn.items():
            best.setdefault(key, value)
    for key, _, kind, _, _ in measures:
        values = [turn[key] for turn in done if key in turn]
        if values:
            best[key] = min(values) if kind == "time" else max(values)
    return best


def rate(value: float, unit: str) -> str:
    return f"{value / 1e9:.2f} GB/s" if unit == "GB/s" else f"{value:,.0f} {unit}"


def compare(
    title: str,
    measures: tuple[tuple[str, str, str, str, tuple[str, float] | None], ...],
    results: dict[str, dict[str, Any] | None],
) -> list[str]:
    """Print and return (as markdown rows) each measure for every
    implementation in ``results``, with ours / Monarch's ratio against its target."""
    labels = list(results)
    ours, theirs = results["ours"] or {}, results["Monarch 0.7.0"] or {}
    both = Both(title, ("measure", *labels, "ours / Monarch", "target"))
    for key, name, kind, unit, target in measures:
        ratio, goal = "—", "—"
        if target:
            goal = f"{target[0]} {target[1]:g}× {kind}"
        if key in ours and key in theirs:
            value = ours[key] / theirs[key]
            ratio = f"{value:.2f}× {kind}"
            if target:
                met = value <= target[1] if target[0] == "≤" else value >= target[1]
                goal += ": **met**" if met else ": missed"
        cells = [name]
        for label in labels:
            result = results[label] or {}
            if key not in result:
                cells.append("failed" if not result else "n/a")
            else:
                cells.append(duration(result[key]) if kind == "time" else rate(result[key], unit))
        both.add(*cells, ratio, goal)
    return both.done()


def actor(args: argparse.Namespace) -> str:
    began = time.perf_counter()
    bench = str(BENCH / "actor_bench.py")
    repeat = ["--repeat", str(args.repeat)]
    monarch = monarch_python(args.monarch_python)
    # ours and Monarch take turns, round after round, and each keeps its best:
    # this machine's speed drifts over minutes, and one turn each would
    # compare one implementation's good minute with the other's bad one
    runs: dict[str, list[dict[str, Any] | None]] = {"ours": [], "Monarch 0.7.0": []}
    for turn in range(args.rounds):
        sweep = [] if turn == 0 else ["--sweep", ""]  # the mesh-size sweep runs once
        runs["ours"].append(
            run_json(sys.executable, [bench, "--impl", "ours", *repeat, *sweep], 540)
        )
        runs["Monarch 0.7.0"].append(
            run_json(monarch, [bench, "--impl", "monarch", *repeat, *sweep], 540)
        )
    results = {label: best_of(turns, ACTOR_ROWS) for label, turns in runs.items()}
    results["Ray"] = run_json(
        ray_python(args.ray_python), [str(BENCH / "ray_actor_bench.py"), *repeat], 540
    )
    ray = results["Ray"] or {}

    rows = compare(
        "actors: ours, Monarch 0.7.0 and Ray, 8 processes on this host", ACTOR_ROWS, results
    )

    sweeps = {label: (r or {}).get("sweep") or {} for label, r in results.items()}
    sizes = sorted({int(n) for sweep in sweeps.values() for n in sweep})
    calls = Both(
        "call().get() to every actor, by mesh size (median)",
        ("procs", *sweeps, "ours / Monarch (time)"),
    )
    spawns = Both("spawn, by mesh size", ("procs", *sweeps))
    for n in sizes:
        got = [sweep.get(str(n)) for sweep in sweeps.values()]
        ours_n, theirs_n = sweeps["ours"].get(str(n)), sweeps["Monarch 0.7.0"].get(str(n))
        ratio = f"{ours_n['call'] / theirs_n['call']:.2f}×" if ours_n and theirs_n else "—"
        calls.add(str(n), *(duration(g["call"]) if g else "—" for g in got), ratio)
        spawns.add(str(n), *(duration(g["spawn"]) if g else "—" for g in got))
    sweep_rows = [
        *calls.done(),
        "",
        "Spawn by mesh size (as in the first table):",
        "",
        *spawns.done(),
    ]

    if args.write and any(sweeps.values()):
        image = ROOT / "docs" / "img" / "broadcast-latency.png"
        image.parent.mkdir(parents=True, exist_ok=True)
        monarch = plotting_python(args.monarch_python)
        with tempfile.TemporaryDirectory() as tmp:
            specs = []
            for label, result in results.items():
                if result and result.get("sweep"):
                    path = Path(tmp) / f"{len(specs)}.json"
                    path.write_text(json.dumps(result))
                    specs.append(f"{label}={path}")
            subprocess.run([monarch, bench, "--plot", *specs, "--out", image], check=True)
        console.print(f"drew {image.relative_to(ROOT)}")

    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    ray_version = f"Ray {ray['version']}" if "version" in ray else "Ray"
    took = time.perf_counter() - began
    return "\n".join(
        [
            f"Measured on {machine}, against Monarch 0.7.0 and {ray_version}; the suite took "
            f"{took / 60:.1f} minutes. Round trips and echoes are medians (of 2,000, 500, 50 "
            f"and 5); spawn and the call and broadcast rates the best of {args.repeat} runs. "
            f"Ours and Monarch ran {args.rounds} times each, taking turns, and each measure "
            "is the best of those turns (the mesh-size tables are from the first). "
            "The ratio is ours / Monarch as *time* for times (below 1× is faster) and as "
            "*rate* for rates (above 1× is faster); echo rates count the bytes both ways.",
            "",
            *rows,
            "",
            "By mesh size: `call().get()` with a tiny payload to every actor, median.",
            "",
            *sweep_rows,
        ]
    )


# (key, what) of the rdma suite's rows
RDMA_ROWS = (
    ("read_1m", "read_into 1 MiB"),
    ("write_1m", "write_from 1 MiB"),
    ("read_64m", "read_into 64 MiB"),
    ("write_64m", "write_from 64 MiB"),
)


def rdma(args: argparse.Namespace) -> str:
    """RDMA buffers between two processes of this host: ours (same-host
    backend and tcp forced) against Monarch's RDMABuffer (its TCP fallback),
    this machine's memcpy and an in-process torch ``copy_`` of the same
    size, all in one run."""
    bench = str(BENCH / "rdma_bench.py")
    ours = run_json(sys.executable, [bench, "--impl", "ours"], 540) or {}
    theirs = run_json(monarch_python(args.monarch_python), [bench, "--impl", "monarch"], 540)
    monarch = (theirs or {}).get("monarch", {})
    same, tcp = ours.get("auto", {}), ours.get("tcp", {})
    memcpy = ours.get("memcpy_64m") or (theirs or {}).get("memcpy_64m")
    rates = Both(
        "RDMABuffer between two processes of this host (GB/s, median)",
        (
            "transfer",
            f"ours, same host ({same.get('backend', '?')})",
            "ours, tcp",
            "Monarch 0.7.0 (tcp)",
        ),
    )
    shares = Both(
        "the same, as ratios",
        (
            "transfer",
            "same host / Monarch",
            "tcp / Monarch",
            "same host / memcpy",
            "same host / copy_",
        ),
    )

    def gbs(result: dict[str, Any], key: str) -> str:
        return f"{result[key] / 1e9:.2f}" if key in result else "failed"

    def ratio(a: dict[str, Any], b: dict[str, Any], key: str) -> str:
        return f"{a[key] / b[key]:.1f}×" if key in a and key in b else "—"

    def share(key: str, ceiling: float | None) -> str:
        return f"{same[key] / ceiling:.0%}" if key in same and ceiling else "—"

    for key, name in RDMA_ROWS:
        rates.add(name, gbs(same, key), gbs(tcp, key), gbs(monarch, key))
        shares.add(
            name,
            ratio(same, monarch, key),
            ratio(tcp, monarch, key),
            share(key, memcpy),
            share(key, same.get(f"copy_{key}")),
        )
    rows = [*rates.done(), "", "The same transfers as ratios:", "", *shares.done()]
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    copy = f"{memcpy / 1e9:.2f} GB/s" if memcpy else "not measured"

    def torch_copy(size: str) -> str:
        rate = ours.get(f"copy_{size}")
        return f"{rate / 1e9:.2f} GB/s" if rate else "not measured"

    return "\n".join(
        [
            f"Measured on {machine}, against Monarch 0.7.0 in the same run; memcpy "
            f"(`ctypes.memmove` of 64 MiB, one thread, median) on this machine: {copy}; "
            f"torch `copy_` in one process (all cores, median): {torch_copy('1m')} at 1 MiB, "
            f"{torch_copy('64m')} at 64 MiB. "
            "Rates are medians of 200 (1 MiB) and 15 (64 MiB) transfers of the whole buffer, "
            "owner and client in two processes of this host.",
            "",
            *rows,
        ]
    )


HOSTS_ROWS: tuple[tuple[str, str, str, str, tuple[str, float] | None], ...] = (
    ("worker_start", "3 workers started until they listen", "time", "", None),
    ("attach", "attach to 3 running workers", "time", "", None),
    ("spawn", "spawn 3 x 2 procs + actors, first call to all back", "time", "", ("≤", 0.5)),
    ("spawn_again", "the same, a second proc mesh on those hosts", "time", "", None),
    ("call_one", "call_one round trip, actor on another host", "time", "", ("≤", 0.25)),
    ("call_all", "call to 6 actors on 3 hosts and gather", "time", "", ("≤", 0.25)),
    ("call_all_cpu", "CPU of the whole machine per call to all", "time", "", None),
    ("broadcast", "broadcast to 6 actors on 3 hosts", "rate", "broadcasts/s", ("≥", 3.0)),
    ("rdma_64m", "RDMA read of 64 MiB between hosts", "rate", "GB/s", None),
)


WORKER = (
    "import sys; from monarch.actor import run_worker_loop_forever as run; "
    "run(address=sys.argv[1], ca='trust_all_connections')"
)


def namespaces() -> Any:
    """tools/netns_hosts.py, once this machine is known to allow network namespaces."""
    sys.path.insert(0, str(ROOT / "tools"))
    import netns_hosts

    reason = netns_hosts.available()
    if reason:
        raise SystemExit(f"this suite needs network namespaces: {reason}")
    return netns_hosts


def on_hosts(
    python: Path,
    impl: str,
    n: int,
    argv: list[str],
    timeout: float,
    kill: bool = False,
    cut: bool = False,
) -> dict[str, Any]:
    """Run tools/bench/hosts_bench.py ``argv`` as the controller of ``n``
    network-namespace hosts, a ``run_worker_loop_forever`` worker on each; with
    ``kill``, it kills the last host's worker and procs itself (``lost``); with
    ``cut``, it unplugs the last host from the network instead (``cut``).
    Everything started in the namespaces ends with them; {} if it failed."""
    env = {**os.environ, "PYTHONPATH": "", "MONARCH_RDMA_BACKEND": "tcp"}
    env.setdefault("MONARCH_JOB_SECRET", os.urandom(32).hex())
    with namespaces().hosts(n) as h:
        names = [f"h{i}" for i in range(n)]
        addresses = [f"tcp://{h.ip(name)}:26600" for name in names]
        launched = time.time()
        workers = [
            h.popen(name, [str(python), "-c", WORKER, address], env=env, start_new_session=True)
            for name, address in zip(names, addresses, strict=True)
        ]
        bench = [str(BENCH / "hosts_bench.py"), "--impl", impl, "--workers", ",".join(addresses)]
        bench += ["--worker-pids", ",".join(str(w.pid) for w in workers), *argv]
        bench += ["--launched", repr(launched)]
        if kill:
            bench += ["--kill", str(workers[-1].pid)]
        if cut:
            bench += ["--cut", f"{h.prefix}:{names[-1]}"]
        if impl == "monarch":  # ours finds the interface that routes to the workers itself
            bench += ["--listen", f"tcp://{h.ip('ctl')}:0"]
        console.print(f"running hosts_bench.py for {impl} on {n} hosts {' '.join(argv)} ...")
        try:
            done = h.run(
                "ctl", [str(python), *bench], env=env, capture_output=True, text=True,
                timeout=timeout,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            console.print(f"[red]{impl} timed out after {timeout:.0f} s[/]")
            return {}
        finally:
            for worker in workers:  # each worker's group: the worker and its procs
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(worker.pid, signal.SIGKILL)
        lines = done.stdout.strip().splitlines()
        if done.returncode == 0 and lines:
            return json.loads(lines[-1])
        console.print(f"[red]{impl} failed[/]:\n" + "\n".join(done.stderr.splitlines()[-25:]))
        return {}


def hosts(args: argparse.Namespace) -> str:
    """3 hosts x 2 procs, each host and the controller in a network
    namespace of its own (tools/netns_hosts.py; needs root)."""
    namespaces()
    began = time.perf_counter()
    pythons = {"ours": Path(sys.executable), "Monarch 0.7.0": monarch_python(args.monarch_python)}
    turns: dict[str, list[dict[str, Any] | None]] = {label: [] for label in pythons}
    for _ in range(args.rounds):  # in turns, each keeping its best (see actor())
        for label, python in pythons.items():
            impl = "ours" if label == "ours" else "monarch"
            turns[label].append(on_hosts(python, impl, 3, [], 600))
    results = {label: best_of(runs, HOSTS_ROWS) for label, runs in turns.items()}
    title = "across hosts: 3 network-namespace hosts x 2 procs, ours and Monarch 0.7.0"
    rows = compare(title, HOSTS_ROWS, results)
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    took = time.perf_counter() - began
    return "\n".join(
        [
            f"Measured on {machine}, against Monarch 0.7.0, in {took / 60:.1f} minutes: three "
            "hosts and the controller each in a Linux network namespace of its own, joined by "
            "a bridge (every message crosses a veth pair; ours carries integrity tags, as "
            "between real hosts), a worker per host, two procs per host. Round trips are "
            "medians of 1,000 (300 for the call to all); RDMA is the TCP data plane on both "
            "sides (ours forced to it: in namespaces on one kernel, CMA would also work). "
            f"Ours and Monarch ran {args.rounds} times each, taking turns; each measure is "
            "the best of those turns.",
            "",
            *rows,
        ]
    )


def cpu(args: argparse.Namespace) -> str:
    """Where a round trip's time goes: CPU per call in the caller's process
    and in the actors', for ours, Monarch and the plain Python floor of the
    same thread wake-ups (``cpu_bench.py``), for ``call_one`` to one actor and
    for a call to eight; each again with every process on CPU 0, where no
    wake-up has to rouse another, idle, CPU. Then ours stage by stage."""
    bench = str(BENCH / "cpu_bench.py")
    seconds = ["--seconds", "5"]
    pythons = {
        "ours": (sys.executable, "ours"),
        "Monarch 0.7.0": (str(monarch_python(args.monarch_python)), "monarch"),
        "plain Python floor": (sys.executable, "floor"),
    }

    def measure(*extra: str) -> dict[str, dict[str, Any]]:
        return {
            name: run_json(python, [bench, "--impl", impl, *seconds, *extra], 300) or {}
            for name, (python, impl) in pythons.items()
        }

    def us(result: dict[str, Any], *keys: str) -> str:
        if not all(key in result for key in keys):
            return "failed"
        return f"{sum(result[key] for key in keys) * 1e6:.0f} µs"

    def table(what: str, procs: str) -> tuple[list[str], list[str], dict[str, Any]]:
        """The table for ``what`` (``--procs procs``), its ratios, and ours untimed."""
        results = measure("--procs", procs)
        # the same calls with every process on CPU 0: no wake-up of another, idle CPU
        pinned = measure("--procs", procs, "--cpus", "first")  # CPU 0 unless it is not ours
        both = Both(f"CPU per {what}", ("per call", *results))
        both.add("round trip (median)", *(us(r, "latency") for r in results.values()))
        both.add(
            "CPU, caller's process",
            *(us(r, "client_user", "client_sys") for r in results.values()),
        )
        both.add(
            "CPU, the actors' processes" if procs != "1" else "CPU, actor's process",
            *(us(r, "others_user", "others_sys") for r in results.values()),
        )
        both.add(
            "CPU, all, of it in the kernel",
            *(
                f"{us(r, 'cpu')}, {us(r, 'client_sys', 'others_sys')}"
                if "latency" in r
                else "failed"
                for r in results.values()
            ),
        )
        both.add("round trip, all on CPU 0 (median)", *(us(r, "latency") for r in pinned.values()))
        both.add("CPU, all, all on CPU 0", *(us(r, "cpu") for r in pinned.values()))
        ratios = []
        for label, runs in (("on every CPU", results), ("all on CPU 0", pinned)):
            ours, theirs = runs["ours"].get("latency"), runs["Monarch 0.7.0"].get("latency")
            if ours and theirs:
                ratios.append(f"{ours / theirs:.2f}× {label}")
        return both.done(), ratios, results["ours"]

    one, one_ratios, ours_one = table("call_one round trip", "1")
    eight, eight_ratios, _ = table("call to 8 actors, gathered", "8")
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"

    # ours again, stage by stage (call_trace.py)
    trace = run_json(sys.executable, [str(BENCH / "call_trace.py")], 300) or {}
    total = trace.get("total_us")
    stages = Both("One call_one round trip of ours, stage by stage", ("stage", "median", "share"))
    for stage in trace.get("stages", []):
        value = trace.get(stage)
        share = f"{value / total:.0%}" if value and total else "—"
        stages.add(stage, f"{value:.1f} µs" if value else "failed", share)
    if total:
        stages.add("whole (median of whole calls)", f"{total:.1f} µs", "")
    else:
        stages.add("call_trace.py failed (see above)", "—", "—")
    return "\n".join(
        [
            f"Measured on {machine}, in one run: {seconds[1]} s of back-to-back "
            "`call_one().get()` to one actor in another process of this host; CPU read "
            "from `/proc` for the calling process and every process it started. The last "
            "two rows ran the same with the script and every process it started kept on "
            "CPU 0 (`cpu_bench.py --cpus 0`).",
            "",
            *one,
            "",
            "Our round trip against Monarch's: " + (", ".join(one_ratios) or "failed") + ".",
            "",
            "The same for a call to 8 actors, each in a process of its own "
            "(`call().get()`, `cpu_bench.py --procs 8`; the floor program writes to 8 "
            "processes and waits for every answer):",
            "",
            *eight,
            "",
            "Our call to 8 against Monarch's: " + (", ".join(eight_ratios) or "failed") + ".",
            "",
            f"Then ours, {trace.get('matched', 0):,} calls traced with "
            "`tools/bench/call_trace.py`: each process notes the clock as a call enters and "
            "leaves each stage. Noting costs time too: a traced call took "
            f"{f'{total:.0f} µs' if total else '—'} here, against "
            f"{us(ours_one, 'latency')} "
            "untraced above, so read the shares.",
            "",
            *stages.done(),
        ]
    )


SCALE_SIZES = (8, 16, 32, 64, 128, 256)
SCALE_HOSTS = 16  # hosts = min(16, procs / 2): the hosts fill up first, then each host
SCALE_MEASURES = "spawn,call_all,broadcast"
# the most of this machine's available memory one mesh may take: the rest is
# left to whatever else runs here (other jobs, the page cache)
MEMORY_SHARE = 0.6
LOST_FIRST = 120.0  # seconds the smallest mesh waits for a lost host's report


def scale_layout(procs: int) -> tuple[int, int]:
    """(hosts, procs per host) for a mesh of ``procs``: two procs per host
    until there are 16 hosts, then more procs on each of the 16."""
    hosts = max(1, min(SCALE_HOSTS, procs // 2))
    return hosts, procs // hosts


def available_memory() -> int:
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable"))


def needed_memory(result: dict[str, Any], procs: int, hosts: int) -> float:
    """What a mesh of ``procs`` on ``hosts`` would take, from one measured run:
    each proc's and each worker's proportional set size, and the controller's."""
    memory = result["memory"]
    workers = memory["workers"] or [{"pss": 0}]
    per_worker = sum(w["pss"] for w in workers) / len(workers)
    return memory["proc"]["pss"] * procs + per_worker * hosts + memory["controller"]["pss"]


def lose_here(
    first: dict[str, Any] | None, key: str, procs: int, sizes: list[int]
) -> tuple[bool, float]:
    """Whether to lose a host (``key``: "lost" killed, "cut" cut off) at
    ``procs``, and how long to wait for its report. The first size waits
    long; the others twice what that took (at least 30 s), and where that is
    slow (over 30 s: Monarch's) only the largest size that fits memory."""
    if not first:
        return True, LOST_FIRST
    room = MEMORY_SHARE * available_memory()
    fits = [n for n in sizes if needed_memory(first, n, scale_layout(n)[0]) <= room]
    took = first.get(key)
    bound = max(30.0, 2 * took) if took else LOST_FIRST
    return took is not None and (took <= 30 or procs == max(fits, default=procs)), bound


def scale(args: argparse.Namespace) -> str:
    """Meshes of 8 to 256 procs over up to 16 network-namespace hosts, ours
    and Monarch 0.7.0 where it fits this machine's memory: spawn, call to
    all, broadcast rate, and the time until a killed host is reported."""
    namespaces()
    began = time.perf_counter()
    sizes = [int(n) for n in args.sizes.split(",")] if args.sizes else list(SCALE_SIZES)
    pythons = {"ours": Path(sys.executable), "Monarch 0.7.0": monarch_python(args.monarch_python)}
    if args.ours_only:
        del pythons["Monarch 0.7.0"]
    results: dict[str, dict[int, dict[str, Any]]] = {label: {} for label in pythons}
    skipped: dict[str, str] = {}
    for procs in sizes:
        n_hosts, per_host = scale_layout(procs)
        for label, python in pythons.items():
            if label in skipped:
                continue
            earlier = [r for r in results[label].values() if r.get("memory")]
            if earlier:
                need = needed_memory(earlier[-1], procs, n_hosts)
                if need > MEMORY_SHARE * available_memory():
                    skipped[label] = (
                        f"from {procs} procs on: needs ~{need / 2**30:.1f} GiB, "
                        f"{available_memory() / 2**30:.1f} GiB available"
                    )
                    console.print(f"[yellow]{label}: skipped {skipped[label]}[/]")
                    continue
            argv = ["--per-host", str(per_host), "--measures", SCALE_MEASURES]
            first = next(iter(results[label].values()), None)
            kill, bound = lose_here(first, "lost", procs, sizes)
            impl = "ours" if label == "ours" else "monarch"
            timeout = args.scale_timeout + (bound if kill else 0)
            argv += ["--lost-timeout", f"{bound:.0f}"]
            result = on_hosts(python, impl, n_hosts, argv, timeout, kill=kill)
            results[label][procs] = result
            if not result:
                skipped[label] = f"from {procs} procs on: failed or overran (see above)"
                continue
            # a host cut off, on hosts of its own: with a kill after a cut on the
            # same hosts, Monarch's report of the killed host never came
            cut, bound = lose_here(first, "cut", procs, sizes)
            if cut:
                argv = ["--per-host", str(per_host), "--measures", "spawn"]
                argv += ["--lost-timeout", f"{bound:.0f}"]
                timeout = args.scale_timeout + bound
                lost = on_hosts(python, impl, n_hosts, argv, timeout, cut=True)
                result.update({k: v for k, v in lost.items() if k.startswith("cut")})
    console.print_json(json.dumps(results))
    table_rows = scale_rows(results, sizes)
    if args.write:
        draw_scale(results, args.monarch_python)
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    took = time.perf_counter() - began
    memory = ", ".join(
        f"{label}: one proc {r['memory']['proc']['pss'] / 2**20:.0f} MiB PSS "
        f"({r['memory']['proc']['rss'] / 2**20:.0f} MiB RSS), one worker "
        f"{r['memory']['workers'][0]['pss'] / 2**20:.0f} MiB PSS"
        for label, by_size in results.items()
        for r in [next((x for x in reversed(by_size.values()) if x.get("memory")), None)]
        if r and r["memory"]["workers"]
    )
    notes = [f"{label} not measured {why}." for label, why in skipped.items()]
    return "\n".join(
        [
            f"Measured on {machine}, {available_memory() / 2**30:.0f} GiB available, "
            f"in {took / 60:.1f} minutes. Hosts = min(16, procs / 2), every host and the "
            "controller a network namespace of its own (as in *Across hosts*), one worker "
            "per host. Spawn is `spawn_procs` + `spawn` until a first call to all returns; "
            "the call to all a median (300 / (procs / 6) samples, at least 30); broadcasts "
            "as in *Across hosts* (2,000 / (procs / 6) rounds, at least 50); a lost host is "
            "the last host's worker and procs killed (SIGKILL to the process group) while a "
            "call to one of its actors waits: seconds until that call raises, and until "
            "`unhandled_fault_hook` hears of it. A host cut off is measured the same way, "
            "on fresh hosts of the same size: the last host's port on the namespaces' bridge "
            "set down, so that nothing closes and every packet to or from it is lost. "
            f"Memory after the spawn: {memory}.",
            *(["", *notes] if notes else []),
            "",
            *table_rows,
        ]
    )


def scale_rows(results: dict[str, dict[int, dict[str, Any]]], sizes: list[int]) -> list[str]:
    """The scale tables: one per measure, a row per mesh size, a column per
    implementation (at most six columns, as on the rest of the page)."""
    labels = list(results)
    measures = (
        ("spawn", "Spawn", lambda v: duration(v)),
        ("call_all", "Call to all", lambda v: duration(v)),
        ("broadcast", "Broadcasts per second", lambda v: f"{v:,.0f}"),
        ("lost", "A lost host: until the waiting call raises", lambda v: duration(v)),
        ("lost_hook", "A lost host: until `unhandled_fault_hook` hears", lambda v: duration(v)),
        ("cut", "A host cut off the network: until the waiting call raises", duration),
        ("cut_hook", "A host cut off the network: until `unhandled_fault_hook` hears", duration),
    )
    rows: list[str] = []
    for key, title, show in measures:
        both = Both(title, ("procs", "hosts x procs", *labels))
        for procs in sizes:
            n_hosts, per_host = scale_layout(procs)
            cells = [str(procs), f"{n_hosts} x {per_host}"]
            for label in labels:
                result = results[label].get(procs)
                if result is None:
                    cells.append("—")
                elif not result:
                    cells.append("failed")
                elif key not in result:
                    cells.append("not measured")
                elif result[key] is None:
                    bound = result.get(f"{key.removesuffix('_hook')}_timeout", 30)
                    cells.append(f"> {bound:.0f} s")
                else:
                    cells.append(show(result[key]))
            both.add(*cells)
        rows += ["", f"**{title}**", "", *both.done()]
    return rows[1:]


def plotting_python(explicit: str | None) -> Path:
    """A Python with matplotlib: Monarch's benchmark environment, given it on first use."""
    python = monarch_python(explicit)
    if subprocess.run([python, "-c", "import matplotlib"], capture_output=True).returncode:
        console.print(f"installing matplotlib into {python.parent.parent} ...")
        pip = [python, "-m", "pip", "install", "--quiet", "-c", CONSTRAINTS, "matplotlib"]
        subprocess.run(pip, check=True)
    return python


def draw_scale(results: dict[str, dict[int, dict[str, Any]]], explicit: str | None) -> None:
    image = ROOT / "docs" / "img" / "scale.png"
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "scale.json"
        data.write_text(json.dumps(results))
        plot = [plotting_python(explicit), BENCH / "hosts_bench.py", "--plot", data, "--out", image]
        subprocess.run(plot, check=True)
    console.print(f"drew {image.relative_to(ROOT)}")


# (key, what) of the tensor suite's rows, as in ACTOR_ROWS
TENSOR_ROWS: tuple[tuple[str, str, str, str, tuple[str, float] | None], ...] = (
    ("dispatch", "element-wise ops issued (controller)", "rate", "ops/s", ("≥", 3.0)),
    ("complete", "element-wise ops issued and finished on 4 procs", "rate", "ops/s", ("≥", 3.0)),
    ("fetch", "fetch_shard of a 4x4 tensor", "time", "", ("≤", 0.5)),
)


def tensor(args: argparse.Namespace) -> str:
    """Distributed tensors on 4 local processes, ours and Monarch 0.7.0; the
    64 MiB reduce against gloo all_reduce in the same processes is ours only
    (Monarch 0.7.0 cannot reduce on CPU)."""
    began = time.perf_counter()
    bench = str(BENCH / "tensor_bench.py")
    results = {
        "ours": run_json(sys.executable, [bench, "--impl", "ours", "--reduce"], 540),
        "Monarch 0.7.0": run_json(
            monarch_python(args.monarch_python), [bench, "--impl", "monarch"], 540
        ),
    }
    rows = compare("distributed tensors: 4 processes on this host, CPU", TENSOR_ROWS, results)
    ours = results["ours"] or {}
    lines = []
    if "reduce_64m" in ours and "gloo_64m" in ours:
        share = ours["reduce_64m"] / ours["gloo_64m"]
        lines = [
            "",
            f"`reduce_` of 64 MiB (float32, sum) over the 4 processes: "
            f"{rate(ours['reduce_64m'], 'GB/s')}, against {rate(ours['gloo_64m'], 'GB/s')} for "
            f"plain gloo `all_reduce` in the same processes: {share:.0%} of it (target ≥ 80%, "
            f"{'met' if share >= 0.8 else 'missed'}). Monarch 0.7.0 cannot reduce on CPU.",
        ]
        console.print(lines[-1])
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    took = time.perf_counter() - began
    return "\n".join(
        [
            f"Measured on {machine}, against Monarch 0.7.0, in {took / 60:.1f} minutes: a mesh "
            "of 4 processes on this host, CPU tensors. Ops are a chain of 5,000 `y = y + 1` on "
            "16 floats; the fetch is a median of 500.",
            "",
            *rows,
            *lines,
        ]
    )


def cuda(args: argparse.Namespace) -> str:
    """A 64 MiB CUDA tensor echoed through an endpoint, by CUDA IPC and staged
    through host memory, beside a CPU tensor of the same size (ours only:
    Monarch 0.7.0 pickles CUDA tensors through torch). Says why where it cannot run."""
    result = run_json(sys.executable, [str(BENCH / "cuda_bench.py")], 540) or {}
    if "skipped" in result or not result:
        why = result.get("skipped", "the benchmark failed (see above)")
        console.print(f"cuda: skipped: {why}")
        return f"Not measured: {why}."
    cases = (
        ("cuda_ipc_64m", "64 MiB CUDA tensor echo, CUDA IPC (same host)", "≥ 10 GB/s"),
        ("cuda_staged_64m", "64 MiB CUDA tensor echo, staged (cuda_ipc off)", "—"),
        ("cpu_64m", "64 MiB CPU tensor echo", "—"),
    )
    both = Both(
        f"CUDA tensors through an endpoint, {result.get('device', 'GPU')}",
        ("measure", "ours", "target"),
    )
    for key, name, target in cases:
        both.add(name, rate(result[key], "GB/s") if key in result else "failed", target)
    rows = both.done()
    return "\n".join(
        [
            f"Measured on {result.get('device', 'a GPU')}, one actor in another process of "
            "this host; rates are 64 MiB / round trip of `call_one(t).get()` (median of 20).",
            "",
            *rows,
        ]
    )


SUITES = {
    "mesh": mesh,
    "transport": transport,
    "actor": actor,
    "cpu": cpu,
    "rdma": rdma,
    "hosts": hosts,
    "scale": scale,
    "tensor": tensor,
    "cuda": cuda,
}


def write_section(name: str, body: str) -> None:
    """Replace the section between this suite's markers in docs/benchmarks.md."""
    page = ROOT / "docs" / "benchmarks.md"
    text = page.read_text()
    begin, end = f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->"
    block = f"{begin}\n{body}\n{end}"
    if begin in text:
        text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    page.write_text(text)
    console.print(f"updated {page.relative_to(ROOT)}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("suite", choices=sorted(SUITES), help="which benchmark to run")
    parser.add_argument("--repeat", type=int, default=5, help="runs per operation; the best counts")
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="actor and hosts suites: turns for ours and Monarch, taken alternately; "
        "each keeps its best",
    )
    parser.add_argument("--monarch-python", help="a Python that has torchmonarch 0.7.0 installed")
    parser.add_argument("--ray-python", help="a Python that has Ray installed (actor suite)")
    parser.add_argument("--sizes", help="scale suite: mesh sizes (8,16,32,64,128,256)")
    parser.add_argument("--ours-only", action="store_true", help="scale suite: not Monarch")
    parser.add_argument(
        "--scale-timeout", type=float, default=180, help="scale suite: seconds per mesh size"
    )
    args = parser.parse_args()
    body = SUITES[args.suite](args)
    if args.write:
        write_section(args.suite, body)


if __name__ == "__main__":
    main()
