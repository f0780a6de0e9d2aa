"""The table of transport backends.

Each backend module registers its ``Transport`` class with one call to
``register_backend`` when it is imported (the package imports the built-in
ones); selection (``_select``) looks backends up here, by the name that
configuration gives or by an address scheme a backend owns. So a backend is
added without touching the code that chooses one.
"""

from __future__ import annotations

import threading

from ._errors import TransportError
from ._interface import Transport

__all__ = ["backend_class", "choosable", "register_backend", "scheme_owner"]

_lock = threading.Lock()
_classes: dict[str, type[Transport]] = {}
_owners: dict[str, type[Transport]] = {}  # address scheme -> the backend for all of it


def register_backend(transport: type[Transport], *, owns_scheme: str | None = None) -> None:
    """Make ``transport`` available under its ``name``.

    Without ``owns_scheme`` it is a backend that configuration may choose
    (``$MONARCH_TRANSPORT``, ``enable_transport``). With it (``"inproc"``),
    it handles every address of that scheme whatever is configured, and is
    not itself a choice. A second class under a taken name is an error:
    two packages would otherwise silently fight over the name.

    Args:
        transport: the ``Transport`` subclass; its ``name`` attribute is the name.
        owns_scheme: an address scheme the backend handles whatever is configured;
            ``None`` for a backend that configuration chooses.

    Raises:
        TransportError: another class is registered under the same name.
    """
    name = transport.name
    with _lock:
        taken = _classes.get(name)
        if taken is not None and taken is not transport:
            raise TransportError(
                f"transport backend {name!r} is registered already, by "
                f"{taken.__module__}.{taken.__qualname__}"
            )
        _classes[name] = transport
        if owns_scheme is not None:
            _owners[owns_scheme] = transport


def choosable() -> list[str]:
    """The names configuration may choose, sorted."""
    with _lock:
        owners = set(_owners.values())
        return sorted(name for name, cls in _classes.items() if cls not in owners)


def backend_class(name: str, *, named_by: str = "") -> type[Transport]:
    """The backend class registered as ``name``, one configuration may choose.

    Args:
        name: the backend's name (``"nng"``, ``"socket"``).
        named_by: where the name came from, put before it in the error (for
            example ``"MONARCH_TRANSPORT="``).

    Raises:
        TransportError: no backend configuration may choose has that name; the
            error lists every name that would do.
    """
    names = choosable()
    if name not in names:
        raise TransportError(f"{named_by}{name!r} is not a transport; use one of {names}")
    with _lock:
        return _classes[name]


def scheme_owner(scheme: str) -> type[Transport] | None:
    """The backend that handles every address of ``scheme``, if one does."""
    with _lock:
        return _owners.get(scheme)
