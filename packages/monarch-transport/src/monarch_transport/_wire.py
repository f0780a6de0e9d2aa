"""How a message of several buffers travels as bytes.

A message is a kind byte and a list of buffers (frames). On the wire:

    kind: u8 | count: u32 | length: u64 * count | buffer bytes, in order

Everything little-endian. Nothing here unpickles or trusts lengths beyond
the configured limits.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

from ._errors import DecodeError, MessageTooLarge

__all__ = ["HANDSHAKE_MAX", "HEAD", "MAX_FRAMES", "Kind", "join", "prefix", "split"]

Buffer = bytes | bytearray | memoryview

HEAD: Final = struct.Struct("<BI")
MAX_FRAMES: Final = 1 << 16  # more frames than this in one message is garbage, not data
# the largest handshake message (a HELLO: nonce and a name of at most 256
# bytes); until a peer has authenticated nothing larger is read from it
HANDSHAKE_MAX: Final = 512


class Kind:
    """Message kinds: the handshake's steps, then data."""

    HELLO: Final = 1
    CHALLENGE: Final = 2
    PROOF: Final = 3
    WELCOME: Final = 4
    DENIED: Final = 5
    BYE: Final = 6  # a sender is done; the listener answers once all before it is read
    BYE_ACK: Final = 7
    PART: Final = 8  # nng only: a piece of a message too large for one nng message
    DATA: Final = 16
    SEALED: Final = 0x80  # flag: the message's last frame is its integrity tag
    ALL: Final = frozenset({1, 2, 3, 4, 5, 6, 7, 16, 0x80 | 6, 0x80 | 16})


def prefix(
    kind: int, frames: Sequence[Buffer], max_size: int, lengths: list[int] | None = None
) -> bytes:
    """The bytes that go before ``frames`` on the wire (``lengths``: their
    sizes in bytes, when the caller has them already)."""
    if lengths is None:
        lengths = sizes(frames)
    total = sum(lengths)
    if total > max_size:
        raise _too_large(total, max_size)
    if len(frames) > MAX_FRAMES:
        raise MessageTooLarge(f"message has {len(frames)} frames; at most {MAX_FRAMES} allowed")
    count = len(frames)
    return HEAD.pack(kind, count) + _table(count).pack(*lengths)


def small_message(kind: int, frames: Sequence[Buffer], max_size: int, limit: int) -> bytes | None:
    """The whole message, prefix and frames, as one bytes object to write
    at once; None when that would be over ``limit`` bytes (``prefix``'s
    work and ``join``'s in one step, for the many small messages)."""
    lengths = sizes(frames)
    count = len(lengths)
    total = sum(lengths)
    if HEAD.size + 8 * count + total > limit:
        return None
    if total > max_size:
        raise _too_large(total, max_size)
    return b"".join([HEAD.pack(kind, count), _table(count).pack(*lengths), *frames])


def _too_large(total: int, max_size: int) -> MessageTooLarge:
    return MessageTooLarge(
        f"message of {total:,} bytes exceeds the maximum of {max_size:,} bytes; raise it with "
        "MONARCH_MAX_MESSAGE_SIZE (or max_message_size=) on both sides, or send less at once"
    )


def _table(count: int) -> struct.Struct:
    """The layout of ``count`` frame lengths (prepared for the messages most
    sent: a header, a pickle, a few buffers)."""
    return _TABLES[count] if count < len(_TABLES) else struct.Struct(f"<{count}Q")


_TABLES: Final = [struct.Struct(f"<{count}Q") for count in range(8)]


def sizes(frames: Sequence[Buffer]) -> list[int]:
    """The size of each frame in bytes."""
    return [len(f) if type(f) is bytes else memoryview(f).nbytes for f in frames]


def join(kind: int, frames: Sequence[Buffer], max_size: int) -> bytes:
    """The whole message as one contiguous bytes object (for message transports)."""
    return b"".join([prefix(kind, frames, max_size), *frames])


def read_lengths(
    kind: int, count: int, lengths_bytes: Buffer, max_size: int, offset: int = 0
) -> list[int]:
    """Validate a message's head; the frame lengths it announces (read from
    ``lengths_bytes`` at ``offset``)."""
    if kind not in Kind.ALL:
        raise DecodeError(f"unknown message kind {kind}")
    if count > MAX_FRAMES + 1:  # + 1: a sealed message's tag
        raise DecodeError(f"message announces {count} frames; at most {MAX_FRAMES} allowed")
    lengths = list(_table(count).unpack_from(lengths_bytes, offset))
    total = sum(lengths)
    if total > max_size:
        raise MessageTooLarge(f"peer announced a {total:,}-byte message; the limit is {max_size:,}")
    return lengths


def split(data: Buffer, max_size: int) -> tuple[int, list[memoryview]]:
    """Parse one whole message; its kind and frames (views into ``data``, no copies)."""
    view = memoryview(data).cast("B")
    if view.nbytes < HEAD.size:
        raise DecodeError(
            f"message of {view.nbytes} bytes is shorter than its {HEAD.size}-byte head"
        )
    kind, count = HEAD.unpack_from(view)
    start = HEAD.size + 8 * count
    if view.nbytes < start:
        raise DecodeError(f"message truncated inside its frame table ({view.nbytes} bytes)")
    lengths = read_lengths(kind, count, view[HEAD.size : start], max_size)
    if start + sum(lengths) != view.nbytes:
        raise DecodeError(
            f"message frames add up to {start + sum(lengths)} bytes but {view.nbytes} arrived"
        )
    frames = []
    for length in lengths:
        frames.append(view[start : start + length])
        start += length
    return kind, frames
