"""TLS on top of the handshake: the listener must present a certificate the
connecting side trusts, and a TLS address without certificates is a clear error."""

import pytest

from monarch_transport import Address, ConnectError, Settings, TlsFiles, TransportError
from monarch_transport._nng import NngTransport
from monarch_transport._socket import SocketTransport

pytestmark = pytest.mark.anyio


@pytest.fixture(params=[NngTransport, SocketTransport], ids=["nng", "socket"])
def transport(request):
    return request.param()


def env_files() -> TlsFiles:
    files = TlsFiles.from_env()
    assert files is not None  # conftest made them
    return files


async def test_an_untrusted_listener_is_refused(transport, tmp_path, tls_files_maker):
    good = env_files()
    inbox = await transport.listen(
        Address.parse("tls+tcp://127.0.0.1:0"), Settings(secret=b"t" * 32)
    )
    stranger = tls_files_maker(tmp_path)  # a CA that did not sign the listener's certificate
    with pytest.raises((ConnectError, TransportError)):
        settings = Settings(secret=b"t" * 32, tls=stranger, handshake_timeout=3)
        await transport.connect(inbox.address, settings)
    ok = await transport.connect(inbox.address, Settings(secret=b"t" * 32, tls=good))
    await ok.send([b"trusted"])
    assert bytes((await inbox.receive()).frames[0]) == b"trusted"
    await ok.aclose()
    await inbox.aclose()


async def test_tls_address_without_certificates(transport):
    with pytest.raises(TransportError, match="no certificates are configured"):
        await transport.listen(
            Address.parse("tls+tcp://127.0.0.1:0"), Settings(secret=b"t" * 32, tls=None)
        )


def test_partial_environment_is_an_error(monkeypatch):
    monkeypatch.delenv("HYPERACTOR_TLS_KEY")
    with pytest.raises(TransportError, match="missing HYPERACTOR_TLS_KEY"):
        TlsFiles.from_env()


async def test_a_client_without_a_trusted_certificate_is_refused(
    transport, tmp_path, tls_files_maker
):
    """Mutual TLS: trusting the listener is not enough; the connecting side
    must present a certificate the listener's CA signed."""
    good = env_files()
    inbox = await transport.listen(
        Address.parse("tls+tcp://127.0.0.1:0"), Settings(secret=b"t" * 32)
    )
    stranger = tls_files_maker(tmp_path)
    impostor = TlsFiles(good.ca, stranger.cert, stranger.key)
    with pytest.raises((ConnectError, TransportError)):
        settings = Settings(secret=b"t" * 32, tls=impostor, handshake_timeout=3)
        sender = await transport.connect(inbox.address, settings)
        await sender.send([b"let me in"])
        event = await inbox.receive()
        raise AssertionError(f"an impostor got through: {event}")
    await inbox.aclose()
