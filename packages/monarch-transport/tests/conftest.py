import os

from hypothesis import HealthCheck, settings

# `dev` keeps the edit-test loop quick; `ci` (chosen when CI is set) digs deeper.
settings.register_profile("dev", max_examples=40, deadline=None)
settings.register_profile(
    "ci", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


import itertools  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from monarch_transport import Address  # noqa: E402
from monarch_transport._inproc import InprocTransport  # noqa: E402
from monarch_transport._nng import NngTransport  # noqa: E402
from monarch_transport._socket import SocketTransport  # noqa: E402

_counter = itertools.count()
_tmp = Path(tempfile.mkdtemp(prefix="monarch-transport-tests-"))

BACKENDS = {
    "nng-ipc": (NngTransport, "ipc"),
    "nng-tcp4": (NngTransport, "tcp4"),
    "nng-tcp6": (NngTransport, "tcp6"),
    "socket-ipc": (SocketTransport, "ipc"),
    "socket-tcp4": (SocketTransport, "tcp4"),
    "socket-tcp6": (SocketTransport, "tcp6"),
    "inproc": (InprocTransport, "inproc"),
}


def fresh_address(family: str) -> Address:
    n = next(_counter)
    return Address.parse(
        {
            "ipc": f"ipc://{_tmp}/t{n}.sock",
            "tcp4": "tcp://127.0.0.1:0",
            "tcp6": "tcp://[::1]:0",
            "inproc": f"inproc://test-{n}",
        }[family]
    )


@pytest.fixture(params=["asyncio", "uvloop"])
def anyio_backend(request):
    """Every async test runs on the standard event loop and on uvloop."""
    if request.param == "uvloop":
        return "asyncio", {"use_uvloop": True}
    return "asyncio"


@pytest.fixture(params=sorted(BACKENDS))
def backend(request):
    """(transport instance, a function making fresh addresses of its family)."""
    cls, family = BACKENDS[request.param]
    return cls(), lambda: fresh_address(family)


@pytest.fixture(params=sorted(name for name in BACKENDS if name != "inproc"))
def wire_backend(request):
    """Like ``backend``, for the backends that cross a process boundary."""
    cls, family = BACKENDS[request.param]
    return cls(), lambda: fresh_address(family)
