"""``default_bootstrap_cmd`` is the command hosts start their fork server
with, and ``attach(addr)`` makes a client reached through a relay at ``addr``."""

import contextlib
import os
import socket
import subprocess
import sys
import textwrap
import threading

import pytest

from monarch_actor import (
    Actor,
    BootstrapCommand,
    attach,
    default_bootstrap_cmd,
    endpoint,
    this_proc,
)


class ParentCommand(Actor):
    @endpoint
    def parent_argv(self) -> list[str]:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            return [part.decode() for part in f.read().split(b"\0") if part]


def test_default_bootstrap_cmd_starts_this_interpreters_fork_server():
    command = default_bootstrap_cmd()
    assert isinstance(command, BootstrapCommand)
    assert command.program == sys.executable and command.arg0 is None
    assert command.args == ["-m", "monarch_actor._procs.zygote"]
    assert command.env == {"MONARCH_PRELOAD": ""}  # conftest's "none": nothing to preload
    assert command.inherit_env


def test_a_workers_fork_server_preloads_only_what_it_is_told_to():
    """A worker starts its fork server before any script attaches, so ``auto``
    cannot mean "what the script imported" yet: it is nothing until a script
    attaches (torch only where the worker's setting names it)."""
    from monarch_actor._procs.worker import worker_preload

    assert worker_preload("auto") == ""
    assert worker_preload("none") == ""
    assert worker_preload("torch") == "torch"
    assert worker_preload("numpy,json") == "numpy,json"


def test_the_processes_are_forked_from_that_command(procs):
    argv = procs.spawn("parent_command", ParentCommand).parent_argv.call().get(timeout=60)
    expected = default_bootstrap_cmd().argv()
    for _, seen in argv.items():
        assert seen[: len(expected)] == expected


def test_bootstrap_command_environment():
    base = {"KEEP": "1", "DROP": "2"}
    command = BootstrapCommand("python3", "py", ["-c", "pass"], {"NEW": "3", "DROP": None})
    assert command.argv() == ["py", "-c", "pass"]
    assert command.environment(base) == {"KEEP": "1", "NEW": "3"}
    changed = command.with_env({"KEEP": None, "MORE": "4"})
    assert changed.environment(base) == {"NEW": "3", "MORE": "4"}
    assert command.env == {"NEW": "3", "DROP": None}  # the original is unchanged
    alone = BootstrapCommand("python3", None, [], {"ONLY": "x"}, inherit_env=False)
    assert alone.environment(base) == {"ONLY": "x"} and alone.argv() == ["python3"]
    assert changed == command.with_env({"KEEP": None, "MORE": "4"}) and changed != command
    with pytest.raises(TypeError, match="program"):
        BootstrapCommand("")


def test_attach_refuses_a_client_that_started_without_it():
    this_proc()  # the test session's client is running
    with pytest.raises(RuntimeError, match=r"before the first context\(\)"):
        attach("tcp://127.0.0.1:29999")
    with pytest.raises(TypeError, match="address"):
        attach(29999)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="port"):
        attach("tcp://gateway.example:0")


class Relay:
    """A TCP relay (what an SSH tunnel or a port-forward would be): every
    connection to its port is piped to ``target``."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            upstream = socket.create_connection(("127.0.0.1", self.target))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(1 << 16):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


def _free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return probe.getsockname()[1]


CLIENT = textwrap.dedent(
    """
    import sys
    from monarch_actor import Actor, attach, context, endpoint, this_host

    class Echo(Actor):
        @endpoint
        def echo(self, value):
            return value

    addr = sys.argv[1]
    attach(addr)
    attach(addr)  # the same again: nothing to do
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    values = procs.spawn("echo", Echo).echo.call(41).get(timeout=60)
    print("values", sorted(v for _, v in values.items()))
    try:
        attach("tcp://127.0.0.1:1@tcp://127.0.0.1:2")
    except RuntimeError as error:
        print("moved:", error)
    procs.stop().get(timeout=60)
    """
)


def test_attached_client_is_reached_through_the_relay():
    local = _free_port()
    relay = Relay(local)
    address = f"tcp://127.0.0.1:{relay.port}@tcp://127.0.0.1:{local}"
    done = subprocess.run(
        [sys.executable, "-c", CLIENT, address],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "values [41, 41]" in done.stdout
    assert f"already attached through {address}" in done.stdout
    assert relay.connections >= 2  # both processes answered through the relay
