import os
import sys

import pytest

# the procs import the test's actor classes by module name, as a user's procs would
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")]))

os.environ.setdefault("MONARCH_PRELOAD", "")  # the tests do not use torch in procs


@pytest.fixture(scope="session")
def procs():
    from monarch_actor import this_host

    mesh = this_host().spawn_procs(per_host={"gpus": 4})
    yield mesh
    mesh.stop().get(timeout=30)
