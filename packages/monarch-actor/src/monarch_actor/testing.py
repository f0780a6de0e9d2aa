"""What the workspace's test suites share: waiting on a condition, the fault
fixtures, and whether processes are gone.

A suite takes the fixtures by importing them into its ``conftest.py``
(``no_unexpected_faults`` is autouse: every test of that folder gets it);
tests import ``wait_for`` and ``alive``. It needs pytest, which the
packages' ``test`` extras bring.

Examples:
    >>> from monarch_actor.testing import wait_for
    >>> wait_for(lambda: True)
    True
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

import pytest

import monarch_actor

from ._core.private import alive

if TYPE_CHECKING:
    from monarch_actor import MeshFailure

__all__ = ["Failures", "alive", "failures", "gone", "no_unexpected_faults", "wait_for"]

POLL = 0.02  # seconds between two looks at a condition


def wait_for(condition: Callable[[], object], timeout: float = 10.0) -> bool:
    """Wait until ``condition()`` is true, looking every few milliseconds, for
    at most ``timeout`` seconds: for a test that waits on a state nothing
    signals (a file's contents, a process gone). Where an event exists, wait
    on it instead.

    Args:
        condition: what to wait for; called until it returns something true.
        timeout: seconds to wait at most.

    Returns:
        Whether the condition came true (it is looked at once more at the deadline).
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(POLL)  # the poll's pace; the condition is what is waited on
    return bool(condition())


def gone(pids: Iterable[int], timeout: float = 15.0) -> list[int]:
    """Wait (at most ``timeout`` seconds) until none of ``pids`` exists.

    Args:
        pids: the process ids.
        timeout: seconds to wait at most.

    Returns:
        The pids still alive then: ``[]`` when all went.
    """
    pids = list(pids)
    wait_for(lambda: not any(alive(p) for p in pids), timeout)
    return [p for p in pids if alive(p)]


class Failures(list["MeshFailure"]):
    """Failures that reached the controller's hook; ``wait`` for the first."""

    def __init__(self) -> None:
        super().__init__()
        self._arrived = threading.Event()

    def append(self, failure: MeshFailure) -> None:
        """Record ``failure`` (the hook calls it).

        Args:
            failure: what reached the hook.
        """
        super().append(failure)
        self._arrived.set()

    def wait(self, timeout: float) -> bool:
        """Wait for the first failure; whether one came within ``timeout`` seconds.

        Args:
            timeout: seconds to wait at most.
        """
        return self._arrived.wait(timeout)


@pytest.fixture(autouse=True)
def no_unexpected_faults() -> Iterator[None]:
    """A failure nobody handled fails the test that caused it, with its
    report, instead of interrupting the whole run (the default hook's
    SIGINT)."""
    seen = Failures()
    default = monarch_actor.unhandled_fault_hook
    monarch_actor.unhandled_fault_hook = seen.append
    try:
        yield
    finally:
        monarch_actor.unhandled_fault_hook = default
    assert not seen, "unhandled failures:\n" + "\n".join(f.report() for f in seen)


@pytest.fixture
def failures() -> Iterator[Failures]:
    """The failures that reach the controller's hook during the test (none is
    an error here: the test expects them and looks at them)."""
    seen = Failures()
    before = monarch_actor.unhandled_fault_hook
    monarch_actor.unhandled_fault_hook = seen.append
    yield seen
    monarch_actor.unhandled_fault_hook = before
