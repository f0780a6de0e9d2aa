import dataclasses
import os
import sys

import pytest

# the procs import the actor classes by module name, as a user's procs would
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")]))
os.environ.setdefault("MONARCH_PRELOAD", "none")

from monarch_actor.testing import (  # noqa: E402, F401 (autouse fixtures; after the environment above)
    no_leaked_procs,
    no_unexpected_faults,
)


@pytest.fixture(scope="session")
def procs():
    from monarch_actor import this_host

    mesh = this_host().spawn_procs(per_host={"gpus": 1})
    yield mesh
    mesh.stop().get(timeout=30)


@pytest.fixture(scope="session")
def owner(procs):
    from rdma_actors import Owner

    return procs.spawn("owner", Owner)


@pytest.fixture(autouse=True)
def _configuration_restored():
    """Each test starts from the configuration the session started with."""
    import monarch_config

    with monarch_config.configured():
        yield


@pytest.fixture
def backend(request):
    """Force a backend in this process for one test (``auto`` restores)."""
    import monarch_rdma

    name = getattr(request, "param", "auto")
    old = monarch_rdma.configure(backend=name)
    yield name
    monarch_rdma.configure(**dataclasses.asdict(old))
