"""tools/bench/cpu_bench.py: CPU per call, to one actor or to several."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def cpu_bench(*options: str) -> dict:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools/bench/cpu_bench.py"), "--seconds", "1", *options],
        capture_output=True, text=True, timeout=120, cwd=ROOT / "tools/bench",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("impl", ["floor", "ours"])
def test_a_call_to_several_processes_counts_the_cpu_of_each(impl: str) -> None:
    one = cpu_bench("--impl", impl)
    three = cpu_bench("--impl", impl, "--procs", "3")
    assert one["calls"] > 0 and three["calls"] > 0
    # three processes each read and answer every call: together they spend
    # well over what one does (CPU is counted in clock ticks: a margin for those)
    answering_three = three["others_user"] + three["others_sys"]
    answering_one = one["others_user"] + one["others_sys"]
    assert answering_three > 1.3 * answering_one, (one, three)
