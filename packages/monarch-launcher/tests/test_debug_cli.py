"""``monarch debug``, the real command in a process of its own, driving pdb
sessions that ``breakpoint()`` opened in procs of this (the controller's)
process, with its input piped in as a user would type it."""

import os
import socket
import subprocess
import sys

import pytest
from launcher_debug_actors import Paused, return_line

from monarch_actor import debug_controller, this_host

WAIT = 60  # seconds: the most any step here may take


def monarch(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "monarch_launcher", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=WAIT,
    )


@pytest.fixture(scope="module")
def port():
    os.environ.setdefault("MONARCH_DEBUG_SERVER_PORT", "0")  # unless a test before chose
    return debug_controller().server_address.call_one().get(timeout=WAIT)[1]


def test_monarch_debug_lists_attaches_casts_and_continues(port):
    procs = this_host().spawn_procs(per_host={"gpus": 3})
    paused = procs.spawn("paused", Paused)
    results = paused.slice(gpus=slice(0, 2)).work.call(10)
    debug_controller().wait_pending_session.call_one(2, WAIT).get(timeout=WAIT + 10)
    assert paused.slice(gpus=2).ping.call_one().get(timeout=WAIT) == "pong"

    typed = [
        "list",
        "attach paused 1",
        "p some_local",
        f"until {return_line()}",  # not `n`: Python 3.13 stops on breakpoint() itself
        "p some_local",
        "detach",
        "cast paused ranks(0:2) p rank",
        "attach paused 7",
        "continue",
        "quit",
    ]
    done = monarch("debug", "--host", "127.0.0.1", "--port", str(port), stdin="\n".join(typed))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "MONARCH DEBUGGER" in out
    assert "monarch_dbg> list\n" in out
    table = out.split("monarch_dbg> list\n")[1].split("monarch_dbg> ")[0].splitlines()
    assert [row.split()[:2] for row in table[2:]] == [["paused", "0"], ["paused", "1"]]
    assert "Attached to debug session for paused 1" in out
    assert "(Pdb) p some_local\n11\n" in out
    assert "-> return some_local" in out
    assert "(Pdb) p some_local\n33\n" in out
    assert "monarch_dbg> cast paused ranks(0:2) p rank\n[paused 0] 0\n[paused 1] 1\n" in out
    assert "error: paused has no debug session at rank 7; its sessions are at ranks 0, 1" in out
    assert "[paused 0] continued\n[paused 1] continued\n" in out
    assert out.rstrip().endswith("Leaving the debugger; the sessions stay in place.")
    assert sorted(results.get(timeout=WAIT).values()) == [30, 33]
    procs.stop().get(timeout=WAIT)


def test_monarch_debug_at_the_end_of_input_leaves_quietly(port):
    done = monarch("debug", "--host", "127.0.0.1", "--port", str(port), stdin="list\n")
    assert done.returncode == 0, done.stderr
    assert "No debug sessions" in done.stdout


def test_monarch_debug_without_a_server_says_how_one_starts():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    done = monarch("debug", "--host", "127.0.0.1", "--port", str(free))
    assert done.returncode == 1
    assert done.stdout == ""
    error = done.stderr.strip()
    assert error.startswith(f"monarch debug: error: no debug server at 127.0.0.1:{free}:")
    assert "breakpoint()" in error and "--host/--port" in error
