"""An authenticated nng peer's large message crosses in pieces: the listener
gathers them into one buffer of the length they announce, and when they do
not add up it closes the connection and delivers nothing of them."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Callable

import pytest

from monarch_transport import Address, Received, Settings
from monarch_transport._nng import PART_HEAD, PIECE, NngTransport, _pieces
from monarch_transport._wire import Kind, prefix

pytestmark = pytest.mark.anyio
SECRET = b"P" * 32
LIMIT = 6 * PIECE  # the listener's max_message_size


@pytest.fixture
def folder():
    """A folder only this user may enter: its Unix sockets carry no tags, so
    the test can write pieces by hand."""
    path = tempfile.mkdtemp(prefix="nng-pieces-")
    os.chmod(path, 0o700)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def whole(payload: bytes) -> bytes:
    """A one-frame data message as the sender would join it."""
    return prefix(Kind.DATA, [payload], 1 << 40) + payload


def part(length: int, body: bytes) -> bytes:
    """One piece, announcing a whole message of ``length`` bytes."""
    return PART_HEAD.pack(Kind.PART, length) + body


async def _pair(folder: str):
    transport = NngTransport()
    settings = Settings(secret=SECRET, max_message_size=LIMIT)
    inbox = await transport.listen(Address.parse(f"ipc://{folder}/in.sock"), settings)
    out = await transport.connect(inbox.address, settings)
    assert out._sealer is None  # unsealed: the pieces below are the whole wire message
    return transport, settings, inbox, out


async def test_pieces_that_add_up_arrive_as_one_message_with_every_byte(folder):
    _, _, inbox, out = await _pair(folder)
    async with inbox:
        payload = bytes(range(251)) * (3 * PIECE // 251 + 2)  # three pieces and a bit
        pieces = _pieces([whole(payload)])
        assert len(pieces) == 4
        for piece in pieces:
            await asyncio.to_thread(out._sock.send, piece)
        event = await asyncio.wait_for(inbox.receive(), 10)
        assert isinstance(event, Received)
        assert [bytes(frame) for frame in event.frames] == [payload]
        await out.aclose()


def _overflowing(message: bytes) -> list[bytes]:
    # announces the true length, then sends more than it
    return [part(len(message), message[:PIECE]), part(len(message), message[PIECE:] + b"x" * 8)]


def _changing(message: bytes) -> list[bytes]:
    # the second piece announces another length
    return [part(len(message), message[:PIECE]), part(len(message) + 1, message[PIECE:])]


def _too_large(message: bytes) -> list[bytes]:
    # announces more than the listener takes
    return [part(LIMIT + (2 << 20), message[:PIECE])]


def _too_small(message: bytes) -> list[bytes]:
    # a whole message that fits one nng message may not come in pieces
    return [part(PIECE // 2, message[: PIECE // 2])]


@pytest.mark.parametrize(
    "tamper",
    [_overflowing, _changing, _too_large, _too_small],
    ids=["overflow", "length-changes", "too-large", "too-small"],
)
async def test_pieces_that_do_not_add_up_close_the_connection(
    folder: str, tamper: Callable[[bytes], list[bytes]]
):
    transport, settings, inbox, out = await _pair(folder)
    async with inbox:
        message = whole(b"m" * (PIECE + PIECE // 2))
        for piece in tamper(message):
            await asyncio.to_thread(out._sock.send, piece)
        assert "closed" in await asyncio.wait_for(out.wait_closed(), 10)
        # nothing of them was handed on: the first message the listener
        # delivers is the next connection's
        again = await transport.connect(inbox.address, settings)
        await again.send([b"after"])
        event = await asyncio.wait_for(inbox.receive(), 10)
        assert isinstance(event, Received)
        assert [bytes(frame) for frame in event.frames] == [b"after"]
        await again.aclose()
