"""Hooks that sibling packages plug in, so this package never imports them.

``monarch-tensor`` declares Python entry points of group
``monarch.extensions``: ``activate`` (``ProcMesh.activate()``),
``device_mesh`` (a proc mesh's ``DeviceMesh``: ``to_table``,
``rank_tensor``, ``rank_tensors``), ``rref``
(the adverb, at the caller) and ``keep`` (where an rref call's result stays,
at the receiver). Argument transforms (a distributed tensor argument sent as
a reference to each receiver's own shard) are registered by the package when
it is imported instead: a transform has nothing to do before that, and
looking one up would import torch into every process that sends a message.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

__all__ = ["EXTENSION_GROUP", "extension", "transform_arguments", "transformed"]


EXTENSION_GROUP = "monarch.extensions"
"""The group of Python entry points where sibling packages declare their hooks."""

# what each hook is for, and the package that provides it
_PROVIDERS = {
    "activate": ("ProcMesh.activate() (distributed tensors)", "monarch-tensor"),
    "device_mesh": ("a ProcMesh's device mesh (to_table, rank_tensor)", "monarch-tensor"),
    "rref": ("the rref() adverb (distributed tensors)", "monarch-tensor"),
    "keep": ("results of rref() calls (distributed tensors)", "monarch-tensor"),
    "admin": ("the mesh admin server (enable_admin)", "monarch-admin"),
    "dashboard": ("the dashboard (enable_telemetry(include_dashboard=True))", "monarch-admin"),
}

# (mesh, args, kwargs) -> (args, kwargs), applied to every endpoint call's arguments
_transforms: list[Callable[[Any, tuple[Any, ...], dict[str, Any]], Any]] = []


@functools.cache
def _entry_points() -> dict[str, Any]:
    import importlib.metadata  # here: importing it costs every process ~15 ms at start

    return {ep.name: ep for ep in importlib.metadata.entry_points(group=EXTENSION_GROUP)}


def extension(name: str, required: bool = True) -> Callable[..., Any] | None:
    """The hook ``name`` that a sibling package declares as a Python entry point.

    Hooks are entry points of group ``monarch.extensions``, looked up once per process.

    Args:
        name: the hook's name, such as ``"activate"``, ``"rref"`` or ``"keep"``.
        required: whether a missing hook is an error.

    Returns:
        The loaded hook; ``None`` when it is missing and not ``required``.

    Raises:
        RuntimeError: the hook is missing and ``required``; the message names
            the package to install.
    """
    point = _entry_points().get(name)
    if point is not None:
        hook: Callable[..., Any] = point.load()
        return hook
    if not required:
        return None
    what, package = _PROVIDERS.get(name, (f"the {name!r} extension", "the package providing it"))
    raise RuntimeError(
        f"{what} needs the {package} package, which is not installed here: pip install {package}"
    )


def transform_arguments(transform: Callable[[Any, tuple[Any, ...], dict[str, Any]], Any]) -> None:
    """Rewrite the arguments of every endpoint call and every spawn (an actor's
    constructor arguments) made from this process from now on.

    Transforms apply in the order they were registered; registering one twice
    has no effect.

    Args:
        transform: ``transform(actor_mesh, args, kwargs) -> (args, kwargs)``,
            called on the calling thread before the arguments are pickled.
    """
    if transform not in _transforms:
        _transforms.append(transform)


def transformed(
    mesh: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments of a call to ``mesh`` after every registered transform."""
    for transform in _transforms:
        args, kwargs = transform(mesh, args, kwargs)
    return args, kwargs
