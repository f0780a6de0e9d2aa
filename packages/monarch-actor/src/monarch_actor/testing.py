"""What the workspace's test suites share: waiting on a condition, the fault
fixtures, whether processes are gone, and the check that no test leaves procs
running.

A suite takes the fixtures by importing them into its ``conftest.py``
(``no_unexpected_faults`` and ``no_leaked_procs`` are autouse: every test of
that folder gets them); tests import ``wait_for``, ``gone`` and ``alive``.
It needs pytest, which the packages' ``test`` extras bring.

Examples:
    >>> from monarch_actor.testing import wait_for
    >>> wait_for(lambda: True)
    True
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, NamedTuple

import pytest

import monarch_actor

from ._core.private import alive
from ._core.process import maybe_runtime
from ._procs.bootstrap import STARTED_BY_ENV
from ._procs.table import ProcTable, ProcTables

if TYPE_CHECKING:
    from monarch_actor import MeshFailure

__all__ = [
    "Failures",
    "Proc",
    "Seen",
    "alive",
    "blocks_ctrl_c",
    "failures",
    "gone",
    "leaked_procs",
    "no_leaked_procs",
    "no_unexpected_faults",
    "procs_of",
    "seen",
    "threads_named",
    "wait_for",
]

POLL = 0.02  # seconds between two looks at a condition
EXIT_GRACE = 10.0  # seconds a proc still exiting when its test ends has to be gone


def wait_for(condition: Callable[[], object], timeout: float = 10.0) -> bool:
    """Wait until ``condition()`` is true, looking every few milliseconds, for
    at most ``timeout`` seconds: for a test that waits on a state nothing
    signals (a file's contents, a state only a command shows). Where an event
    exists, wait on it instead (``gone`` does for processes).

    Args:
        condition: what to wait for; called until it returns something true.
        timeout: seconds to wait at most.

    Returns:
        Whether the condition came true (it is looked at once more at the deadline).
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(POLL)  # the poll's pace; the condition is what is waited on
    return bool(condition())


def blocks_ctrl_c(thread: threading.Thread) -> bool:
    """Whether a thread has SIGINT blocked, leaving Ctrl-C to the main thread.

    Args:
        thread: a started thread of this process (Linux: read from ``/proc``).

    Returns:
        True when the thread's signal mask blocks SIGINT.
    """
    with open(f"/proc/self/task/{thread.native_id}/status") as status:
        blocked = next(line for line in status if line.startswith("SigBlk:"))
    return bool(int(blocked.split()[1], 16) & (1 << (signal.SIGINT - 1)))


def threads_named(name: str) -> list[threading.Thread]:
    """The live threads of this process called ``name``.

    Args:
        name: the thread name to look for (``monarch-rdma-server``, say).

    Returns:
        Those threads, possibly none.
    """
    return [thread for thread in threading.enumerate() if thread.name == name]


def gone(pids: Iterable[int], timeout: float = 15.0) -> list[int]:
    """Wait (at most ``timeout`` seconds) until every one of ``pids`` has
    exited, on its exit itself (a pidfd each, readable once it exits; one not
    yet reaped by its parent has exited too).

    Args:
        pids: the process ids.
        timeout: seconds to wait at most.

    Returns:
        The pids still running then: ``[]`` when all went.
    """
    waiting: dict[int, int] = {}  # pidfd -> pid: readable once the process has exited
    try:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                waiting[os.pidfd_open(pid)] = pid
        poll = select.poll()
        for fd in waiting:
            poll.register(fd, select.POLLIN)
        deadline = time.monotonic() + timeout
        while waiting and (remaining := deadline - time.monotonic()) > 0:
            for fd, _ in poll.poll(remaining * 1000):
                poll.unregister(fd)
                os.close(fd)
                del waiting[fd]
        return list(waiting.values())
    finally:
        for fd in waiting:
            os.close(fd)


class Proc(NamedTuple):
    """A proc of this process's tree, as the leak check names it.

    Attributes:
        pid: its process id.
        started: its start time (clock ticks after boot): the pid is not reused under it.
        command: its command line.
        started_by: the pid of the process whose host agent started it.
    """

    pid: int
    started: int
    command: str
    started_by: int

    def mesh(self) -> tuple[str, str, int] | None:
        """The proc mesh it belongs to (id, name) and its rank there, when
        this process asked for it (from its own host agent or a worker's) and
        has heard that it started."""
        for table in _tables().values():
            for rank, pid in table.pids.copy().items():  # copied at once: the loop writes
                if pid == self.pid:
                    return table.id, table.name, rank
        return None

    def describe(self) -> str:
        """The pid, the mesh it belongs to (when this process started it), its command line."""
        mesh = self.mesh()
        if mesh is not None:
            where = f" rank {mesh[2]} of proc mesh {mesh[1]!r} ({mesh[0]})"
        elif self.started_by != os.getpid():
            where = f" started for process {self.started_by}"
        else:
            where = ""
        return f"pid {self.pid}{where}: {self.command}"


class Seen(NamedTuple):
    """What the leak check looks at before a test: the procs of this
    process's tree, and the proc meshes this process had asked for (their
    processes may still be starting: they are not the test's either).

    Attributes:
        procs: the procs, by pid (``procs_of()``).
        meshes: the ids of the proc meshes this process knew.
    """

    procs: dict[int, Proc]
    meshes: frozenset[str]

    def before(self, proc: Proc) -> bool:
        """Whether ``proc`` was there, or belongs to a mesh that was.

        Args:
            proc: a proc found later.
        """
        there = self.procs.get(proc.pid)
        if there is not None and there.started == proc.started:
            return True
        mesh = proc.mesh()
        return mesh is not None and mesh[0] in self.meshes


def _tables() -> dict[str, ProcTable]:
    """The proc meshes this process knows, by id (none before its runtime starts)."""
    runtime = maybe_runtime()
    tables: ProcTables | None = runtime.services.get(ProcTables) if runtime else None
    return {} if tables is None else tables.copy()  # copied at once: the loop adds to it


def seen() -> Seen:
    """The procs of this process's tree and the ids of the proc meshes it knows, now."""
    return Seen(procs_of(), frozenset(_tables()))


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError:  # gone, or not ours to read
        return b""


def _children(pid: int) -> list[int]:
    """The processes ``pid`` started (of every thread of it) that have not exited."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            found.extend(int(child) for child in _read(f"/proc/{pid}/task/{task}/children").split())
    return found


# what a process (pid, start time) is: its environment and command line do not
# change, so each is read once (a test then costs a read of /proc/PID/stat per process)
_known: dict[tuple[int, int], Proc | None] = {}


def _proc(pid: int, parent: int) -> Proc | None:
    """``pid`` when it is a live proc (a host agent's child, with the marker of
    whoever started that agent), else ``None``."""
    stat = _read(f"/proc/{pid}/stat")
    fields = stat[stat.rfind(b")") + 2 :].split()
    if len(fields) < 20 or fields[0] == b"Z":  # gone, or exited and not yet reaped
        return None
    key = (pid, int(fields[19]))
    if key not in _known:
        _known[key] = _identify(pid, key[1], parent)
    return _known[key]


def _identify(pid: int, started: int, parent: int) -> Proc | None:
    marker = STARTED_BY_ENV.encode() + b"="
    for variable in _read(f"/proc/{pid}/environ").split(b"\0"):
        if variable.startswith(marker):
            started_by = int(variable[len(marker) :])
            # the agent itself carries its starter's pid too: it is that process's child
            if started_by == parent:
                return None
            command = _read(f"/proc/{pid}/cmdline").replace(b"\0", b" ")
            return Proc(pid, started, command.decode(errors="replace").strip(), started_by)
    return None


def procs_of(root: int | None = None) -> dict[int, Proc]:
    """The procs (processes a host agent started) among the descendants of
    ``root`` (this process by default), by pid; host agents themselves and
    every other process are left out.

    Args:
        root: the process whose tree is searched.
    """
    found: dict[int, Proc] = {}
    parents = [os.getpid() if root is None else root]
    while parents:
        parent = parents.pop()
        for child in _children(parent):
            parents.append(child)
            proc = _proc(child, parent)
            if proc is not None:
                found[child] = proc
    return found


def leaked_procs(before: Seen, grace: float | None = None) -> list[Proc]:
    """The procs of this process's tree that were not there ``before`` (nor
    of a mesh that was) and are still running: each that is still exiting is
    given until ``grace`` seconds pass to be gone (its exit is waited for,
    not slept on).

    Args:
        before: ``seen()`` as it was when the test started.
        grace: seconds to wait at most for the new ones to exit; ``None``:
            ``EXIT_GRACE``.
    """
    new = [p for p in procs_of().values() if not before.before(p)]
    if not new:
        return []
    still = set(gone([p.pid for p in new], EXIT_GRACE if grace is None else grace))
    # a proc whose start was heard of only now may be of a mesh that was there before
    return [p for p in new if p.pid in still and not before.before(p)]


@pytest.fixture(autouse=True)
def no_leaked_procs() -> Iterator[None]:
    """A test that leaves procs running (spawned by it or by its own
    fixtures, and not stopped) fails, naming each: its pid, its mesh and its
    command line. Procs of wider fixtures (a session's proc mesh) started
    before it and are not its own."""
    before = seen()
    yield
    leaked = leaked_procs(before)
    assert not leaked, "procs left running by this test (stop its meshes):\n" + "\n".join(
        p.describe() for p in leaked
    )


class Failures(list["MeshFailure"]):
    """Failures that reached the controller's hook; ``wait`` for the first."""

    def __init__(self) -> None:
        super().__init__()
        self._arrived = threading.Event()

    def append(self, failure: MeshFailure) -> None:
        """Record ``failure`` (the hook calls it).

        Args:
            failure: what reached the hook.
        """
        super().append(failure)
        self._arrived.set()

    def wait(self, timeout: float) -> bool:
        """Wait for the first failure; whether one came within ``timeout`` seconds.

        Args:
            timeout: seconds to wait at most.
        """
        return self._arrived.wait(timeout)


@pytest.fixture(autouse=True)
def no_unexpected_faults() -> Iterator[None]:
    """A failure nobody handled fails the test that caused it, with its
    report, instead of interrupting the whole run (the default hook's
    SIGINT)."""
    seen = Failures()
    default = monarch_actor.unhandled_fault_hook
    monarch_actor.unhandled_fault_hook = seen.append
    try:
        yield
    finally:
        monarch_actor.unhandled_fault_hook = default
    assert not seen, "unhandled failures:\n" + "\n".join(f.report() for f in seen)


@pytest.fixture
def failures() -> Iterator[Failures]:
    """The failures that reach the controller's hook during the test (none is
    an error here: the test expects them and looks at them)."""
    seen = Failures()
    before = monarch_actor.unhandled_fault_hook
    monarch_actor.unhandled_fault_hook = seen.append
    yield seen
    monarch_actor.unhandled_fault_hook = before
