import os
import sys

import pytest

# actors used by the tests live in launcher_actors.py, imported by name (procs
# see this sys.path too, as every proc sees its controller's); a name of its
# own: the whole workspace runs in one session, and monarch-actor has actors.py
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

os.environ.setdefault("MONARCH_PRELOAD", "none")  # the tests do not use torch in procs

from monarch_actor.testing import (  # noqa: E402, F401 (fixtures; after the environment above)
    failures,
    no_leaked_procs,
    no_unexpected_faults,
)


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Run the test in a fresh folder, with a state folder of its own (where
    the job cache for that folder goes)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MONARCH_STATE_DIR", str(tmp_path / "state"))
    return tmp_path
