"""tools/slurm-cluster: a real one-machine Slurm cluster runs a 2-task job and cancels one.

Needs root (it may apt-get install slurm-wlm and munge, and starts daemons);
skipped otherwise. A cluster that was already up is used and left up; one
these tests start, they stop.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

CLUSTER = Path(__file__).resolve().parents[1] / "slurm-cluster"


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "slurm-cluster needs root"
    if shutil.which("slurmctld") is None and shutil.which("apt-get") is None:
        return "Slurm is not installed and there is no apt-get to install it"
    return None


pytestmark = pytest.mark.skipif(bool(_why_not()), reason=str(_why_not()))


def cluster_cmd(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLUSTER), *args], capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip


@pytest.fixture(scope="module")
def slurm_env() -> Iterator[dict[str, str]]:
    """Environment for Slurm's commands, with a cluster up (started here if it wasn't)."""
    ours = cluster_cmd("status").returncode != 0
    if ours:
        started = cluster_cmd("start", "--nodes", "2", "--cpus-per-node", "4", timeout=900)
        assert started.returncode == 0, started.stdout + started.stderr
    conf = cluster_cmd("env").stdout.strip().removeprefix("export SLURM_CONF=")
    try:
        yield os.environ | {"SLURM_CONF": conf}
    finally:
        if ours:
            stopped = cluster_cmd("stop")
            assert stopped.returncode == 0, stopped.stdout + stopped.stderr
            assert cluster_cmd("status").returncode == 3


def slurm(env: dict[str, str], *argv: str) -> str:
    return subprocess.run(argv, env=env, capture_output=True, text=True,
                          timeout=30, check=True).stdout.strip()  # fmt: skip


def wait_state(env: dict[str, str], job: str, wanted: set[str], timeout_s: float = 60) -> str:
    """Poll `scontrol show job` until the job's state is one of ``wanted``; return it."""
    deadline = time.monotonic() + timeout_s
    state = ""
    while time.monotonic() < deadline:
        fields = dict(
            f.split("=", 1) for f in slurm(env, "scontrol", "-o", "show", "job", job).split()
            if "=" in f
        )  # fmt: skip
        state = fields.get("JobState", "")
        if state in wanted:
            return state
        time.sleep(0.25)
    raise AssertionError(f"job {job} still {state!r} after {timeout_s} s, wanted {wanted}")


def test_two_task_batch_job_runs_on_both_nodes(slurm_env: dict[str, str], tmp_path: Path) -> None:
    nodes = slurm(slurm_env, "sinfo", "-h", "-N", "-o", "%N").split()
    spread = ["-N2"] if len(nodes) >= 2 else []
    job = slurm(
        slurm_env, "sbatch", "--parsable", "-n2", *spread, "-o", f"{tmp_path}/out-%j.txt",
        "--wrap", 'srun bash -c "echo task \\$SLURM_PROCID on \\$SLURMD_NODENAME"; echo ok',
    )  # fmt: skip
    assert wait_state(slurm_env, job, {"COMPLETED", "FAILED", "CANCELLED"}) == "COMPLETED"
    lines = (tmp_path / f"out-{job}.txt").read_text().split("\n")
    assert lines[-2:] == ["ok", ""]
    tasks = sorted(lines[:-2])
    assert [t.split()[:2] for t in tasks] == [["task", "0"], ["task", "1"]]
    if spread:
        assert {t.split()[-1] for t in tasks} == {"n0", "n1"}


def test_scancel_stops_a_long_job(slurm_env: dict[str, str], tmp_path: Path) -> None:
    job = slurm(
        slurm_env, "sbatch", "--parsable", "-o", f"{tmp_path}/%j.txt", "--wrap", "sleep 300"
    )
    wait_state(slurm_env, job, {"RUNNING"}, timeout_s=30)
    slurm(slurm_env, "scancel", job)
    assert wait_state(slurm_env, job, {"CANCELLED"}, timeout_s=30) == "CANCELLED"
    assert slurm(slurm_env, "squeue", "-h", "-j", job) == ""
