"""``breakpoint()`` in an actor whose controller is a Jupyter kernel, driven
as a notebook user does it: the actor class is defined in a cell, the cell
that calls it shows where to attach, ``monarch debug`` (the real command, in
a process of its own) attaches from a terminal, shows the cell's source,
steps and continues, and the call returns in the notebook. The kernel stays
free while an actor waits in pdb, and nothing asks on the kernel's stdin."""

from __future__ import annotations

import os
import queue
import re
import socket
import subprocess
import sys
import time
from typing import Any

import pytest

pytest.importorskip("ipykernel")
manager = pytest.importorskip("jupyter_client.manager")

WAIT = 90  # seconds: the most any step here may take

DEFINE = """\
from monarch.actor import Actor, current_rank, debug_controller, endpoint, this_host


class Trainer(Actor):
    @endpoint
    def step(self, lr: float) -> float:
        loss = 1.0 / (current_rank().rank + 1)
        breakpoint()
        loss = loss * lr  # AFTER_THE_BREAKPOINT
        return loss


procs = this_host().spawn_procs(per_host={"gpus": 1})
trainers = procs.spawn("trainers", Trainer)
"""


class Kernel:
    """A Jupyter kernel and every message it sent on iopub and stdin, by the
    cell (request) that it belongs to."""

    def __init__(self, env: dict[str, str]) -> None:
        self.manager, self.client = manager.start_new_kernel(kernel_name="python3", env=env)
        self.messages: queue.Queue[dict[str, Any]] = queue.Queue()
        self.shown: dict[str, list[str]] = {}
        self.done: dict[str, str] = {}

    def start(self, code: str) -> str:
        """Run a cell without waiting for it; its request id."""
        msg_id: str = self.client.execute(code, allow_stdin=True)
        self.shown[msg_id] = []
        return msg_id

    def pump(self, until, timeout: float = WAIT) -> None:
        """Read what the kernel sends until ``until()`` holds."""
        deadline = time.monotonic() + timeout
        while not until():
            assert time.monotonic() < deadline, f"the kernel showed: {self.shown}"
            assert not self.client.stdin_channel.msg_ready(), "the kernel asked for input"
            try:
                msg = self.client.get_iopub_msg(timeout=0.5)
            except queue.Empty:
                continue
            parent = msg["parent_header"].get("msg_id")
            kind, content = msg["msg_type"], msg["content"]
            if parent not in self.shown:
                continue
            if kind == "stream":
                self.shown[parent].append(content["text"])
            elif kind in ("execute_result", "display_data"):
                self.shown[parent].append(content["data"].get("text/plain", ""))
            elif kind == "error":
                self.shown[parent].append(f"{content['ename']}: {content['evalue']}")
                self.done[parent] = "error"
            elif kind == "status" and content["execution_state"] == "idle":
                self.done.setdefault(parent, "ok")

    def text(self, msg_id: str) -> str:
        return "".join(self.shown[msg_id])

    def run(self, code: str) -> str:
        """Run a cell to its end; what it showed."""
        msg_id = self.start(code)
        self.pump(lambda: msg_id in self.done)
        assert self.done[msg_id] == "ok", self.text(msg_id)
        return self.text(msg_id)

    def shutdown(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def monarch_debug(port: int, typed: list[str], env: dict[str, str]) -> str:
    """``monarch debug`` in a terminal of its own, as the kernel's user: what it printed."""
    done = subprocess.run(
        [sys.executable, "-m", "monarch_launcher", "debug", "--port", str(port)],
        input="\n".join(typed) + "\n",
        capture_output=True,
        text=True,
        timeout=WAIT,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def kernel(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    env["MONARCH_STATE_DIR"] = str(tmp_path / "state")  # where monarch debug finds the secret
    env["MONARCH_DEBUG_SERVER_PORT"] = str(port)
    env.pop("MONARCH_JOB_SECRET", None)  # the kernel makes its own, as a fresh notebook does
    started = Kernel(env)
    started.port = port  # type: ignore[attr-defined]
    started.env = env  # type: ignore[attr-defined]
    try:
        yield started
    finally:
        started.shutdown()


def test_a_breakpoint_in_a_cells_actor_is_attached_from_a_terminal(kernel):
    kernel.run(DEFINE)

    # a call that waits in the cell: the cell shows where to attach
    busy = kernel.start("print('loss:', trainers.step.call_one(0.5).get())")
    kernel.pump(lambda: "attach with `monarch debug" in kernel.text(busy))
    assert f"--port {kernel.port}`" in kernel.text(busy)
    assert busy not in kernel.done  # the call waits for the debugger

    typed = ["list", "attach trainers 0", "p loss", "l", "detach", "continue", "quit"]
    out = monarch_debug(kernel.port, typed, kernel.env)
    assert "Trainer.step" in out.split("monarch_dbg> list\n")[1]
    assert "Attached to debug session for trainers 0" in out
    assert "(Pdb) p loss\n1.0\n" in out
    # the cell's own source, from the kernel: not a file on disk
    assert re.search(r"> \S*ipykernel_\d+/\d+\.py\(\d+\)step\(\)", out), out
    assert "loss = loss * lr  # AFTER_THE_BREAKPOINT" in out, out
    assert "[trainers 0] continued" in out

    kernel.pump(lambda: busy in kernel.done)
    assert kernel.done[busy] == "ok", kernel.text(busy)
    assert "loss: 0.5" in kernel.text(busy)
    assert "stopped" in kernel.run("procs.stop().get(); print('stopped')")


def test_the_kernel_stays_free_while_an_actor_waits_in_pdb(kernel):
    kernel.run(DEFINE)
    kernel.run("pending = trainers.step.call_one(0.25)")
    shown = kernel.run(
        "[info] = debug_controller().wait_pending_session.call_one(1, 60).get()\n"
        "print(info.actor_name, info.function, 6 * 7)"
    )
    assert "trainers Trainer.step 42" in shown  # other cells run: the kernel is not blocked

    out = monarch_debug(kernel.port, ["continue"], kernel.env)
    assert "[trainers 0] continued" in out
    assert "loss: 0.25" in kernel.run("print('loss:', pending.get())")
    assert "stopped" in kernel.run("procs.stop().get(); print('stopped')")


def test_attaching_in_a_thread_of_the_kernel(kernel):
    """The notebook's own cells can drive the debugger too (``DebugClient``)."""
    kernel.run(DEFINE)
    shown = kernel.run(
        "from monarch_actor import DebugClient\n"
        "pending = trainers.step.call_one(2.0)\n"
        "debug_controller().wait_pending_session.call_one(1, 60).get()\n"
        "with DebugClient() as debugger:\n"
        "    debugger.send('attach trainers 0')\n"
        "    print('loss is', debugger.send('p loss').strip())\n"
        "    debugger.send('detach')\n"
        "    debugger.send('continue')\n"
        "print('returned', pending.get())\n"
        "procs.stop().get()"
    )
    assert "loss is 1.0" in shown and "returned 2.0" in shown, shown
