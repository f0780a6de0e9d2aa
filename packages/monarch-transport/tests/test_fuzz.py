"""Garbage, truncated, oversized and forged input at a live listener: the
listener closes the offender, keeps serving everyone else, and never hands
an unauthenticated byte to the application (so no forged pickle ever runs)."""

from __future__ import annotations

import asyncio
import os
import pickle
import random
import socket
import struct

import pynng
import pytest

from monarch_transport import Received, Settings
from monarch_transport._wire import Kind, join

pytestmark = pytest.mark.anyio
SECRET = b"f" * 32


class Booby:
    """Unpickling this creates a marker file: proof that a pickle ran."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def attacks(marker: str, rng: random.Random) -> list[bytes]:
    forged = pickle.dumps(Booby(marker), protocol=5)
    head = struct.pack("<BI", Kind.DATA, 2)
    cases = [
        join(Kind.DATA, [b"\x01\x80", forged], 1 << 20),  # data without a handshake
        join(Kind.HELLO, [b"short"], 1 << 20),  # a HELLO too short to hold a nonce
        join(Kind.PROOF, [b"p" * 32], 1 << 20),  # a proof before any challenge
        join(Kind.HELLO, [b"n" * 16 + b"\xff\xfe"], 1 << 20),  # a name that is not UTF-8
        forged,  # a bare pickle
        head,  # a head with no frame table
        head + struct.pack("<QQ", 1 << 62, 1 << 62),  # frame lengths far past any limit
        struct.pack("<BI", Kind.DATA, 1 << 30),  # a billion frames announced
        struct.pack("<BI", 99, 1) + struct.pack("<Q", 3) + b"abc",  # an unknown kind
        b"",
    ]
    cases += [rng.randbytes(rng.randrange(1, 4096)) for _ in range(25)]
    return cases


async def drain_until(inbox, predicate, timeout=10.0):
    """Events until one satisfies ``predicate``; all of them, in order."""
    seen = []
    while True:
        event = await asyncio.wait_for(inbox.receive(), timeout)
        seen.append(event)
        if predicate(event):
            return seen


async def check_survival(transport, inbox, good, marker):
    await good.send([b"still here"])
    seen = await drain_until(inbox, lambda e: isinstance(e, Received))
    assert [e.peer.name for e in seen] == ["good"], "only the authenticated peer was ever seen"
    assert bytes(seen[-1].frames[0]) == b"still here"
    assert not os.path.exists(marker), "a forged pickle was unpickled"
    # and new honest peers are still welcome
    other = await transport.connect(inbox.address, Settings(secret=SECRET, name="late"))
    await other.send([b"hi"])
    event = await asyncio.wait_for(inbox.receive(), 10)
    assert (event.peer.name, bytes(event.frames[0])) == ("late", b"hi")
    await other.aclose()


async def test_fuzz_nng_listener(tmp_path):
    from monarch_transport import Address
    from monarch_transport._nng import NngTransport

    transport = NngTransport()
    marker = str(tmp_path / "pwned")
    rng = random.Random(1234)
    for url in (f"ipc://{tmp_path}/fuzz.sock", "tcp://127.0.0.1:0"):
        inbox = await transport.listen(
            Address.parse(url), Settings(secret=SECRET, max_message_size=1 << 20)
        )
        good = await transport.connect(inbox.address, Settings(secret=SECRET, name="good"))
        for data in attacks(marker, rng):
            raw = pynng.Pair1(recv_timeout=200, send_timeout=1000)
            # off the loop: the listener accepts TCP on it, so a blocking dial
            # here would wait on itself
            await asyncio.to_thread(raw.dial, str(inbox.address), block=True)
            try:
                raw.send(data)
                with pytest.raises((pynng.Timeout, pynng.Closed)):
                    while True:  # whatever it answers, it never accepts data from us
                        kind = raw.recv()[0]
                        assert kind in (Kind.CHALLENGE, Kind.DENIED)
            finally:
                raw.close()
        if inbox.address.scheme == "tcp":  # bytes that do not even speak nng's protocol
            for data in attacks(marker, rng)[:10]:
                with socket.create_connection(("127.0.0.1", inbox.address.port)) as s:
                    s.sendall(data)
        await check_survival(transport, inbox, good, marker)
        assert not inbox._closed
        await good.aclose()
        await inbox.aclose()


async def test_fuzz_socket_listener(tmp_path):
    from monarch_transport import Address
    from monarch_transport._socket import SocketTransport

    transport = SocketTransport()
    marker = str(tmp_path / "pwned")
    rng = random.Random(4321)
    for url in (f"ipc://{tmp_path}/fuzz.sock", "tcp://127.0.0.1:0"):
        inbox = await transport.listen(
            Address.parse(url),
            Settings(secret=SECRET, max_message_size=1 << 20, handshake_timeout=1),
        )
        good = await transport.connect(inbox.address, Settings(secret=SECRET, name="good"))
        loop = asyncio.get_running_loop()
        for data in attacks(marker, rng):
            if inbox.address.scheme == "ipc":
                raw = socket.socket(socket.AF_UNIX)
                raw.connect(inbox.address.path)
            else:
                raw = socket.create_connection(("127.0.0.1", inbox.address.port))
            raw.setblocking(False)
            try:
                await loop.sock_sendall(raw, data)
                # truncated input waits out the handshake deadline; the rest is refused at once
                reply = b"x"
                while reply:
                    reply = await asyncio.wait_for(loop.sock_recv(raw, 1 << 16), 5)
                    assert not reply or reply[0] in (Kind.CHALLENGE, Kind.DENIED)
            except ConnectionError:
                pass
            finally:
                raw.close()
        await check_survival(transport, inbox, good, marker)
        assert inbox._server is not None and inbox._server.is_serving()
        await good.aclose()
        await inbox.aclose()
