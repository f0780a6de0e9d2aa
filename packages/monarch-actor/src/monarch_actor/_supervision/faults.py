"""Failures that reach the controller's root unhandled: ``unhandled_fault_hook``
and what happens when it does not handle them. As in Monarch, the default
hook exits; the runtime turns that into a report on stderr and a
``KeyboardInterrupt`` in the script's main thread (exit status 130 if
uncaught; status 1 where SIGINT is ignored), so nothing fails silently and
nothing hangs."""

from __future__ import annotations

import datetime
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable

from monarch_supervision import MeshFailure, run_fault_hook

__all__ = ["MeshFailure", "before_fail_fast_exit", "report_to_root", "unhandled_fault_hook"]

log = logging.getLogger("monarch.actor.faults")


def unhandled_fault_hook(failure: MeshFailure) -> None:
    """Called on the controller for every failure no actor handled.

    Replace ``monarch.actor.unhandled_fault_hook`` (or
    ``monarch_actor.unhandled_fault_hook``) to decide yourself: returning means
    handled, raising (as this default does, with ``SystemExit``) means the
    script ends: the failure is reported on stderr and the main thread gets a
    ``KeyboardInterrupt``.

    Args:
        failure: what failed, and why.
    """
    sys.exit(1)


def current_hook() -> object:
    """The hook as the user last set it, through ``monarch.actor`` or ``monarch_actor``."""
    for name in ("monarch.actor", "monarch_actor"):
        module = sys.modules.get(name)
        candidate = getattr(module, "unhandled_fault_hook", None) if module else None
        if candidate is not None and candidate is not unhandled_fault_hook:
            return candidate
    return unhandled_fault_hook


def report_to_root(failure: MeshFailure) -> None:
    """Give ``failure`` to the hook; if the hook does not handle it, report it
    and interrupt the main thread."""
    hook = current_hook()
    if run_fault_hook(hook, failure):  # type: ignore[arg-type]
        return
    when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    sys.stderr.write(
        f"Unhandled monarch error on the root actor, hostname={socket.gethostname()}, "
        f"PID={os.getpid()} at time {when}:\n{failure.report()}\n"
    )
    if callable(signal.getsignal(signal.SIGINT)):
        sys.stderr.flush()
        # a real SIGINT aimed at the main thread: it interrupts a sleep or a blocking wait too
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
        return
    # SIGINT is ignored here (a background job of a shell, say): end the script anyway
    sys.stderr.write("SIGINT is ignored by this process, so it cannot be interrupted: exiting\n")
    sys.stderr.flush()
    threading.Thread(target=_exit_now, name="monarch-fail-fast", daemon=True).start()


_cleanups: list[Callable[[], None]] = []


def before_fail_fast_exit(cleanup: Callable[[], None]) -> None:
    """Run ``cleanup`` (stopping the procs this script started) before a
    fail-fast exit that cannot go through the interpreter's normal exit."""
    _cleanups.append(cleanup)


def _exit_now() -> None:
    try:
        for cleanup in _cleanups:
            cleanup()
    finally:
        os._exit(1)
