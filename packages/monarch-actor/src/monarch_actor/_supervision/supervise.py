"""The runtime's side of supervision: it tells the process's
``SupervisionTree`` (monarch_supervision) what happened (a failure report, a
process exit, a lost connection, a silent process) and carries out what the
tree decides (wake an owner's ``__supervise__``, fail an owner, call the
root's hook). It also remembers which meshes each owner spawned, so that an
owner's stop stops them, and answers at once for calls to dead meshes.
"""

from __future__ import annotations

import contextlib
import logging
import textwrap
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from monarch_supervision import (
    ROOT,
    Delivery,
    HeartbeatMonitor,
    MeshFailure,
    SupervisionTree,
    exit_reason,
)
from monarch_transport import decode

from .._core.config import heartbeat_deadline
from .._core.current import Running, current
from .._core.lifecycle import HeartbeatMissed, emit
from .._core.router import Frames, Runtime
from .._core.wire import Key, Kind
from .._procs.table import ProcTable, ProcTables
from .faults import report_to_root
from .handles import OwnedActors, OwnedProcs
from .wording import PROC_MESH_STOPPED, actor_failed, actor_stopped

__all__ = ["OwnedMesh", "Supervised", "Supervision", "actor_name", "current_owner"]

log = logging.getLogger("monarch.actor.supervision")


@dataclass
class OwnedMesh:
    """A mesh this process spawned: its handle, and which rank of its
    processes holds which of its ranks."""

    key: str
    owner: str
    handle: OwnedActors | OwnedProcs
    table: ProcTable
    positions: dict[int, int]  # process rank in the table -> rank in this mesh
    kind: str  # "actor" or "proc"

    def describe(self, position: int) -> str:
        if self.kind == "proc":
            return f"<proc {self.table.name}-{position}>"
        return actor_name(self.handle, position, self.owner)


def actor_name(mesh: Any, position: int, owner: str | None) -> str:
    """The display name of the actor at ``position`` of actor mesh ``mesh``'s
    processes, as Monarch writes an actor id: ``<root>.<module.Class name{'gpus': 0/2}>``
    (without the owner's part when it is not known here)."""
    cls = mesh._class
    labels = mesh._procs._shape.labels
    sizes = mesh._procs._shape.extent.sizes
    point = ", ".join(
        f"'{label}': {_coordinate(position, sizes, i)}/{size}"
        for i, (label, size) in enumerate(zip(labels, sizes, strict=True))
    )
    me = f"<{cls.__module__}.{cls.__qualname__} {mesh._spawn_name}{{{point}}}>"
    if owner is None:
        return me
    return f"{'<root>' if owner == ROOT else owner}.{me}"


def _coordinate(position: int, sizes: list[int], index: int) -> int:
    stride = 1
    for size in sizes[index + 1 :]:
        stride *= size
    return (position // stride) % sizes[index]


def current_owner() -> str:
    """Who owns what the calling code spawns: the actor running here, or the root."""
    ctx: Running | None = current()
    key = ctx.actor_key if ctx is not None else None
    return key or ROOT


class Supervised(Protocol):
    """An actor of this process, as supervision needs it."""

    def supervise(self, delivery: Delivery) -> bool:
        """Hand ``delivery`` to the actor's ``__supervise__``; False if it cannot take it."""

    def fail_unsupervised(self, reason: str, cause: MeshFailure) -> None:
        """A failure of a mesh the actor owns was not handled: the actor fails."""


class Supervision:
    """One per process (a runtime service); the ``Routes`` of its tree."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.tables = runtime.get(ProcTables)
        self.tree = SupervisionTree(self)
        self.owned: dict[str, OwnedMesh] = {}
        self.monitor = HeartbeatMonitor(heartbeat_deadline())
        self.silent: dict[tuple[str, int], str] = {}  # why a silent process was killed
        self.checking = False
        # proc mesh id -> its processes that hosted a failed actor: they refuse new spawns
        self.tainted: dict[str, set[int]] = {}
        self.procs_stopped: set[str] = set()  # meshes stopped because their procs were
        # the actors of this process, by key (set by the layer that hosts them)
        self.find_actor: Callable[[str], Supervised | None] = lambda key: None
        runtime.provide(self)
        runtime.handle(Kind.FAILURE, self.on_report)
        runtime.handle(Kind.HEARTBEAT, self.beat)
        runtime.lost_hooks.append(self.peer_lost)
        runtime.exit_reporters.append(self.exit_will_be_reported)

    @staticmethod
    def of(runtime: Runtime) -> Supervision:
        """The supervision of ``runtime``'s process."""
        return runtime.get(Supervision)

    # -- ownership ------------------------------------------------------------------------

    def adopt(self, handle: OwnedActors | OwnedProcs, kind: str) -> str:
        """Record a mesh spawned by the calling code; returns its owner."""
        owner = current_owner()
        if kind == "actor":
            mesh: Any = handle
            key, procs = mesh._key, mesh._procs
        else:
            key, procs = cast(OwnedProcs, handle)._table.id, handle
        positions = {rank: i for i, rank in enumerate(procs._shape.ndslice)}
        self.tree.adopt(key, owner, len(positions))
        self.owned[key] = OwnedMesh(key, owner, handle, procs._table, positions, kind)
        return owner

    def dead(self, key: str, table_ranks: Iterable[int]) -> str | None:
        """Why a message to these processes' ranks of mesh ``key`` cannot be
        handled, in Monarch's words (what follows "Endpoint call ... failed, ")."""
        entry = self.owned.get(key)
        if entry is None or not self.tree.troubled(key):
            return None
        positions = [entry.positions.get(r, -1) for r in table_ranks]
        stopped = self.tree.stop_reason(key)
        if stopped is not None:
            if entry.kind == "proc":
                return f"`ProcMesh` has already been stopped ({stopped})"
            if key in self.procs_stopped:
                return f"{PROC_MESH_STOPPED} ({stopped})"
            return actor_stopped(entry.describe(positions[0] if positions else 0), stopped)
        failure = self.tree.first_failure(key, positions)
        if failure is None:
            return None
        if entry.kind == "proc":
            return f"the process {failure.actor} has failed:\n" + textwrap.indent(
                failure.reason, "  "
            )
        return actor_failed(failure.actor, failure.reason)

    def refusing_spawns(self, table_id: str, table_ranks: Iterable[int]) -> list[int]:
        """The positions among ``table_ranks`` whose processes hosted a failed
        actor (as in Monarch, they accept no new actors)."""
        tainted = self.tainted.get(table_id)
        if not tainted:
            return []
        return [i for i, rank in enumerate(table_ranks) if rank in tainted]

    def stopping(self, key: str, reason: str) -> None:
        self.tree.stopped(key, reason)

    def stopping_procs(self, table: ProcTable, reason: str) -> None:
        """All of ``table``'s processes are being stopped: so are the actors on them."""
        for entry in list(self.owned.values()):
            if entry.table is table:
                if self.tree.stop_reason(entry.key) is None:
                    self.procs_stopped.add(entry.key)
                self.tree.stopped(entry.key, reason)

    def stop_owned(self, owner: str, reason: str, timeout: float) -> None:
        """Stop every mesh ``owner`` spawned (actor meshes, then processes) and wait."""
        deadline = time.monotonic() + timeout
        keys = self.tree.owned_by(owner)
        for kind in ("actor", "proc"):
            futures = []
            for key in keys:
                entry = self.owned.get(key)
                if entry is not None and entry.kind == kind:
                    futures.append(entry.handle.stop(reason))
            for future in futures:
                with contextlib.suppress(Exception):
                    future.get(max(0.0, deadline - time.monotonic()))

    # -- Routes: carrying out the tree's decisions ---------------------------------------

    def to_actor(self, delivery: Delivery) -> bool:
        host = self.find_actor(delivery.owner)
        return host is not None and host.supervise(delivery)

    def to_root(self, failure: MeshFailure) -> None:
        if self.runtime.role == "controller":
            report_to_root(failure)
        else:  # this process's root client answers to the process's owner
            self.report(self.runtime.owner, failure, ROOT)

    def fail_actor(self, owner: str, reason: str, cause: MeshFailure) -> None:
        host = self.find_actor(owner)
        if host is None:
            log.error("%s did not handle a failure and is gone:\n%s", owner, cause.report())
        else:
            host.fail_unsupervised(reason, cause)

    def report(self, address: str, failure: MeshFailure, owner: str) -> None:
        """Send ``failure`` to the tree of the process at ``address``, for ``owner``."""
        self.runtime.send(address, {Key.KIND: Kind.FAILURE}, {"failure": failure, "owner": owner})

    # -- what happened -------------------------------------------------------------------

    def on_report(self, header: dict[str, Any], frames: Frames) -> None:
        """A failure reported by an actor (or a process's tree) to its owner here."""
        report: Any = decode(frames)[1]
        failure: MeshFailure = report["failure"]
        entry = self.owned.get(failure.mesh_name)
        if entry is not None and entry.kind == "actor":
            crashed = set(failure.crashed_ranks)
            hosts = {rank for rank, position in entry.positions.items() if position in crashed}
            self.tainted.setdefault(entry.table.id, set()).update(hosts)
        self.tree.fail(
            failure.mesh_name,
            failure.crashed_ranks,
            failure.actor,
            failure.reason,
            cause=failure.cause,
            owner=report["owner"],
        )

    def exit_reason(self, table: ProcTable, rank: int, code: int, where: str) -> str:
        """Why a process started here exited, in words; ``where`` names the process."""
        silent = self.silent.pop((table.id, rank), None)
        if silent is not None:
            return f"{silent} ({where})"
        return exit_reason(code, where)

    def proc_exited(self, table: ProcTable, rank: int, reason: str, expected: bool) -> None:
        self.monitor.forget((table.id, rank))
        if not expected:
            self.proc_lost(table, rank, reason)

    def exit_will_be_reported(self, address: str) -> bool:
        """Whether ``address`` is a live process started here: its exit, with
        the reason, is reported by the host agent."""
        return self.tables.owner_of(address) is not None

    def proc_lost(self, table: ProcTable, rank: int, reason: str) -> None:
        """Every mesh of this process's with a rank on that process failed there."""
        delivered = False
        for entry in list(self.owned.values()):
            if entry.table is table and entry.kind == "actor" and rank in entry.positions:
                position = entry.positions[rank]
                self.tree.fail(entry.key, [position], entry.describe(position), reason)
                delivered = True
        if table.id in self.owned:
            entry = self.owned[table.id]
            position = entry.positions.get(rank, rank)
            if delivered:  # its actors' owners were told; the processes are marked failed
                self.tree.record(table.id, [position], entry.describe(position), reason)
            else:
                self.tree.fail(table.id, [position], entry.describe(position), reason)

    def peer_lost(self, address: str, reason: str) -> None:
        """A connection broke: meshes spawned here on processes another process
        started lose the ranks there (processes started here report their exit)."""
        if self.runtime.closing:
            return
        tables = {
            id(e.table): e.table
            for e in self.owned.values()
            if not e.table.owned and address in e.table.addresses
        }
        for table in tables.values():
            for rank, where in enumerate(table.addresses):
                if where == address:
                    self.proc_lost(
                        table,
                        rank,
                        f"the process this actor was running on is unreachable: {reason}",
                    )

    # -- heartbeats ------------------------------------------------------------------------

    def watch(self, table: ProcTable, rank: int) -> None:
        """Expect heartbeats from a process started here (on the loop)."""
        self.monitor.watch((table.id, rank))
        if not self.checking:
            self.checking = True
            self.runtime.loop.call_later(self.monitor.interval, self._check)

    def beat(self, header: dict[str, Any], frames: Frames) -> None:
        self.monitor.beat((header[Key.MESH], header[Key.RANK]))

    def _check(self) -> None:
        for peer, silent in self.monitor.overdue():
            mesh, rank = cast(tuple[str, int], peer)
            table = self.tables.get(mesh)
            if table is None or rank in table.stopping:
                continue
            reason = (
                f"the process this actor was running on sent no heartbeat for {silent:.1f} s "
                f"(deadline {self.monitor.deadline:g} s, MONARCH_HEARTBEAT_DEADLINE); it was "
                "declared dead and killed"
            )
            log.error("process %s-%s is silent: %s", table.name, rank, reason)
            emit(HeartbeatMissed(mesh, rank, silent))
            self.silent[(mesh, rank)] = reason
            self._kill_silent(table, rank, reason)
        if self.monitor.watching() and not self.runtime.closing:
            self.runtime.loop.call_later(self.monitor.interval, self._check)
        else:
            self.checking = False

    def _kill_silent(self, table: ProcTable, rank: int, reason: str) -> None:
        address = table.addresses[rank]
        if address:  # calls in flight fail now, not when the kill lands
            self.runtime.peer_gone(address, reason)
        agent = table.agents.get(rank)
        pid = table.pids.get(rank)
        if agent is not None and pid is not None:
            agent.kill(pid)  # its exit is then reported with this reason
        else:
            self.silent.pop((table.id, rank), None)
            self.proc_lost(table, rank, reason)


def start_heartbeats(runtime: Runtime, owner: str, mesh: str, rank: int, interval: float) -> None:
    """In a proc: tell the owner it lives, every ``interval`` seconds."""
    header = {Key.KIND: Kind.HEARTBEAT, Key.MESH: mesh, Key.RANK: rank}

    def beat() -> None:
        if runtime.closing:
            return
        runtime.send(owner, header, None)
        runtime.loop.call_later(interval, beat)

    beat()
