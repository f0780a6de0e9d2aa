"""The socket backend's framer: how it cuts a byte stream into messages, and
how much memory a connection keeps for it (a controller holds two
connections per proc, so that is paid per proc)."""

import asyncio
import socket

import pytest

from monarch_transport import PeerDisconnected
from monarch_transport._socket import READ_BUFFER, _Connection, _Framer
from monarch_transport._wire import Kind, prefix
from monarch_transport.testing import until

MAX = 1 << 20


def feed(framer: _Framer, data: bytes) -> None:
    """What asyncio does for a ``BufferedProtocol``: ask for a buffer, fill
    as much of it as has arrived."""
    while data:
        buffer = framer.get_buffer(-1)
        n = min(len(buffer), len(data))
        buffer[:n] = data[:n]
        framer.buffer_updated(n)
        data = data[n:]


def wire(message: bytes) -> bytes:
    return prefix(Kind.DATA, [message], MAX) + message


def framer_into(got: list[bytes]) -> _Framer:
    return _Framer(MAX, lambda kind, frames: got.append(b"".join(frames)))


def test_a_connection_of_small_messages_keeps_a_small_buffer():
    got: list[bytes] = []
    framer = framer_into(got)
    message = b"x" * 100
    count = 3 * READ_BUFFER // 100  # three large buffers' worth, one message at a time
    for _ in range(count):
        feed(framer, wire(message))
        # each was read whole: the next is received at the front of a buffer
        # of a few pages (a fresh bytearray is resident in full)
        assert len(framer.get_buffer(-1)) == len(framer._buf) <= 16 << 10
    assert len(got) == count and set(got) == {message}


def test_a_burst_grows_the_buffer_to_read_much_at_once():
    got: list[bytes] = []
    framer = framer_into(got)
    message = b"y" * 1000
    feed(framer, wire(message) * 1000)  # a megabyte arriving faster than it is read
    assert got == [message] * 1000
    assert len(framer.get_buffer(-1)) == READ_BUFFER


def test_messages_split_across_reads_are_whole():
    got: list[bytes] = []
    framer = framer_into(got)
    small, medium = bytes(range(256)) * 40, bytes(range(256)) * 200  # 10 KB, 51 KB
    stream = (wire(small) + wire(medium)) * 5
    for i in range(0, len(stream), 777):  # partial reads; messages span several
        feed(framer, stream[i : i + 777])
    assert got == [small, medium] * 5


def test_a_whole_header_and_pickle_message_is_cut_from_one_copy():
    got: list[list[memoryview]] = []
    framer = _Framer(MAX, lambda kind, frames: got.append(frames))
    header, pickle = b"h" * 30, b"p" * 70
    feed(framer, prefix(Kind.DATA, [header, pickle], MAX) + header + pickle)
    (frames,) = got
    assert [bytes(f) for f in frames] == [header, pickle]
    assert frames[0].obj is frames[1].obj  # one copy, two views of it
    assert frames[0].obj is not framer._buf  # not the staging buffer the next read reuses
    frames[1][0] = ord("q")  # writable, as every received frame is
    feed(framer, wire(b"next"))
    assert bytes(frames[0]) == header and bytes(frames[1]) == b"q" + pickle[1:]


def test_out_of_band_frames_get_memory_of_their_own():
    got: list[list[memoryview]] = []
    framer = _Framer(MAX, lambda kind, frames: got.append(frames))
    parts = [b"h" * 10, b"p" * 10, b"b" * 64]
    feed(framer, prefix(Kind.DATA, parts, MAX) + b"".join(parts))
    (frames,) = got
    assert [bytes(f) for f in frames] == parts
    assert len({id(f.obj) for f in frames}) == 3


def test_a_message_of_no_frames_has_none():
    got: list[list[memoryview]] = []
    framer = _Framer(MAX, lambda kind, frames: got.append(frames))
    feed(framer, prefix(Kind.DATA, [], MAX) + wire(b"after"))
    assert [[bytes(f) for f in frames] for frames in got] == [[], [b"after"]]


@pytest.mark.anyio
async def test_writing_on_a_connection_already_lost_raises_peer_disconnected():
    """A handshake whose peer hung up before its first write: uvloop raised
    RuntimeError there (an exception nobody retrieved at a job's end)."""
    ours, theirs = socket.socketpair()
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_unix_connection(lambda: _Connection(1 << 16), sock=ours)
    theirs.close()
    assert await until(lambda: conn.reason is not None)
    with pytest.raises(PeerDisconnected, match="gone"):
        conn.write(Kind.HELLO, [b"x" * 16], 1 << 16)
