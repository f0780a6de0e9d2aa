"""The README's demo command runs and shows each part of the tour."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_demo_runs():
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "demo.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    for part in (
        "1. Actors on this host",
        "call_one round trip",
        "ZeroDivisionError",
        "every process reaped",
        "2. A mesh and its slices",
        "3. Selections",
        "4. The multicast tree",
        "5. At scale",
        "{hosts=2,gpus=2}",
        "route to rank 999,999",
    ):
        assert part in done.stdout


def test_demo_rejects_bad_arguments():
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "demo.py"), "--hosts", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "at least 2 hosts" in done.stderr
