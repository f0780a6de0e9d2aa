#!/usr/bin/env python3
"""This checkout against an earlier commit, on the actor workload, in
alternating pairs of runs.

This machine's speed drifts by ±20% over minutes, more than most changes
to the message path are worth; two runs minutes apart cannot tell them
apart. Here the earlier commit (``--base``, checked out into a temporary
git worktree) and this working tree take turns running
``actor_bench.py --impl ours`` (without its mesh-size sweep), each run in a
fresh interpreter whose ``PYTHONPATH`` puts that tree's packages first. For
every measure, each pair gives a ratio, new / base, and the report is the
median of those ratios: the drift mostly cancels within a pair.

``--workload cpu`` runs ``cpu_bench.py --impl ours --cpus first`` instead
(CPU 0, or the first CPU this process may use): back-to-back ``call_one``
with every process on that one CPU, where no wake-up has to rouse another
CPU, so the round trip and the machine's CPU per call are the framework's
own work (less the plain floor's few microseconds).

    python tools/bench/ab_bench.py --base HEAD~3 [--pairs 6] [--workload cpu]

Prints a table and one JSON object (the ratios). Below 1 is faster for
times, above 1 for rates.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BENCH = Path(__file__).resolve().parent
# (key, what, "time" or "rate")
Measures = tuple[tuple[str, str, str], ...]
MEASURES: Measures = (
    ("call_one", "call_one round trip", "time"),
    ("call8", "call to 8 actors and gather", "time"),
    ("pipelined", "pipelined calls", "rate"),
    ("broadcast", "broadcasts to 8 actors", "rate"),
    ("spawn8", "spawn 8 procs and actors", "time"),
    ("echo_1m", "1 MiB echo", "rate"),
    ("echo_64m", "64 MiB echo", "rate"),
)
CPU_MEASURES: Measures = (
    ("latency", "call_one round trip, on CPU 0", "time"),
    ("cpu", "CPU per call_one, on CPU 0", "time"),
)
CPU_SECONDS = 4.0  # of back-to-back calls per run of cpu_bench.py


def tree_path(tree: Path) -> str:
    """PYTHONPATH for running ``tree``'s packages ahead of the installed ones."""
    return os.pathsep.join(str(src) for src in sorted((tree / "packages").glob("*/src")))


def run(tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One run of the workload on ``tree``'s packages: its measures."""
    if args.workload == "cpu":
        script = ["cpu_bench.py", "--impl", "ours", "--cpus", "first"]
        script += ["--seconds", str(CPU_SECONDS / (4 if args.quick else 1))]
    else:
        script = ["actor_bench.py", "--impl", "ours", "--repeat", str(args.repeat)]
        script += ["--sweep", "", *(["--quick"] if args.quick else [])]
    out = subprocess.run(
        [sys.executable, str(BENCH / script[0]), *script[1:]],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": tree_path(tree)},
        timeout=600,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def summarize(
    base: list[dict[str, Any]], new: list[dict[str, Any]], measures: Measures = MEASURES
) -> dict[str, dict[str, float]]:
    """For each measure both sides have: the median of each side, and the
    median of the per-pair ratios new / base."""
    summary = {}
    for key, _, _ in measures:
        pairs = [(b[key], n[key]) for b, n in zip(base, new, strict=True) if key in b and key in n]
        if pairs:
            summary[key] = {
                "base": statistics.median(b for b, _ in pairs),
                "new": statistics.median(n for _, n in pairs),
                "ratio": statistics.median(n / b for b, n in pairs),
            }
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", required=True, help="the commit to compare against")
    parser.add_argument("--pairs", type=int, default=6, help="alternating pairs of runs")
    parser.add_argument("--repeat", type=int, default=2, help="actor_bench.py's --repeat")
    parser.add_argument(
        "--quick", action="store_true", help="actor_bench.py's --quick; cpu: a quarter of the calls"
    )
    parser.add_argument(
        "--workload",
        choices=("actor", "cpu"),
        default="actor",
        help="actor: actor_bench.py's workload; cpu: call_one on CPU 0 (cpu_bench.py)",
    )
    args = parser.parse_args()
    measures = CPU_MEASURES if args.workload == "cpu" else MEASURES
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    with tempfile.TemporaryDirectory(prefix="monarch-ab-") as scratch:
        worktree = Path(scratch) / "base"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(worktree), args.base],
            check=True,
        )
        try:
            base: list[dict[str, Any]] = []
            new: list[dict[str, Any]] = []
            for pair in range(args.pairs):
                print(f"pair {pair + 1} of {args.pairs} ...", file=sys.stderr, flush=True)
                base.append(run(worktree, args))
                new.append(run(ROOT, args))
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)],
                check=False,
            )
    summary = summarize(base, new, measures)
    print(f"{'measure':32} {'base':>12} {'new':>12} {'new / base':>11}")
    for key, what, kind in measures:
        if key in summary:
            row = summary[key]
            scale, unit = (1e6, "µs") if kind == "time" else (1.0, "/s")
            print(
                f"{what:32} {row['base'] * scale:>9,.1f} {unit:2} {row['new'] * scale:>9,.1f} "
                f"{unit:2} {row['ratio']:>10.3f}×"
            )
    print(json.dumps({key: row["ratio"] for key, row in summary.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
