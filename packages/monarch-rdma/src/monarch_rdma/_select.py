"""How a backend is chosen for a transfer, from the registry of backends.

The side that starts a transfer (the reader or writer) chooses, per pair of
endpoints, from what the buffer's handle says about its owner:

1. ``MONARCH_RDMA_BACKEND`` / ``configure(backend=...)``, when set, always
   (a clear error if it cannot reach this buffer);
2. otherwise the registered backends in their rank order (``cuda_ipc``,
   ``cma``, ``ibverbs``, ``tcp`` for the built-in ones), skipping those the
   settings turn off: the first that can serve the pair.

A backend that finds out during a transfer that the system refuses it for
this pair (``PairRefused``: the kernel forbids cross-memory attach) has
moved nothing; the transfer goes to the next choice.
"""

from __future__ import annotations

import warnings
from collections.abc import Set

import monarch_rdma._backends as _backends

from ._backend import PairRefused, RdmaBackend, Transfer
from ._config import get_config
from ._errors import RDMABackendUnavailable
from ._handle import Handle
from ._memory import LocalMemory

__all__ = ["choose", "run_transfer"]


def choose(
    handle: Handle, local: LocalMemory, warn: bool = True, refused: Set[str] = frozenset()
) -> RdmaBackend:
    """The backend for a transfer between ``local`` and ``handle``'s region,
    other than those that ``refused`` it already."""
    config = get_config()
    if config.backend != "auto":
        forced = _backends.by_name(config.backend)
        reason = (
            "no such backend is registered"
            if forced is None
            else forced.backend.unsupported(handle, local)
        )
        if forced is None or reason is not None:
            raise RDMABackendUnavailable(
                f"the {config.backend!r} RDMA backend is configured (MONARCH_RDMA_BACKEND or "
                f"configure(backend=...)) but cannot reach buffer {handle.buffer_id}: {reason}. "
                "Use backend='auto' to choose automatically."
            )
        return forced.backend
    reasons = []
    for registration in _backends.in_selection_order():
        if registration.name in refused:
            reasons.append(f"{registration.name}: the system refused it for this pair")
            continue
        reason = registration.disabled(config) or registration.backend.unsupported(handle, local)
        if reason is None:
            notice = registration.selection_warning
            warning = notice(handle) if warn and notice is not None else None
            if warning is not None:
                warnings.warn(warning, stacklevel=4)
            return registration.backend
        reasons.append(f"{registration.name}: {reason}")
    raise RDMABackendUnavailable(
        f"no RDMA backend can reach buffer {handle.buffer_id} (owner pid {handle.owner.pid} on "
        f"{handle.owner.hostname}): " + "; ".join(reasons) + ". To enable the TCP fallback, call "
        "monarch_rdma.configure(allow_tcp_fallback=True) (Monarch: "
        "monarch.configure(rdma_allow_tcp_fallback=True))."
    )


def run_transfer(t: Transfer, backend: RdmaBackend | None = None) -> None:
    """Move the bytes with ``backend`` (chosen when not given), and with the
    next choice if the system refuses that one for this pair."""
    handle = t.handle
    refused: set[str] = set()
    while True:
        backend = backend or choose(handle, t.local, refused=refused)
        try:
            backend.transfer(t)
            return
        except PairRefused as error:
            if get_config().backend == backend.name:
                raise RDMABackendUnavailable(
                    f"the {backend.name!r} backend is configured but the system refuses it for "
                    f"buffer {handle.buffer_id} (owner pid {handle.owner.pid}): {error}"
                ) from error
            refused.add(backend.name)
            backend = None
