"""Fake processes and actors wired to real SupervisionTrees: messages between
them go through one queue, run in order, as a runtime's loops would."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from monarch_supervision import ROOT, Delivery, MeshFailure, SupervisionTree, run_fault_hook


class FakeActor:
    def __init__(self, proc: FakeProc, key: str, supervise: Callable[[MeshFailure], Any] | None):
        self.proc = proc
        self.key = key
        self.supervise = supervise
        self.mesh = ""  # the mesh this actor belongs to, and who owns it
        self.owner_proc: FakeProc | None = None
        self.rank = 0


class FakeProc:
    """One process: its tree, its actors; ``to_root`` of the controller calls the hook."""

    def __init__(self, world: World, name: str) -> None:
        self.world = world
        self.name = name
        self.tree = SupervisionTree(self)
        self.actors: dict[str, FakeActor] = {}

    def to_actor(self, delivery: Delivery) -> bool:
        actor = self.actors.get(delivery.owner)
        if actor is None or actor.supervise is None:
            return False
        self.world.log.append(f"{actor.key}.__supervise__({delivery.failure.mesh_name})")

        def run() -> None:
            try:
                outcome = actor.supervise(delivery.failure)  # type: ignore[misc]
            except Exception as error:
                self.tree.supervised(delivery, None, error)
            else:
                self.tree.supervised(delivery, outcome)

        self.world.later(run)
        return True

    def to_root(self, failure: MeshFailure) -> None:
        self.world.log.append(f"hook({failure.mesh_name})")
        self.world.hooked.append(failure)
        run_fault_hook(self.world.hook, failure)

    def fail_actor(self, owner: str, reason: str, cause: MeshFailure) -> None:
        actor = self.actors[owner]
        self.world.log.append(f"{owner} fails")
        assert actor.owner_proc is not None
        parent = actor.owner_proc
        self.world.later(
            lambda: parent.tree.fail(actor.mesh, [actor.rank], owner, reason, cause=cause)
        )


class World:
    def __init__(self) -> None:
        self.queue: collections.deque[Callable[[], None]] = collections.deque()
        self.log: list[str] = []
        self.hooked: list[MeshFailure] = []
        self.hook: Callable[[MeshFailure], object] = lambda failure: None
        self.controller = FakeProc(self, "controller")

    def later(self, fn: Callable[[], None]) -> None:
        self.queue.append(fn)

    def run(self) -> None:
        for _ in range(10_000):
            if not self.queue:
                return
            self.queue.popleft()()
        raise AssertionError("the fake world did not settle")

    def spawn(
        self,
        owner_proc: FakeProc,
        owner: str,
        mesh: str,
        procs: list[FakeProc],
        supervise: Callable[[MeshFailure], Any] | None = None,
    ) -> list[FakeActor]:
        """A mesh with one actor in each of ``procs``, owned by ``owner``."""
        owner_proc.tree.adopt(mesh, owner, len(procs))
        actors = []
        for rank, proc in enumerate(procs):
            actor = FakeActor(proc, f"{mesh}[{rank}]", supervise)
            actor.mesh, actor.owner_proc, actor.rank = mesh, owner_proc, rank
            proc.actors[actor.key] = actor
            actors.append(actor)
        return actors

    def crash(self, actor: FakeActor, reason: str = "boom") -> None:
        """What a runtime does when ``actor``'s endpoint raises with nobody awaiting."""
        assert actor.owner_proc is not None
        owner_proc = actor.owner_proc
        self.later(lambda: owner_proc.tree.fail(actor.mesh, [actor.rank], actor.key, reason))


__all__ = ["ROOT", "FakeActor", "FakeProc", "World"]
