"""What this process knows of each proc mesh's processes: their addresses
(once they have started), their pids (for the ones started here), which are
being stopped. Mesh handles are shapes over a table's ranks."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .._core.process import get_runtime
from .._core.router import Runtime

__all__ = ["READY_TIMEOUT", "ProcTable", "ProcTables", "table_for"]

READY_TIMEOUT = 120.0  # seconds to wait for a proc mesh to start before pickling it


class ProcTable:
    """The processes of one proc mesh as this process knows them."""

    def __init__(
        self, mesh_id: str, name: str, size: int, addresses: list[str] | None = None
    ) -> None:
        self.id = mesh_id
        self.name = name
        self.size = size
        self.addresses: list[str | None] = list(addresses) if addresses else [None] * size
        self.ready = addresses is not None
        self.ready_event = threading.Event()
        if self.ready:
            self.ready_event.set()
        self.pending: list[Callable[[], None]] = []
        # casts handed to the loop by other threads and not yet sent: while any
        # is, later casts take the same way, so none overtakes another
        self.deferred = 0
        self.lock = threading.Lock()
        self.pids: dict[int, int] = {}  # rank -> pid, while the process lives
        self.hostname = ""  # where the processes run (set by the host that started them)
        self.hosts: dict[int, str] = {}  # rank -> its host, where ranks live on several
        self.agents: dict[int, Any] = {}  # rank -> the host agent that started it (kills it)
        self.exit_waiters: list[tuple[list[int], Callable[[], None]]] = []
        self.failure: str | None = None
        self.setup_error: Exception | None = None  # what a proc's bootstrap raised (the first)
        self.owned = False
        self.stopping: set[int] = set()  # ranks asked to stop: their exit is no failure

    def host_of(self, rank: int) -> str:
        """The host process ``rank`` runs on, as its agent names it."""
        return self.hosts.get(rank, self.hostname)

    @property
    def stopped(self) -> bool:
        return len(self.stopping) == self.size

    def when_ready(self, fn: Callable[[], None]) -> None:  # on the loop
        if self.ready:
            fn()
        else:
            self.pending.append(fn)

    def mark_ready(self) -> None:  # on the loop
        while self.pending:  # before other threads see `ready`: they go after these
            pending, self.pending = self.pending, []
            for fn in pending:
                fn()
        self.ready = True
        self.ready_event.set()

    def run_in_order(self, runtime: Runtime, fn: Callable[[], None]) -> None:
        """Run ``fn`` (which sends) once the processes are known, after every
        ``fn`` given before, from any thread: on this thread when it can."""
        if runtime.on_loop():
            self.when_ready(fn)
            return
        with self.lock:
            direct = self.ready and not self.deferred
            if not direct:
                self.deferred += 1
        if direct:
            fn()
            return

        def later() -> None:
            try:
                fn()
            finally:
                with self.lock:
                    self.deferred -= 1

        runtime.call_soon(self.when_ready, later)

    def when_exited(self, ranks: list[int], fn: Callable[[], None]) -> None:  # on the loop
        """Call ``fn`` once every process of ``ranks`` has exited."""
        self.exit_waiters.append((ranks, fn))
        self.notify_exits()

    def notify_exits(self) -> None:  # on the loop
        waiting = []
        for ranks, fn in self.exit_waiters:
            if any(rank in self.pids for rank in ranks):
                waiting.append((ranks, fn))
            else:
                fn()
        self.exit_waiters = waiting

    def wait_ready(self, runtime: Runtime) -> list[str]:
        if not self.ready_event.is_set():
            if runtime.on_loop():
                raise RuntimeError(f"proc mesh {self.name} is still starting")
            if not self.ready_event.wait(READY_TIMEOUT):
                raise TimeoutError(f"proc mesh {self.name} did not start in {READY_TIMEOUT} s")
        if self.failure is not None:
            raise RuntimeError(f"proc mesh {self.name} failed to start: {self.failure}")
        return [a or "" for a in self.addresses]


class ProcTables(dict[str, ProcTable]):
    """The proc meshes this process knows, by id (a runtime service)."""

    def owner_of(self, address: str) -> tuple[ProcTable, int] | None:
        """The live process started here that listens at ``address``, if any."""
        for table in self.values():
            if table.owned and address in table.addresses:
                rank = table.addresses.index(address)
                if rank in table.pids and rank not in table.stopping:
                    return table, rank
        return None


def table_for(mesh_id: str, name: str, addresses: list[str]) -> ProcTable:
    """The table of a mesh received from another process (one per mesh here)."""
    runtime = get_runtime()
    tables = runtime.get(ProcTables)
    table = tables.get(mesh_id)
    if table is None:
        table = tables[mesh_id] = ProcTable(mesh_id, name, len(addresses), addresses)
    elif not table.ready and all(addresses):
        table.addresses = list(addresses)
        runtime.call_soon(table.mark_ready)
    return table
