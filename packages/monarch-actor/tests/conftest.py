import os
import sys

import pytest

# the tests import shared actor classes from actors.py by module name (procs see this
# sys.path too, as every proc sees its controller's)
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

os.environ.setdefault("MONARCH_PRELOAD", "none")  # the tests do not use torch in procs


@pytest.fixture(scope="session")
def procs():
    from monarch_actor import this_host

    mesh = this_host().spawn_procs(per_host={"gpus": 4})
    yield mesh
    mesh.stop().get(timeout=30)


@pytest.fixture(scope="module")
def server():
    """The job's debug server, on a port the system picks: its port."""
    from monarch_actor import debug_controller

    os.environ["MONARCH_DEBUG_SERVER_PORT"] = "0"
    host, port = debug_controller().server_address.call_one().get(timeout=60)
    assert host == "localhost"
    return port


@pytest.fixture(autouse=True)
def no_unexpected_faults():
    """A failure nobody handled fails the test that caused it, with its report,
    instead of interrupting the whole run (the default hook's SIGINT is tested
    in a subprocess)."""
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
def failures():
    """The failures that reach the controller's hook during the test (none is
    an error here: the test looks at them)."""
    import monarch_actor

    seen = []
    before = monarch_actor.unhandled_fault_hook
    monarch_actor.unhandled_fault_hook = seen.append
    yield seen
    monarch_actor.unhandled_fault_hook = before
