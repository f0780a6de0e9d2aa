"""Many hosts on one machine: each host, and the controller, in a Linux
network namespace of its own, joined by a bridge (tools/netns_hosts.py).
Workers run ``run_worker_loop_forever`` in their host; controller scripts
(integration-tests/hosts/) run in theirs. Needs root (CI runs as root)."""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from monarch_actor.testing import gone

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import netns_hosts  # noqa: E402

SCRIPTS = Path(__file__).parent / "hosts"
PORT = 26600
WORKER = (
    "import sys; from monarch.actor import run_worker_loop_forever as run; "
    "run(address=sys.argv[1], ca='trust_all_connections')"
)

reason = netns_hosts.available()
pytestmark = pytest.mark.skipif(reason is not None, reason=reason or "")


@pytest.fixture
def cluster():
    """Three hosts, each with a worker, and a controller namespace."""
    env = {
        **os.environ,
        "MONARCH_JOB_SECRET": secrets.token_hex(32),
        "MONARCH_RDMA_BACKEND": "tcp",  # between hosts (CMA would work here, one kernel)
        "PYTHONPATH": os.pathsep.join([str(SCRIPTS), os.environ.get("PYTHONPATH", "")]),
    }
    with netns_hosts.hosts(3) as h:
        addresses = [f"tcp://{h.ip(name)}:{PORT}" for name in ("h0", "h1", "h2")]
        workers = [
            h.popen(name, [sys.executable, "-c", WORKER, address], env=env, start_new_session=True)
            for name, address in zip(("h0", "h1", "h2"), addresses, strict=True)
        ]
        yield h, env, addresses, workers
        for worker in workers:
            if worker.poll() is None:
                os.killpg(worker.pid, signal.SIGKILL)


def controller(h, env, script: str, *args: str) -> subprocess.Popen[str]:
    return h.popen(
        "ctl",
        [sys.executable, str(SCRIPTS / script), *args],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_meshes_broadcasts_and_rdma_across_hosts(cluster):
    h, env, addresses, workers = cluster
    run = controller(h, env, "across_hosts.py", *addresses)
    out, err = run.communicate(timeout=240)
    assert run.returncode == 0 and "across hosts: ok" in out, out + err
    assert [w.wait(30) for w in workers] == [0, 0, 0]  # shut down by the controller


@pytest.mark.parametrize("how", ["network cut", "host killed"])
def test_a_vanishing_host_fails_its_callers_within_10_s(cluster, how):
    h, env, addresses, workers = cluster
    run = controller(h, env, "host_lost.py", *addresses)
    assert run.stdout.readline().strip() == "READY", run.stderr.read()
    if how == "network cut":
        h.cut("h1")  # no goodbye: its worker's heartbeats just stop arriving
    else:
        os.killpg(workers[1].pid, signal.SIGKILL)  # the worker and every proc on it
    run.stdin.write("go\n")
    run.stdin.flush()
    out, err = run.communicate(timeout=120)
    took = re.search(r"after ([\d.]+) s: (.*)", out, re.DOTALL)
    assert took, out + err
    assert float(took[1]) < 10.0, out
    assert "and all its descendants have failed:\n" in took[2], out  # Monarch's words
    assert h.ip("h1") in took[2], out  # then the error names the host
    assert "host 0 answers: True" in out, out + err
    assert "reports: 1 [[1]]" in out, out + err  # the root hook heard once, of rank 1


def test_a_killed_controller_leaves_no_procs_on_any_host(cluster, tmp_path):
    h, env, addresses, workers = cluster
    script = tmp_path / "spawn_and_wait.py"
    script.write_text(
        "import os, sys, time\n"
        "from monarch.actor import Actor, attach_to_workers, endpoint\n"
        "class P(Actor):\n"
        "    @endpoint\n"
        "    def pid(self) -> int:\n"
        "        return os.getpid()\n"
        "hosts = attach_to_workers(workers=sys.argv[1:], ca='trust_all_connections')\n"
        "pids = hosts.spawn_procs(per_host={'gpus': 2}).spawn('p', P).pid.call().get(60)\n"
        "print(' '.join(str(p) for _, p in pids.items()), flush=True)\n"
        "time.sleep(600)\n"
    )
    run = h.popen(
        "ctl", [sys.executable, str(script), *addresses], env=env, stdout=subprocess.PIPE, text=True
    )
    pids = [int(p) for p in run.stdout.readline().split()]
    assert len(pids) == 6
    run.kill()
    run.wait(10)
    assert gone(pids, 20) == []
    assert all(w.poll() is None for w in workers)  # the workers wait for the next controller
