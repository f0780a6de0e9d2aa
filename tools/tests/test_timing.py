"""tools/bench/_timing.py: the CPU a benchmark reports is CPU that was spent."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "bench"))

from _timing import machine_cpu


def burn(seconds: float) -> None:
    """Keep this process's CPU busy for ``seconds`` of its own CPU time."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_machine_cpu_counts_at_least_what_this_process_spent() -> None:
    before = time.process_time()
    per_call = machine_cpu(lambda: burn(0.05), 4)
    spent = (time.process_time() - before) / 4
    # the whole machine worked at least as much as this process did, less
    # the kernel's accounting granularity (one clock tick per read)
    assert per_call >= spent - 0.02
    assert per_call < 50 * spent  # and it is per call, not the whole window
