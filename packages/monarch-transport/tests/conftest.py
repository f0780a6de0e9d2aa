import os

from hypothesis import HealthCheck, settings

# `dev` keeps the edit-test loop quick; `ci` (chosen when CI is set) digs deeper.
settings.register_profile("dev", max_examples=40, deadline=None)
settings.register_profile(
    "ci", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


import atexit  # noqa: E402
import itertools  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from monarch_transport import Address, TlsFiles  # noqa: E402
from monarch_transport._inproc import InprocTransport  # noqa: E402
from monarch_transport._nng import NngTransport  # noqa: E402
from monarch_transport._socket import SocketTransport  # noqa: E402

_counter = itertools.count()
_tmp = Path(tempfile.mkdtemp(prefix="monarch-transport-tests-"))
atexit.register(shutil.rmtree, _tmp, True)


def make_tls_files(folder: Path) -> TlsFiles:
    """A self-signed certificate for 127.0.0.1 (its own CA) in ``folder``."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "monarch-test")])
    now = datetime.datetime.now(datetime.UTC)
    san = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(san), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return TlsFiles(str(folder / "cert.pem"), str(folder / "cert.pem"), str(folder / "key.pem"))


# every Settings() in the tests picks these up, the way Monarch's variables are read
_files = make_tls_files(_tmp)
os.environ.update(
    HYPERACTOR_TLS_CA=_files.ca, HYPERACTOR_TLS_CERT=_files.cert, HYPERACTOR_TLS_KEY=_files.key
)


@pytest.fixture
def tls_files_maker():
    return make_tls_files


BACKENDS = {
    "nng-tls": (NngTransport, "tls"),
    "socket-tls": (SocketTransport, "tls"),
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
            "tls": "tls+tcp://127.0.0.1:0",
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
