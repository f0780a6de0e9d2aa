"""Who spawned an actor: ``context().actor_instance.creator``."""

from __future__ import annotations

from monarch_mesh import Extent, Point


class CreatorInstance:
    """Who spawned an actor: ``context().actor_instance.creator``, as in Monarch.

    A plain value that travels with the spawn; ``repr`` gives the chain of
    spawners, ``<root>.<module.Class name{rank}>...``.

    Args:
        name: the spawner's mesh name (``"root"`` for the root client).
        class_name: the spawner's class, ``module.QualifiedName``; ``None`` for
            the root client.
        rank: the spawner's point in its mesh.
        creator: who spawned the spawner; ``None`` for the root client.

    Attributes:
        name: the spawner's mesh name (``"root"`` for the root client).
        class_name: the spawner's class; ``None`` for the root client.
        rank: the spawner's point in its mesh.
        creator: who spawned the spawner; ``None`` for the root client.
    """

    def __init__(
        self, name: str, class_name: str | None, rank: Point, creator: CreatorInstance | None
    ) -> None:
        self.name = name
        self.class_name = class_name
        self.rank = rank
        self.creator = creator

    def __repr__(self) -> str:
        names = []
        spawner: CreatorInstance | None = self
        while spawner is not None:
            prefix = "" if spawner.class_name is None else f"{spawner.class_name} "
            rank = "" if spawner.class_name is None else str(spawner.rank)
            names.append(f"<{prefix}{spawner.name}{rank}>")
            spawner = spawner.creator
        return ".".join(reversed(names))

    __str__ = __repr__


ROOT_CREATOR = CreatorInstance("root", None, Point(0, Extent([], [])), None)
"""The creator of the actors the controller spawns."""
