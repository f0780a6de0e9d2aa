"""The errors of distributed tensors."""

from __future__ import annotations

__all__ = ["RemoteTensorError"]


class RemoteTensorError(RuntimeError):
    """An operation on a distributed tensor failed on a process of its mesh
    (raised when a result that depends on it is fetched); the message names
    the operation, the line of the script that issued it, the process, and
    the remote traceback. The mesh keeps working for other tensors."""
