"""The table of transport backends.

Each backend module registers its ``Transport`` class with one call to
``register_backend`` when it is imported (the package imports the built-in
ones, except ``nng``: its module is named here with ``defer_backend`` and
imported when that backend is first chosen, since loading pynng costs every
process about 9 ms at start and the actor runtime runs on ``socket``);
selection (``_select``) looks backends up here, by the name that
configuration gives or by an address scheme a backend owns. So a backend is
added without touching the code that chooses one.
"""

from __future__ import annotations

import importlib
import threading

from ._errors import TransportError
from ._interface import Transport

__all__ = ["backend_class", "choosable", "defer_backend", "register_backend", "scheme_owner"]

_lock = threading.Lock()
_classes: dict[str, type[Transport]] = {}
_owners: dict[str, type[Transport]] = {}  # address scheme -> the backend for all of it
_deferred: dict[str, str] = {}  # name -> the module whose import registers it


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
        _deferred.pop(name, None)
        if owns_scheme is not None:
            _owners[owns_scheme] = transport


def defer_backend(name: str, module: str) -> None:
    """Offer a backend as ``name`` before its module is imported: the first
    ``backend_class(name)`` imports ``module``, which must register it.

    Args:
        name: the name the module's backend registers under.
        module: the module's full name.
    """
    with _lock:
        if name not in _classes:
            _deferred[name] = module


def choosable() -> list[str]:
    """The names configuration may choose, sorted."""
    with _lock:
        owners = set(_owners.values())
        named = {name for name, cls in _classes.items() if cls not in owners}
        return sorted(named | _deferred.keys())


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
        module = _deferred.get(name)
    if module is not None:
        importlib.import_module(module)  # registers it
    with _lock:
        found = _classes.get(name)
    if found is None:
        raise TransportError(f"{module} was imported but registered no backend {name!r}")
    return found


def scheme_owner(scheme: str) -> type[Transport] | None:
    """The backend that handles every address of ``scheme``, if one does."""
    with _lock:
        return _owners.get(scheme)
