import os
import sys
import threading

import pytest

# actors used by the tests live in launcher_actors.py, imported by name (procs
# see this sys.path too, as every proc sees its controller's); a name of its
# own: the whole workspace runs in one session, and monarch-actor has actors.py
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

os.environ.setdefault("MONARCH_PRELOAD", "none")  # the tests do not use torch in procs


@pytest.fixture(autouse=True)
def no_unexpected_faults():
    """A failure nobody handled fails the test that caused it, with its
    report, instead of ending the whole run."""
    import monarch_actor

    faults = []
    default = monarch_actor.unhandled_fault_hook
    monarch_actor.unhandled_fault_hook = faults.append
    try:
        yield
    finally:
        monarch_actor.unhandled_fault_hook = default
    assert not faults, "unhandled failures:\n" + "\n".join(f.report() for f in faults)


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Run the test in a fresh folder, with a state folder of its own (where
    the job cache for that folder goes)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MONARCH_STATE_DIR", str(tmp_path / "state"))
    return tmp_path


class Failures(list):
    """Failures that reached the controller's hook; ``wait`` for the first."""

    def __init__(self):
        super().__init__()
        self._arrived = threading.Event()

    def append(self, failure):
        super().append(failure)
        self._arrived.set()

    def wait(self, timeout):
        return self._arrived.wait(timeout)


@pytest.fixture
def failures():
    """The failures that reach the controller's hook during the test (the
    test expects them and looks at them)."""
    import monarch_actor

    seen = Failures()
    before = monarch_actor.unhandled_fault_hook
    monarch_actor.unhandled_fault_hook = seen.append
    yield seen
    monarch_actor.unhandled_fault_hook = before
