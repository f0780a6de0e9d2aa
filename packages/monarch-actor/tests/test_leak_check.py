"""The suites' process-leak check (``monarch_actor.testing.no_leaked_procs``),
seen from outside: a pytest run of its own where one test leaves a proc mesh
running, one stops its mesh and one uses a session's mesh."""

import os
import re
import subprocess
import sys
import textwrap

from monarch_actor.testing import procs_of

CONFTEST = """
import pytest
import monarch_actor.testing
from monarch_actor import this_host
from monarch_actor.testing import no_leaked_procs

monarch_actor.testing.EXIT_GRACE = 1.0  # what leaks here never exits: no need to wait long

@pytest.fixture(scope="session")
def shared():
    mesh = this_host().spawn_procs(name="shared", per_host={"gpus": 1})
    mesh.initialized.get(timeout=60)
    yield mesh
    mesh.stop().get(timeout=30)
"""

TESTS = """
from monarch_actor import this_host

def test_leaks():
    this_host().spawn_procs(name="leaky", per_host={"gpus": 2}).initialized.get(timeout=60)

def test_stops():
    procs = this_host().spawn_procs(name="tidy", per_host={"gpus": 1})
    procs.initialized.get(timeout=60)
    procs.stop().get(timeout=30)

def test_uses_a_session_mesh(shared):
    assert shared.initialized.get(timeout=60)
"""


def test_a_test_that_leaves_procs_running_fails_naming_them(tmp_path):
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp_path / "test_leaky.py").write_text(textwrap.dedent(TESTS))
    env = {**os.environ, "MONARCH_PRELOAD": "none"}
    args = ["-p", "no:randomly", "-p", "no:cacheprovider", "-q", "-rE", "-o", "addopts="]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *args, str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "3 passed, 1 error" in out, out  # test_leaks passed; its teardown failed
    assert "ERROR at teardown of test_leaks" in out, out
    assert "procs left running by this test" in out, out
    named = [line for line in out.splitlines() if "of proc mesh 'leaky'" in line]
    # each of its two procs, by pid, rank and command line (the fork server's module)
    assert len({re.search(r"pid (\d+) rank", line)[1] for line in named}) == 2, out
    assert all("monarch_actor._procs.zygote" in line for line in named), out
    assert "'tidy'" not in out and "'shared'" not in out, out


def test_the_host_agent_and_other_processes_are_not_procs():
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        assert child.pid not in procs_of()
    finally:
        child.communicate(b"")
