"""tools/bench/ab_bench.py: this tree against a commit, in alternating pairs."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("ab_bench", ROOT / "tools/bench/ab_bench.py")
assert spec is not None and spec.loader is not None
ab_bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ab_bench)


def test_each_measure_is_the_median_of_the_pairs_ratios() -> None:
    base = [{"call_one": 100.0, "pipelined": 10.0}, {"call_one": 200.0, "pipelined": 30.0}]
    new = [{"call_one": 50.0, "pipelined": 20.0}, {"call_one": 180.0}]
    summary = ab_bench.summarize(base, new)
    # pair by pair: 0.5 and 0.9; a measure only one side of a pair has is left out
    assert summary["call_one"] == pytest.approx({"base": 150.0, "new": 115.0, "ratio": 0.7})
    assert summary["pipelined"] == pytest.approx({"base": 10.0, "new": 20.0, "ratio": 2.0})
    assert "call8" not in summary


def run_one_pair(*options: str) -> tuple[str, dict[str, float]]:
    """One quick pair against HEAD: what ab_bench printed, and its ratios."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools/bench/ab_bench.py"), "--base", "HEAD", "--pairs", "1",
         "--quick", *options],
        capture_output=True, text=True, timeout=400, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout, json.loads(done.stdout.strip().splitlines()[-1])


def test_a_pair_against_this_commit_runs_both_trees() -> None:
    _, ratios = run_one_pair("--repeat", "1")
    assert {"call_one", "call8", "pipelined", "broadcast"} <= set(ratios)
    assert all(ratio > 0 for ratio in ratios.values())
    worktrees = subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True, check=True
    )
    assert "monarch-ab-" not in worktrees.stdout  # its worktree is gone


def test_the_cpu_workload_compares_call_one_on_one_cpu() -> None:
    printed, ratios = run_one_pair("--workload", "cpu")
    assert set(ratios) == {"latency", "cpu"}
    # the same code on both sides: the two runs of a pair are alike
    assert all(0.3 < ratio < 3 for ratio in ratios.values()), ratios
    assert "on CPU 0" in printed
