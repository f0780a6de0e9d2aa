"""The README's demo command runs, shows each part of the tour and says what
it shows, and its environment holds only what it imports."""

import subprocess
import sys
import tomllib
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
        "workers.bump.broadcast()",  # the broadcasts behind the count column are shown
        "count is 2 on the even gpus",
        "call_one round trip",
        "ZeroDivisionError",
        "every process reaped",
        "2. A mesh and its slices",
        "3. Selections",
        "picked at random",  # (?, *) says it picks a random host
        "4. The multicast tree",
        "5. At scale",
        "{hosts=2,gpus=2}",
        "route to rank 999,999",
        "Where to go next",
        "docs/tutorials/getting-started.md",
    ):
        assert part in done.stdout, part
    rows = [line for line in done.stdout.splitlines() if "gpus=" in line and "│" in line]
    assert len(rows) == 4, done.stdout  # one row per worker, its point as gpus=N
    assert "{'gpus'" not in "".join(rows)


def test_demo_rejects_bad_arguments():
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "demo.py"), "--hosts", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "at least 2 hosts" in done.stderr


def test_demo_environment_has_no_torch_and_no_test_extras():
    """`hatch run demo:tour` installs the packages the demo imports, without
    their test extras, and no torch: the first run is quick."""
    hatch = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["envs"]
    demo = hatch["demo"]
    assert demo["template"] == "demo"  # nothing inherited from the default env's torch
    assert demo["scripts"]["tour"].startswith("python tools/demo.py")
    members = demo["workspace"]["members"]
    assert all(isinstance(m, str) for m in members)  # no {features = ["test"]}
    names = {Path(m).name for m in members}
    assert names.isdisjoint({"monarch", "monarch-tensor", "monarch-rdma"})  # these bring torch
    assert not any("torch" in d for d in demo.get("dependencies", []))
    imported = {
        line.split()[1].split(".")[0]
        for line in (ROOT / "tools" / "demo.py").read_text().splitlines()
        if line.startswith(("from monarch", "import monarch"))
    }
    assert imported <= {name.replace("-", "_") for name in names}, imported
