"""An on-path relay that does not know the secret, between a real sender and
a real listener over TCP: it forwards the real handshake, then rewrites,
drops, replays, reorders or injects a message. The listener must close the
connection, log it, and deliver nothing tampered (earlier messages are fine);
a relay that only forwards must go unnoticed."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import hmac
import logging
import os
import struct
from collections.abc import Callable

import pytest

from monarch_transport import Address, AuthenticationError, PeerLeft, Received, Settings
from monarch_transport._auth import ClientHandshake, ServerHandshake
from monarch_transport._integrity import LARGE, PIECE, TAG, Opener, Sealer, derive_key, required
from monarch_transport._nng import PART_HEAD, NngTransport
from monarch_transport._socket import SocketTransport
from monarch_transport._wire import Kind, join

pytestmark = pytest.mark.anyio
SECRET = b"s" * 32
HANDSHAKE = 2  # messages the sender sends before its data: HELLO, PROOF
SP_HEADER = 8  # nng's own greeting, before its length-prefixed messages


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def read_message(reader: asyncio.StreamReader, nng: bool) -> bytes:
    """One whole sender-to-listener message, exactly as it crossed the wire
    (on nng, a large one crosses as several nng messages: all of them)."""
    if nng:  # nng: a big-endian u64 length, PAIR1's 4-byte header, then ours
        size = await reader.readexactly(8)
        raw = size + await reader.readexactly(struct.unpack(">Q", size)[0])
        if raw[12] != Kind.PART:
            return raw
        whole, got = PART_HEAD.unpack_from(raw, 12)[1], len(raw) - 12 - PART_HEAD.size
        while got < whole:
            size = await reader.readexactly(8)
            piece = size + await reader.readexactly(struct.unpack(">Q", size)[0])
            raw += piece
            got += len(piece) - 12 - PART_HEAD.size
        return raw
    head = await reader.readexactly(5)
    count = struct.unpack_from("<I", head, 1)[0]
    table = await reader.readexactly(8 * count)
    body = await reader.readexactly(sum(struct.unpack(f"<{count}Q", table)))
    return head + table + body


def forged(template: bytes, nng: bool) -> bytes:
    """A sealed-looking message of the relay's own making (it cannot know the key)."""
    message = join(Kind.DATA | Kind.SEALED, [b"forged", os.urandom(TAG)], 1 << 20)
    return wrap(template, message, nng)


def wrap(template: bytes, message: bytes, nng: bool) -> bytes:
    """``message`` as it would cross the wire; on nng its length and PAIR1's
    4-byte header (copied from a real message) go first."""
    if not nng:
        return message
    return struct.pack(">Q", len(message) + 4) + template[8:12] + message


def flip(message: bytes, spot: int | None = None) -> bytes:
    if spot is None:
        spot = len(message) - TAG - 1  # the last payload byte, just before the tag
    return message[:spot] + bytes([message[spot] ^ 1]) + message[spot + 1 :]


def body(n: int) -> bytes:
    """The n-th message sent; the second is 3 MiB, so its frame is tagged
    piece by piece (GMAC) and its tag computed while it is written."""
    return f"m{n}".encode() * ((3 << 19) if n == 1 else 1)


# each: the data messages as sent (m0, m1, m2) -> what the relay forwards
TAMPERING: dict[str, Callable[[list[bytes], bool], list[bytes]]] = {
    "relay": lambda m, nng: m,
    "rewrite": lambda m, nng: [m[0], flip(m[1]), m[2]],
    "rewrite-middle": lambda m, nng: [m[0], flip(m[1], len(m[1]) // 2 + 5), m[2]],
    "drop": lambda m, nng: [m[0], m[2]],
    "replay": lambda m, nng: [m[0], m[0], m[1], m[2]],
    "reorder": lambda m, nng: [m[1], m[0], m[2]],
    "inject": lambda m, nng: [forged(m[0], nng), *m],
    # in one write: the real messages sit in the listener's buffer behind the
    # forged one, and must not be read once it has failed
    "inject-burst": lambda m, nng: [b"".join([forged(m[0], nng), *m])],
}
DELIVERED = {  # what the listener may hand on, in order
    "relay": [body(0), body(1), body(2)],
    "rewrite": [body(0)],
    "rewrite-middle": [body(0)],
    "drop": [body(0)],
    "replay": [body(0)],
    "reorder": [],
    "inject": [],
    "inject-burst": [],
}


class Heard:
    """What the listener made of the relay's messages so far: the test counts
    each one it delivers; the relay waits for that, or for the listener to
    hang up, before it sends the next (one at a time, so the cut is clean)."""

    def __init__(self) -> None:
        self.delivered = 0
        self.changed = asyncio.Event()

    def deliver(self, event: object) -> object:
        """Count ``event`` (what the listener handed on) and give it back."""
        self.delivered += 1
        self.changed.set()
        return event

    async def after(self, delivered: int, hung_up: asyncio.Task[None]) -> None:
        """Until more than ``delivered`` messages came through or the listener
        hung up (``hung_up`` done); 10 s at most (then the test's own checks fail)."""
        while self.delivered <= delivered and not hung_up.done():
            self.changed.clear()
            changed = asyncio.ensure_future(self.changed.wait())
            done, _ = await asyncio.wait(
                [changed, hung_up], timeout=10, return_when=asyncio.FIRST_COMPLETED
            )
            changed.cancel()
            if not done:
                return


async def start_relay(
    upstream: Address, nng: bool, tamper, heard: Heard
) -> tuple[asyncio.Server, int]:
    async def serve(client_r, client_w):
        up_r, up_w = await asyncio.open_connection(upstream.host, upstream.port)

        async def back():  # listener -> sender: forwarded as it comes
            while data := await up_r.read(1 << 16):
                client_w.write(data)
            client_w.close()

        backwards = asyncio.create_task(back())
        try:
            if nng:
                up_w.write(await client_r.readexactly(SP_HEADER))
            for _ in range(HANDSHAKE):  # the real handshake, untouched
                up_w.write(await read_message(client_r, nng))
            data = [await read_message(client_r, nng) for _ in range(3)]
            for message in tamper(data, nng):
                delivered = heard.delivered
                up_w.write(message)
                await up_w.drain()
                await heard.after(delivered, backwards)
            while rest := await client_r.read(1 << 16):
                up_w.write(rest)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            # until the listener hangs up on what it was sent (at most 1.5 s: an
            # untouched stream it keeps open)
            await asyncio.wait([backwards], timeout=1.5)
            up_w.close()
            backwards.cancel()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


@pytest.mark.parametrize("transport_cls", [SocketTransport, NngTransport], ids=["socket", "nng"])
@pytest.mark.parametrize("attack", sorted(TAMPERING))
async def test_relay_cannot_tamper(transport_cls, attack, caplog):
    nng = transport_cls is NngTransport
    transport = transport_cls()
    settings = Settings(secret=SECRET, integrity="always", name="real")
    caplog.set_level(logging.WARNING, logger="monarch.transport")
    async with await transport.listen(Address.parse("tcp://127.0.0.1:0"), settings) as inbox:
        heard = Heard()
        relay, port = await start_relay(inbox.address, nng, TAMPERING[attack], heard)
        async with relay:
            out = await transport.connect(
                Address.parse(f"tcp://127.0.0.1:{port}"), Settings(secret=SECRET, name="real")
            )
            for n in range(3):
                await out.send([body(n)])
            got: list[bytes] = []
            if attack == "relay":
                while len(got) < 3:
                    event = heard.deliver(await asyncio.wait_for(inbox.receive(), 10))
                    assert isinstance(event, Received)
                    got.append(b"".join(bytes(f) for f in event.frames))
                await out.aclose()
            else:
                while True:
                    event = await asyncio.wait_for(inbox.receive(), 10)
                    if isinstance(event, PeerLeft):
                        break
                    heard.deliver(event)
                    got.append(b"".join(bytes(f) for f in event.frames))
                warnings = " ".join(r.getMessage() for r in caplog.records)
                assert "integrity" in warnings, warnings
                await out.aclose()
                # nothing of the closed connection comes after its departure:
                # the next thing delivered is a fresh sender's
                direct = await transport.connect(inbox.address, settings)
                await direct.send([b"marker"])
                event = await asyncio.wait_for(inbox.receive(), 10)
                assert isinstance(event, Received)
                assert b"".join(bytes(f) for f in event.frames) == b"marker"
                await direct.aclose()
            assert got == DELIVERED[attack]


@pytest.mark.parametrize("transport_cls", [SocketTransport, NngTransport], ids=["socket", "nng"])
@pytest.mark.parametrize("listen_mode", ["always", "auto"])
async def test_unsealed_data_is_refused_where_sealing_is_demanded(
    transport_cls, listen_mode, caplog
):
    """A relay cannot strip the seal: a listener that demands it closes on
    the first unsealed message, whatever the sender thinks. With the default
    (``auto``) this holds on loopback too: the relay here connects from
    127.0.0.1, as any local user can, and the sender does not seal at all."""
    nng = transport_cls is NngTransport
    transport = transport_cls()
    caplog.set_level(logging.WARNING, logger="monarch.transport")
    listening = Settings(secret=SECRET, integrity=listen_mode)
    async with await transport.listen(Address.parse("tcp://127.0.0.1:0"), listening) as inbox:

        def strip(messages, nng):  # an unsealed message in place of the first
            plain = join(Kind.DATA, [b"plain"], 1 << 20)
            return [wrap(messages[0], plain, nng), *messages[1:]]

        relay, port = await start_relay(inbox.address, nng, strip, Heard())
        async with relay:
            out = await transport.connect(
                Address.parse(f"tcp://127.0.0.1:{port}"), Settings(secret=SECRET, integrity="off")
            )
            for n in range(3):
                await out.send([f"m{n}".encode()])
            event = await asyncio.wait_for(inbox.receive(), 10)
            assert isinstance(event, PeerLeft)
            assert "unsealed" in " ".join(r.getMessage() for r in caplog.records)
            await out.aclose()


@pytest.mark.parametrize("transport_cls", [SocketTransport, NngTransport], ids=["socket", "nng"])
@pytest.mark.parametrize("mode", ["always", "auto", "off"])
async def test_modes_talk_to_each_other(transport_cls, mode):
    """Any mode on the sender works with any on the listener: the listener
    says in its WELCOME whether it demands seals. Over TCP, loopback
    included, only ``off`` on both ends goes without tags."""
    transport = transport_cls()
    for listen_mode in ("always", "auto", "off"):
        listening = Settings(secret=SECRET, integrity=listen_mode)
        async with await transport.listen(Address.parse("tcp://127.0.0.1:0"), listening) as inbox:
            out = await transport.connect(inbox.address, Settings(secret=SECRET, integrity=mode))
            sealed = out._sealer is not None
            assert sealed == (mode != "off" or listen_mode != "off")
            await out.send([b"x" * 100, b"y" * (1 << 17)])
            event = await asyncio.wait_for(inbox.receive(), 10)
            assert isinstance(event, Received)
            assert [len(f) for f in event.frames] == [100, 1 << 17]
            await out.aclose()


def test_policy(tmp_path):
    """Decided by each end's own address and transport, never the peer's."""
    for host in ("10.0.0.5", "*", "example.org", "127.0.0.1", "::1", "::ffff:127.0.0.1"):
        assert required("auto", "tcp", host)
    assert not required("auto", "tls", "")
    assert not required("auto", "inproc", "")
    private = tmp_path / "job"
    private.mkdir(mode=0o700)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    assert not required("auto", "ipc", str(private / "a.sock"))
    assert required("auto", "ipc", str(shared / "a.sock"))
    assert required("auto", "ipc", "relative.sock")
    assert required("auto", "ipc", str(tmp_path / "missing" / "a.sock"))
    assert required("always", "ipc", str(private / "a.sock"))
    assert not required("off", "tcp", "10.0.0.5")
    with pytest.raises(Exception, match="integrity"):
        Settings(secret=SECRET, integrity="sometimes")


def test_the_demand_for_tags_is_covered_by_the_handshake():
    """A relay that flips WELCOME's flag (to turn the listener's demand off,
    or on) is caught by the client: the flag is under a MAC."""
    for seal in (True, False):
        server = ServerHandshake(SECRET, seal=seal)
        client = ClientHandshake(SECRET)
        proof = client.answer(*server.step(*client.hello()))
        kind, welcome = server.step(*proof)
        flipped = bytes([welcome[0] ^ 1]) + welcome[1:]
        with pytest.raises(AuthenticationError, match="WELCOME"):
            ClientHandshake.check(copy.copy(client), kind, flipped)
        with pytest.raises(AuthenticationError, match="WELCOME"):
            ClientHandshake.check(copy.copy(client), kind, welcome[:1])
        client.check(kind, welcome)
        assert client.seal_requested is seal


def test_sealer_and_opener_agree_and_catch_every_change():
    key = derive_key(SECRET, b"n" * 16 + b"name", b"m" * 16)
    sealer, opener = Sealer(key), Opener(key)
    messages = [[b"a", memoryview(b"bc")], [b"ab", b"c"], [b"abc"], []]
    tags = [sealer.seal(Kind.DATA, frames) for frames in messages]
    assert len(set(tags)) == len(tags)  # frame boundaries and position both count
    for frames, tag in zip(messages, tags, strict=True):
        opener.check(Kind.DATA, frames, tag)
    with pytest.raises(Exception, match="integrity"):
        opener.check(Kind.DATA, messages[0], tags[0])  # a replay
    other = derive_key(SECRET, b"n" * 16 + b"eman", b"m" * 16)  # a renamed peer
    assert other != key
    assert derive_key(SECRET, b"n" * 16 + b"name", b"m" * 16, label=b"answers") != key


def _hand_written_hkdf(secret: bytes, salt: bytes, info: bytes) -> bytes:
    """The HKDF-SHA256 (one 32-byte block) ``derive_key`` used to write out by
    hand; keys must not change with the library one (old and new ends meet)."""
    prk = hmac.new(salt, secret, hashlib.sha256).digest()
    return hmac.new(prk, info + b"\x01", hashlib.sha256).digest()


@pytest.mark.parametrize(
    ("secret", "hello", "server_nonce", "label", "expected"),
    [
        (b"job secret", b"n" * 16 + b"name", b"m" * 16, b"sender-to-listener",
         "8f0fd6d0e5dd11c3d49a312ae7ae2ad4df58cfe6f852fc3efb82f50f2a359db4"),
        (b"job secret", b"n" * 16 + b"name", b"m" * 16, b"answers",
         "90abcf3ffd65a1000bd87c90d79763ecb7ba99830784f3956add2cd7d2cbb95b"),
        (b"", b"", b"", b"sender-to-listener",
         "cd8459098f2230b6482bbc828f01d5d2fca76847269e0263eb0058a741ee6739"),
    ],
)  # fmt: skip
def test_derived_keys_stay_byte_for_byte_the_same(secret, hello, server_nonce, label, expected):
    """Fixed vectors (computed with the hand-written HKDF), and the library's
    HKDF against that hand-written one on more inputs."""
    key = derive_key(secret, hello, server_nonce, label=label)
    assert key.hex() == expected
    info = b"monarch-transport " + label + b" v2"
    assert key == _hand_written_hkdf(secret, hello + server_nonce, info)
    for _ in range(20):
        secret, hello, nonce = os.urandom(32), os.urandom(40), os.urandom(16)
        assert derive_key(secret, hello, nonce, label=label) == _hand_written_hkdf(
            secret, hello + nonce, info
        )


def test_large_frames_are_bound_byte_for_byte():
    """Frames from LARGE bytes are GMACed a piece at a time: a change in any
    piece, a byte moved across a frame boundary, or two pieces swapped fails."""
    key = derive_key(SECRET, b"n" * 16, b"m" * 16)
    big = bytearray(os.urandom(2 * PIECE + 3))
    frames = [b"head", big]
    tag = Sealer(key).seal(Kind.DATA, frames)
    Opener(key).check(Kind.DATA, frames, tag)
    variants = []
    for spot in (0, PIECE - 1, PIECE + 7, len(big) - 1):
        changed = bytearray(big)
        changed[spot] ^= 0x40
        variants.append([b"head", changed])
    variants.append([b"head" + big[:1], big[1:]])  # a boundary moved
    variants.append([b"head", big[PIECE : 2 * PIECE] + big[:PIECE] + big[2 * PIECE :]])
    variants.append([b"head", big[: LARGE - 1]])  # under LARGE: hashed whole
    for frames in variants:
        with pytest.raises(Exception, match="integrity"):
            Opener(key).check(Kind.DATA, frames, tag)


@pytest.mark.parametrize("transport_cls", [SocketTransport, NngTransport], ids=["socket", "nng"])
async def test_every_send_path_seals_in_wire_order(transport_cls):
    """Sealed messages from every way of sending (from the loop, without
    waiting, in batches, from another thread, large ones in chunks) arrive
    checked and in order: each takes its number as it goes on the wire."""
    transport = transport_cls()
    settings = Settings(secret=SECRET, integrity="always")
    async with await transport.listen(Address.parse("tcp://127.0.0.1:0"), settings) as inbox:
        out = await transport.connect(inbox.address, settings)
        expected: list[bytes] = []

        def mark(n: int, size: int = 10) -> list[bytes]:
            body = n.to_bytes(4, "little") * (size // 4)
            expected.append(body)
            return [body]

        n = 0
        for round_ in range(20):
            await out.send(mark(n, 1 << 20 if round_ % 5 == 0 else 10))
            n += 1
            while out.send_nowait(mark(n)):
                n += 1
                if n % 7 == 0:
                    break
            else:
                expected.pop()
            batch = [mark(n + i)[0] for i in range(3)]
            sent = out.send_many_nowait([[b] for b in batch])
            del expected[len(expected) - 3 + sent :]
            n += sent
            if await asyncio.to_thread(out.send_threadsafe, mark(n)):
                n += 1
            else:
                expected.pop()
        got = []
        while len(got) < len(expected):
            event = await asyncio.wait_for(inbox.receive(), 10)
            assert isinstance(event, Received), event
            got.append(bytes(event.frames[0]))
        assert got == expected
        await out.aclose()
