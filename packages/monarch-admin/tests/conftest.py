import os

import pytest

os.environ.setdefault("MONARCH_PRELOAD", "none")  # the tests do not use torch in procs

from monarch_actor.testing import no_leaked_procs  # noqa: F401 (an autouse fixture; after the environment above)


@pytest.fixture
def failures(monkeypatch):
    """Failures that reach the root are collected here instead of ending the test run."""
    import monarch_actor

    seen = []
    monkeypatch.setattr(monarch_actor, "unhandled_fault_hook", seen.append)
    return seen
