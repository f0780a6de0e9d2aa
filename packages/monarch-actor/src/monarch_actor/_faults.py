"""Failures nobody awaited: ``MeshFailure`` records and the controller's
``unhandled_fault_hook``. The default fails fast, as Monarch does: the report
goes to stderr and the script is interrupted."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from typing import Any

__all__ = ["MeshFailure", "report_fault", "unhandled_fault_hook"]

log = logging.getLogger("monarch.actor.faults")


class MeshFailure:
    """What failed, where, and why."""

    def __init__(self, mesh_name: str, crashed_ranks: list[int], actor: str, reason: str) -> None:
        self.mesh_name = mesh_name
        self.crashed_ranks = crashed_ranks
        self.actor = actor
        self.reason = reason

    @property
    def mesh(self) -> tuple[()]:
        return ()

    def report(self) -> str:
        return f"The actor {self.actor} and all its descendants have failed:\n  {self.reason}"

    def __str__(self) -> str:
        return (
            f"MeshFailure(mesh_name={self.mesh_name}, crashed_ranks={self.crashed_ranks}, "
            f"event=Supervision event: actor {self.actor} failed:\n  {self.reason})"
        )

    __repr__ = __str__


def unhandled_fault_hook(failure: MeshFailure) -> None:
    """Called on the controller for a failure no one handled. The default
    prints the report and interrupts the main thread (exit code 130 if
    uncaught); replace ``monarch.actor.unhandled_fault_hook`` to change that."""
    sys.stderr.write(f"Unhandled monarch error on the root actor: {failure.report()}\n")
    sys.stderr.flush()
    # a real SIGINT aimed at the main thread: it interrupts a sleep or a blocking wait too
    signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)


def report_fault(fault: dict[str, Any]) -> None:
    """Hand one failure report to the hook (looked up at call time, so an
    override through ``monarch.actor`` or ``monarch_actor`` takes effect)."""
    failure = MeshFailure(fault["mesh_name"], [fault["rank"]], fault["actor"], fault["reason"])
    hook = unhandled_fault_hook
    for name in ("monarch.actor", "monarch_actor"):
        module = sys.modules.get(name)
        candidate = getattr(module, "unhandled_fault_hook", None) if module else None
        if candidate is not None and candidate is not unhandled_fault_hook:
            hook = candidate
            break
    try:
        hook(failure)
    except Exception:
        log.exception("unhandled_fault_hook raised while handling %s", failure)
