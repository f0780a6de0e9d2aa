"""tools/bench/call_trace.py: a call's stages, from both processes' clocks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_stages_of_a_call_add_up_to_the_whole() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools/bench/call_trace.py"), "--samples", "200"],
        capture_output=True, text=True, timeout=180, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    stages = result["stages"]
    # from the caller, through the proc's loop and the actor's thread, and back
    assert stages[0] == "caller builds" and stages[-1] == "to the caller"
    assert {"proc's loop", "to the actor's thread", "actor", "caller's loop"} < set(stages)
    assert result["matched"] >= 150  # nearly every call matched to its marks in the proc
    assert all(result[stage] > 0 for stage in stages)  # the two clocks agree on order
    # medians do not add exactly; far apart, the stages would be of other calls
    assert 0.5 * result["total_us"] <= sum(result[s] for s in stages) <= 1.5 * result["total_us"]
    assert "to the actor's thread" in done.stdout and "whole" in done.stdout
