"""The launcher's errors: one hierarchy, each also the built-in type Monarch
raises in the same place (``RuntimeError`` for a job that cannot start or be
reached, ``ValueError`` for a bad address or spec), so code written for
Monarch catches them unchanged."""

from __future__ import annotations

__all__ = ["JobError", "LauncherError", "Unsupported", "WorkerAddressError"]


class LauncherError(Exception):
    """Base of every error ``monarch_launcher`` raises on purpose."""


class JobError(LauncherError, RuntimeError):
    """A job could not be created, reached, queried or ended; the message says
    what the scheduler (or the worker processes) reported and what to do."""


class Unsupported(LauncherError, RuntimeError):
    """Something Monarch offers that this implementation does not (listed in
    docs/compatibility.md); the message says what to do instead."""


class WorkerAddressError(LauncherError, ValueError):
    """A worker address that cannot be served or dialed: not
    ``tcp://HOST:PORT`` or ``ipc:///PATH``, a port already taken, or a host
    that is not an address of this machine."""
