import os
import sys

import pytest

# the tests import shared actor classes from actors.py by module name (procs see this
# sys.path too, as every proc sees its controller's)
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

os.environ.setdefault("MONARCH_PRELOAD", "none")  # the tests do not use torch in procs

from monarch_actor.testing import (  # noqa: E402, F401 (fixtures; after the environment above)
    failures,
    no_leaked_procs,
    no_unexpected_faults,
)


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


@pytest.fixture
def bare_runtime():
    """A ``Runtime`` on a loop of its own that nothing runs and that listens
    nowhere: for a test of what it does with its connections and messages."""
    import asyncio
    from types import SimpleNamespace

    from monarch_actor._core.router import Runtime

    loop = asyncio.new_event_loop()
    listener = SimpleNamespace(address="ipc:///nowhere", aclose=lambda: asyncio.sleep(0))
    yield Runtime(loop, listener, "controller")  # type: ignore[arg-type]
    loop.close()
