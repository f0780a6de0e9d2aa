"""The errors and warnings of ``monarch_rdma``.

Bad arguments raise the built-in types Monarch raises (``ValueError``,
``TypeError``, ``OverflowError``) at the call. A transfer that fails resolves
its future with an :class:`RDMAError` subclass that says what went wrong and
what to do.
"""

from __future__ import annotations

import warnings

__all__ = [
    "RDMABackendUnavailable",
    "RDMABufferDropped",
    "RDMAError",
    "RDMAOwnerGone",
    "RDMAReadTransferWarning",
    "RDMATcpFallbackWarning",
    "RDMATimeoutError",
    "RDMATransferError",
    "RDMAWriteTransferWarning",
]


class RDMAError(Exception):
    """Base class of every error a transfer or a backend raises."""


class RDMATransferError(RDMAError):
    """A transfer failed (the message says which backend and why)."""


class RDMABufferDropped(RDMATransferError):
    """The buffer was released with ``drop()`` (or never existed at its owner)."""


class RDMAOwnerGone(RDMATransferError):
    """The process that owns the buffer's memory has exited or cannot be reached."""


class RDMATimeoutError(RDMATransferError):
    """The transfer did not finish within its ``timeout``.

    Not a subclass of the built-in ``TimeoutError``: ``Future.get(timeout)``
    raises that one when *it* stops waiting, and the two must not be confused."""


class RDMABackendUnavailable(RDMAError, RuntimeError):
    """The requested (or only possible) backend cannot be used here."""


class RDMAReadTransferWarning(Warning):
    """Reserved by Monarch for read transfers (exported, never emitted)."""


class RDMAWriteTransferWarning(Warning):
    """Reserved by Monarch for write transfers (exported, never emitted)."""


class RDMATcpFallbackWarning(Warning):
    """A transfer uses the TCP backend because nothing faster reaches the owner."""


warnings.simplefilter("once", RDMAReadTransferWarning)
warnings.simplefilter("once", RDMAWriteTransferWarning)
warnings.simplefilter("once", RDMATcpFallbackWarning)
