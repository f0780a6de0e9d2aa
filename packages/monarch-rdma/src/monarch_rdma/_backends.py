"""The registry of backends: the one place the rest of the package learns
which backends exist.

A backend module ends with one call, :func:`register`, naming its transfer
side, the operations it adds to the owner's server, what it advertises in
an owner's :class:`~monarch_rdma._handle.OwnerInfo`, where it stands in
automatic selection, and which settings turn it off. The package's
``__init__`` imports the built-in backend modules; buffers, selection,
configuration and the server consult only this registry.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ._backend import OwnerOp, RdmaBackend
from ._wire import Op

if TYPE_CHECKING:
    from ._handle import Handle
    from ._regions import Region

__all__ = [
    "Registration",
    "advertised",
    "by_name",
    "in_selection_order",
    "names",
    "owner_op",
    "register",
    "unregister",
]

_CORE_OPS = frozenset(v for k, v in vars(Op).items() if not k.startswith("_"))


class Switches(Protocol):
    """The settings that can keep a backend out of automatic selection, as a
    backend's ``disabled`` check reads them (``RdmaConfig`` has them: the
    registry sits below the settings, so it names only this shape)."""

    @property
    def disable_cma(self) -> bool: ...

    @property
    def disable_ibverbs(self) -> bool: ...

    @property
    def allow_tcp_fallback(self) -> bool: ...


def _never_disabled(config: Switches) -> str | None:
    return None


@dataclass(frozen=True)
class Registration:
    """Everything the package needs to know about one backend."""

    backend: RdmaBackend
    rank: int
    """Position in automatic selection: the lowest rank that can serve a pair wins."""
    owner_ops: Mapping[int, OwnerOp] = field(default_factory=dict)
    """Operations this backend adds to every owner's data-plane server, by code."""
    on_register: Callable[[Region], None] | None = None
    """Called in the owner for each new registration, before its handle is
    given out: to prepare the memory for this backend's readers."""
    advertise: Callable[[], Mapping[str, Any]] | None = None
    """Called once in an owner, at its first registration: what its
    ``OwnerInfo.features`` carry for this backend's readers."""
    disabled: Callable[[Switches], str | None] = _never_disabled
    """Why the settings keep this backend out of automatic selection (None: they do not)."""
    selection_warning: Callable[[Handle], Warning | None] | None = None
    """A warning to emit when automatic selection picks this backend for a handle."""
    copies_in_caller: bool = False
    """Its transfers are memory copies that never wait on anything but the
    memory: a single one runs in the calling thread (helped by workers)
    instead of being handed to one, since a hand-off costs more than it
    saves. In a thread that runs an event loop, only small ones do (see
    ``_buffer``)."""
    in_pieces: bool = True
    """A large transfer shows a progress line and moves in pieces to advance
    it. False for a backend that copies at device speed (a GiB in under a
    millisecond): the line would have nothing to show, and each piece would
    cost a round trip to the owner."""

    @property
    def name(self) -> str:
        return self.backend.name


_lock = threading.Lock()
_registered: dict[str, Registration] = {}
_ops: dict[int, OwnerOp] = {}
_ordered: tuple[Registration, ...] = ()  # asked for on every transfer: kept sorted


def _reorder() -> None:
    global _ordered
    _ordered = tuple(sorted(_registered.values(), key=lambda r: (r.rank, r.name)))


def register(registration: Registration) -> Registration:
    """Make a backend known; its name and operation codes must be new."""
    name = registration.name
    with _lock:
        if name in _registered or name == "auto":
            raise ValueError(f"an RDMA backend named {name!r} is already registered")
        for code in registration.owner_ops:
            if code in _CORE_OPS or code in _ops:
                raise ValueError(
                    f"RDMA backend {name!r} uses data-plane operation code {code}, "
                    "which is taken; pick an unused code"
                )
        _registered[name] = registration
        _ops.update(registration.owner_ops)
        _reorder()
    return registration


def unregister(name: str) -> None:
    """Forget a backend (tests; a backend that can no longer be used)."""
    with _lock:
        registration = _registered.pop(name, None)
        if registration is not None:
            for code in registration.owner_ops:
                _ops.pop(code, None)
            _reorder()


def names() -> tuple[str, ...]:
    """The registered backends' names, in selection order."""
    return tuple(r.name for r in in_selection_order())


def by_name(name: str) -> Registration | None:
    return _registered.get(name)


def in_selection_order() -> tuple[Registration, ...]:
    """The registered backends, lowest rank first."""
    return _ordered


def owner_op(code: int) -> OwnerOp | None:
    """The backend operation with this code, for the owner's server."""
    return _ops.get(code)


def advertised() -> tuple[tuple[str, Any], ...]:
    """What every backend advertises about this process as an owner."""
    features: dict[str, Any] = {}
    for registration in in_selection_order():
        if registration.advertise is not None:
            features.update(registration.advertise())
    return tuple(sorted(features.items()))
