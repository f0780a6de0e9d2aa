"""The controller's side of the host agent: starts the fork server
(``zygote``), asks it for processes, and hears from it which exited and why."""

from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import select
import socket
import subprocess
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import cloudpickle  # type: ignore[import-untyped]
import msgpack  # type: ignore[import-untyped]

from monarch_transport import SECRET_ENV, job_secret

from .._core.config import PRELOAD
from .._core.process import get_runtime, job_dir
from .._core.router import Runtime
from .bootstrap import STARTED_BY_ENV, default_bootstrap_cmd

__all__ = [
    "JOB_DIR_OWNER_ENV",
    "PRELOAD_ENV",
    "ForkServer",
    "HostAgent",
    "agents",
    "local_agent",
    "preload",
    "start_blob",
    "start_fork_server",
]

JOB_DIR_OWNER_ENV = "MONARCH_AGENT_OWNS_JOB_DIR"
PRELOAD_ENV = PRELOAD.env[0]


def preload() -> str:
    """What the fork server imports before forking (so every proc has it at
    once), comma-separated: the ``preload`` setting (``$MONARCH_PRELOAD``);
    ``auto`` is torch if this script uses it, ``none`` nothing."""
    return default_bootstrap_cmd().env.get(PRELOAD_ENV) or ""


class ForkServer(NamedTuple):
    """A running fork server: its process (a fresh interpreter's ``Popen``, or
    this process forked) and the descriptor its events come from."""

    process: subprocess.Popen[bytes] | _Forked
    events: int

    def stop(self) -> None:
        """End the server (and the procs it started): it exits when its input closes."""
        if self.process.stdin is not None:
            self.process.stdin.close()


def start_fork_server(role: str, entry: str, preload: str | None, fork: bool = False) -> ForkServer:
    """Start this process's fork server, whose procs run ``entry``.

    A fresh interpreter runs the default bootstrap command, unless ``fork``
    and this process has one thread: then the server is this process,
    forked, and skips the interpreter's start and the runtime's imports (a
    worker does this before its runtime starts; the server drops what the
    worker's script set up, see ``zygote.serve_forked``).

    Args:
        role: this process's role ("controller", "worker", "proc").
        entry: what each proc runs ("module:function").
        preload: what the server imports before forking (comma-separated);
            ``None``: the bootstrap command's choice.
        fork: fork this process when that is safe.
    """
    job_secret()  # made now, so the server and every proc inherit it
    job_dir()
    # a script that uses torch will have actors that do: import it once, in the
    # server (the command's environment says what to preload)
    command = default_bootstrap_cmd()
    env = command.environment()
    if preload is not None:  # a worker's choice: it cannot know its controllers' scripts
        env[PRELOAD_ENV] = preload
    env.setdefault(SECRET_ENV, os.environ[SECRET_ENV])
    # the job's folder belongs to the controller: only its server may remove it, when
    # the controller died without cleaning up (a server started by a proc must not)
    env[JOB_DIR_OWNER_ENV] = "1" if role in ("controller", "worker") else "0"
    env[STARTED_BY_ENV] = str(os.getpid())
    if fork and _one_thread():
        return _fork_server(entry, env)
    read, write = os.pipe()
    process = subprocess.Popen(
        [*command.argv(), str(write), entry],
        executable=command.program,
        stdin=subprocess.PIPE,
        pass_fds=(write,),
        env=env,
    )
    os.close(write)
    return ForkServer(process, read)


def _one_thread() -> bool:
    """Whether this process runs one thread only (native threads counted):
    forking it then copies no lock that another thread holds."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:  # no /proc: not known, so no
        return False


def _fork_server(entry: str, env: dict[str, str]) -> ForkServer:
    # imported here: the bootstrap command runs that module as __main__, which
    # warns when the package's import has already put it in sys.modules
    from .zygote import serve_forked

    commands, orders = os.pipe()
    events, tell = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        serve_forked(parent, commands, tell, entry, env)
    os.close(commands)
    os.close(tell)
    return ForkServer(_Forked(pid, orders), events)


class _Forked:
    """A fork server forked from this process: what the agent uses of a
    ``subprocess.Popen``."""

    def __init__(self, pid: int, orders: int) -> None:
        self.pid = pid
        self.stdin = os.fdopen(orders, "wb")

    def wait(self, timeout: float) -> int | None:
        """Its exit code, once it exits within ``timeout`` seconds (None: it
        was reaped elsewhere).

        Raises:
            subprocess.TimeoutExpired: it still runs.
        """
        try:
            exited = os.pidfd_open(self.pid)  # readable once the process has exited
        except ProcessLookupError:
            return None
        try:
            if not select.select([exited], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(f"fork server {self.pid}", timeout)
        finally:
            os.close(exited)
        try:
            return os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        except ChildProcessError:
            return None


class HostAgent:
    """The fork server of this host, started on first use (or given, as
    ``start_fork_server`` made it), and the procs it started."""

    hostname = socket.gethostname()

    def __init__(
        self,
        runtime: Runtime,
        on_exit: Callable[[Any, int, int, str], None],
        entry: str,
        on_spawned: Callable[[Any, int, int], None] | None = None,
        preload: str | None = None,
        server: ForkServer | None = None,
    ) -> None:
        self.runtime = runtime
        self.on_exit = on_exit  # (proc table, rank, exit code, its last words), on the loop
        # (owner, rank, pid) once a process is forked; by default the owner's ``pids`` learn it
        self.on_spawned = on_spawned
        self.lock = threading.Lock()
        self.ids = itertools.count()
        self.owners: dict[int, tuple[Any, int]] = {}  # pid -> (table, rank)
        self.spawning: dict[int, tuple[Any, int]] = {}  # request id -> (table, rank)
        if server is None:
            server = start_fork_server(runtime.role, entry, preload)
        self.process, self.events = server
        threading.Thread(target=self._read_events, name="monarch-host-agent", daemon=True).start()

    def spawn(
        self, table: Any, rank: int, info: dict[str, Any], command: dict[str, Any] | None = None
    ) -> None:
        """Fork a process for ``rank`` of ``table``, to run with ``info``;
        with ``command`` (``command_spec``), the forked child executes it."""
        self.spawn_blob(table, rank, start_blob(info), command)

    def spawn_blob(
        self, table: Any, rank: int, blob: bytes, command: dict[str, Any] | None = None
    ) -> None:
        """Fork a process from an encoded start (``start_blob``), as a worker
        receives it from a controller on another host; with ``command``, the
        child executes that bootstrap command, which then becomes the process."""
        request = next(self.ids)
        self.spawning[request] = (table, rank)
        order: dict[str, Any] = {"op": "spawn", "id": request, "blob": blob}
        if command is not None:
            # the host's environment is this process's, as it is now (the fork server's
            # was fixed when it started)
            order["command"] = {**command, "base": dict(os.environ)}
        self._command(order)

    def import_modules(self, names: str) -> None:
        """Have the fork server import ``names`` (comma-separated) too, before
        it forks the next process (those installed and not imported yet)."""
        wanted = [n.strip() for n in names.split(",") if n.strip()]
        if wanted:
            self._command({"op": "preload", "names": wanted})

    def kill(self, pid: int, sig: int = 9) -> None:
        self._command({"op": "kill", "pid": pid, "sig": sig})

    def _command(self, command: dict[str, Any]) -> None:
        with self.lock:
            try:
                assert self.process.stdin is not None
                self.process.stdin.write(msgpack.packb(command))
                self.process.stdin.flush()
            except (BrokenPipeError, ValueError) as error:
                raise RuntimeError(
                    f"the host agent is gone ({error}); cannot start processes"
                ) from None

    def _read_events(self) -> None:
        unpacker = msgpack.Unpacker(raw=False)
        while True:
            try:
                data = os.read(self.events, 1 << 16)
            except OSError:
                return
            if not data:
                return
            unpacker.feed(data)
            for event in unpacker:
                self.runtime.call_soon(self._on_event, event)

    def _on_event(self, event: dict[str, Any]) -> None:  # on the loop
        if event["ev"] == "spawned":
            table, rank = self.spawning.pop(event["id"])
            self.owners[event["pid"]] = (table, rank)
            if self.on_spawned is not None:
                self.on_spawned(table, rank, event["pid"])
            else:
                table.pids[rank] = event["pid"]
        elif event["ev"] == "exited":
            owner = self.owners.pop(event["pid"], None)
            if owner is not None:
                self.on_exit(owner[0], owner[1], event["code"], event.get("why", ""))

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self.process.stdin is not None
            self.process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5)


def start_blob(info: dict[str, Any]) -> bytes:
    """What a forked process starts from: ``info`` pickled by value where it
    must be (a bootstrap function from a script)."""
    # the controller's sys.path travels outside the pickled info: the proc
    # needs it to unpickle what the info refers to (a bootstrap function)
    start = {"path": info.pop("path", None), "info": cloudpickle.dumps(info)}
    return pickle.dumps(start)


# by process id: a forked child must not use its parent's agent
agents: dict[int, HostAgent] = {}


def local_agent(on_exit: Callable[[Any, int, int, str], None], entry: str) -> HostAgent:
    """This process's host agent, started on first use: each proc it forks
    runs ``entry`` ("module:function", given the proc's start blob), and
    ``on_exit(table, rank, code, why)`` hears of every one that exits."""
    runtime = get_runtime()
    agent = agents.get(os.getpid())
    if agent is None:
        agent = agents[os.getpid()] = runtime.run_sync(HostAgent, runtime, on_exit, entry)
    return agent
