"""What an unauthenticated peer can cost a listener: nothing large is read
from it, only so many of it are held at once, and a peer that is provably
wrong is closed on its first wrong bytes, not at the handshake deadline."""

from __future__ import annotations

import asyncio
import struct
import time

import pytest

from monarch_transport import Address, Received, Settings
from monarch_transport._nng import NngListener, NngTransport
from monarch_transport._socket import SocketTransport
from monarch_transport._wire import Kind
from monarch_transport.testing import until

pytestmark = pytest.mark.anyio
SECRET = b"u" * 32
NNG_GREETING = b"\x00SP\x00\x00\x11\x00\x00"  # nng's SP header for a PAIR1 peer
TRANSPORTS = pytest.mark.parametrize(
    "transport_cls", [SocketTransport, NngTransport], ids=["socket", "nng"]
)


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    """Whether the far side closed the connection within ``seconds``."""
    try:
        while await asyncio.wait_for(reader.read(1 << 16), seconds):
            pass
    except TimeoutError:
        return False
    except ConnectionError:
        pass
    return True


def authenticating(inbox) -> int:
    """How many connections ``inbox`` counts against ``max_unauthenticated``."""
    if isinstance(inbox, NngListener):
        gate = inbox._gate
        return inbox._authenticating() + (gate.greeting if gate is not None else 0)
    return inbox._unauthenticated


async def raw(address: Address, greeting: bytes = b""):
    reader, writer = await asyncio.open_connection(address.host, address.port)
    if greeting:
        writer.write(greeting)
    return reader, writer


@TRANSPORTS
async def test_huge_announcements_are_refused_before_anything_is_allocated(transport_cls):
    """A listener reads at most a handshake's worth (socket) or one piece
    (nng: a larger message crosses in pieces, which only an authenticated
    peer may send) from a stranger: announcing a 3 GiB message closes the
    connection at once, and the listener's memory does not move."""
    nng = transport_cls is NngTransport
    settings = Settings(secret=SECRET)
    address = Address.parse("tcp://127.0.0.1:0")
    async with await transport_cls().listen(address, settings) as inbox:
        before = _rss()
        conns = [await raw(inbox.address, NNG_GREETING if nng else b"") for _ in range(8)]
        for _, writer in conns:
            if nng:  # nng's own length prefix, then the start of a PAIR1 message
                writer.write(struct.pack(">Q", 3 << 30) + b"\x00\x00\x00\x01" + b"x" * 4096)
            else:
                writer.write(struct.pack("<BIQ", Kind.HELLO, 1, 3 << 30) + b"x" * 4096)
        for reader, writer in conns:
            assert await closed_within(reader, 1.0)
            writer.close()
        assert _rss() - before < 64 << 20


@TRANSPORTS
async def test_unauthenticated_connections_are_capped(transport_cls):
    """Beyond ``max_unauthenticated`` strangers a new one is closed at once;
    once they are gone an honest peer is welcome again."""
    nng = transport_cls is NngTransport
    transport = transport_cls()
    settings = Settings(secret=SECRET, max_unauthenticated=4)
    greeting = NNG_GREETING if nng else b""
    async with await transport.listen(Address.parse("tcp://127.0.0.1:0"), settings) as inbox:
        held = [await raw(inbox.address, greeting) for _ in range(4)]
        assert await until(lambda: authenticating(inbox) == 4)  # the listener saw them all
        for reader, _ in held:
            assert not await closed_within(reader, 0.05)
        extra_reader, extra_writer = await raw(inbox.address, greeting)
        assert await closed_within(extra_reader, 1.0)
        extra_writer.close()
        for _, writer in held:
            writer.close()
        # their departures free their places (nng reports them after a grace period)
        assert await until(lambda: authenticating(inbox) == 0)
        out = await transport.connect(inbox.address, Settings(secret=SECRET, name="honest"))
        await out.send([b"hello"])
        event = await asyncio.wait_for(inbox.receive(), 10)
        assert isinstance(event, Received) and event.peer.name == "honest"
        await out.aclose()


@TRANSPORTS
async def test_a_greeting_cut_short_counts_and_gets_the_deadline(transport_cls):
    """A stranger that sends part of its first message (on nng, part of nng's
    own 8-byte greeting, which nng alone would wait 10 s for, uncounted)
    counts against ``max_unauthenticated`` from the moment it connects, and
    is closed at the handshake deadline."""
    nng = transport_cls is NngTransport
    settings = Settings(secret=SECRET, max_unauthenticated=4, handshake_timeout=1.0)
    short = NNG_GREETING[:3] if nng else struct.pack("<B", Kind.HELLO)
    address = Address.parse("tcp://127.0.0.1:0")
    async with await transport_cls().listen(address, settings) as inbox:
        started = time.monotonic()
        held = [await raw(inbox.address, short) for _ in range(4)]
        extra_reader, extra_writer = await raw(inbox.address, short)
        assert await closed_within(extra_reader, 0.5)  # the fifth: at once
        extra_writer.close()
        for reader, writer in held:
            assert await closed_within(reader, 3.0)  # the deadline, not nng's 10 s
            writer.close()
        assert time.monotonic() - started < 4


@TRANSPORTS
async def test_garbage_closes_at_once(transport_cls):
    """200 connections sending bytes that cannot be a handshake (a wrong
    kind, an impossible frame count, an impossible length, noise) are all
    closed in a few seconds in total, far inside the 5 s handshake deadline
    each would otherwise get."""
    nng = transport_cls is NngTransport
    transport = transport_cls()
    settings = Settings(secret=SECRET)
    garbage = [
        b"GET / HTTP/1.1\r\n\r\n",
        struct.pack("<BI", Kind.DATA, 1),  # data before any handshake
        struct.pack("<BI", Kind.HELLO, 70000),  # more frames than a handshake has
        struct.pack("<BIQ", Kind.HELLO, 1, 1 << 40),  # an impossible length
        b"\x00\x00\x00\x00",
    ]
    async with await transport.listen(Address.parse("tcp://127.0.0.1:0"), settings) as inbox:
        started = time.monotonic()
        gate = asyncio.Semaphore(20)  # 20 at a time, as a scanner would

        async def one(n: int) -> None:
            junk = garbage[n % len(garbage)]
            if nng and n % 2:  # past nng's own greeting, at our handshake
                junk = NNG_GREETING + struct.pack(">Q", len(junk) + 4) + b"\x00\x00\x00\x01" + junk
            elif nng:  # at nng's greeting, which nng checks only once it has 8 bytes
                junk = junk.ljust(8, b"\xff")
            async with gate:
                reader, writer = await raw(inbox.address, junk)
                assert await closed_within(reader, 1.0), junk
                writer.close()

        await asyncio.gather(*(one(n) for n in range(200)))
        assert time.monotonic() - started < 5


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


def test_a_slow_peer_still_gets_the_deadline():
    """Bytes that may still become a HELLO keep the connection open."""

    async def main():
        settings = Settings(secret=SECRET, handshake_timeout=1.0)
        address = Address.parse("tcp://127.0.0.1:0")
        async with await SocketTransport().listen(address, settings) as inbox:
            reader, writer = await raw(inbox.address, struct.pack("<B", Kind.HELLO))
            assert not await closed_within(reader, 0.5)
            assert await closed_within(reader, 2.0)
            writer.close()

    asyncio.run(main())


@pytest.mark.parametrize(
    "sizes", [[10], [1 << 20], [(1 << 20) + 1], [3, 2 << 20, 5, 1 << 20], [0, 7]]
)
def test_nng_pieces_carry_every_byte_once(sizes):
    """A message over nng's one-piece limit goes as pieces of at most PIECE
    bytes, each headed with its whole length; together they are the message."""
    from monarch_transport._nng import PART_HEAD, PIECE, _pieces

    parts = [bytes([n % 251]) * size for n, size in enumerate(sizes)]
    whole = b"".join(parts)
    pieces = _pieces(parts)
    if len(whole) <= PIECE:
        assert pieces == [whole]
        return
    assert all(len(p) <= PART_HEAD.size + PIECE for p in pieces)
    assert {PART_HEAD.unpack_from(p) for p in pieces} == {(Kind.PART, len(whole))}
    assert b"".join(p[PART_HEAD.size :] for p in pieces) == whole


async def test_a_port_probe_is_no_warning_but_garbage_is(caplog):
    """A health check that connects and hangs up says nothing and is logged
    at debug level; bytes that cannot be a handshake still warn."""
    import logging

    caplog.set_level(logging.DEBUG, logger="monarch.transport")
    settings = Settings(secret=SECRET)
    async with await SocketTransport().listen(
        Address.parse("tcp://127.0.0.1:0"), settings
    ) as inbox:
        _, writer = await raw(inbox.address)
        writer.close()
        reader2, writer2 = await raw(inbox.address, b"GET / HTTP/1.1\r\n\r\n")
        assert await closed_within(reader2, 1.0)
        writer2.close()
        await until(
            lambda: any("closed before saying anything" in r.getMessage() for r in caplog.records),
            5,
        )
    probes = [r for r in caplog.records if "closed before saying anything" in r.getMessage()]
    assert probes and all(r.levelno == logging.DEBUG for r in probes)
    assert any(
        r.levelno == logging.WARNING and "protocol error" in r.getMessage() for r in caplog.records
    )
