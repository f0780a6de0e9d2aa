"""Integrity after the handshake: every message a sender sends is MACed.

The handshake proves both sides know the job's secret, but proves nothing
about the bytes that follow it: a relay that does not know the secret could
forward a real handshake and then inject or rewrite messages. So both sides
derive a per-connection key from the secret and the handshake's messages
(HKDF-SHA256), and the sender appends to every message a keyed BLAKE2b tag
over an implicit sequence number, the kind and every frame. The receiver
keeps its own count, so a rewritten, injected, replayed, reordered or dropped
message fails its check, and the connection closes before any of it is
delivered.

Large frames are not fed to BLAKE2b byte by byte: the standard library's
keyed hashes run at about 1 GB/s, a tenth of what a socket moves. Each MiB
of a large frame is authenticated by GMAC (AES-GCM with the data as
associated data and nothing to encrypt: carry-less multiplication in
hardware, about 8 GB/s, and it lets go of the GIL), under a second key and a
nonce made of the sequence number and the piece's index, and those GMAC tags
go into the BLAKE2b tag in the piece's place. The GMAC tags never travel, so
nothing about their key is shown to the wire.

Only sender-to-listener messages carry data, so only that direction is
sealed; the listener's answers (handshake steps, nng's BYE_ACK) can at worst
make a sender close, which an on-path relay can do anyway by cutting the
connection.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from ._config import INTEGRITY
from ._errors import AuthenticationError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from cryptography.hazmat.primitives.hashes import SHA256
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = [
    "INTEGRITY_ENV",
    "MODES",
    "TAG",
    "IntegrityError",
    "Opener",
    "Sealer",
    "default_mode",
    "derive_key",
    "preload",
    "private_folder",
    "required",
]

INTEGRITY_ENV: Final = INTEGRITY.env[0]
MODES: Final = ("always", "auto", "off")
TAG: Final = 16  # bytes of BLAKE2b tag: forging one blindly is a 2**-128 chance

Buffer = bytes | bytearray | memoryview


class IntegrityError(AuthenticationError):
    """A message after the handshake failed its integrity check."""


def default_mode() -> str:
    """The ``transport_integrity`` setting (``always``, ``auto`` or ``off``;
    ``$MONARCH_TRANSPORT_INTEGRITY``); ``auto`` when unset.

    It is the default of ``Settings.integrity``: when a listener demands that
    messages after the handshake carry a MAC.

    Returns:
        The mode in force.

    Raises:
        ValueError: the environment variable holds another value.
    """
    return INTEGRITY.get()


def required(mode: str, scheme: str, where: str = "") -> bool:
    """Whether an end of a connection seals (or demands sealed) messages, by
    what that end knows of its own connection: the address it listens on or
    dialed, never the peer's source address (any local user can connect from
    127.0.0.1).

    ``auto`` spares TLS (it has its own integrity), in-process connections,
    and Unix sockets whose folder only this user may enter (the job's 0700
    folder: no other user can connect, so no relay can sit between). Every
    TCP connection is sealed, loopback included: another local user can
    listen on a port a job process dials by mistake and relay it.

    Args:
        mode: ``"always"``, ``"auto"`` or ``"off"`` (``Settings.integrity``).
        scheme: the address's scheme: ``"tcp"``, ``"tls"``, ``"ipc"`` or ``"inproc"``.
        where: for ``ipc``, the socket's path (its folder is checked); else unused.

    Returns:
        Whether messages on the connection carry tags.
    """
    if mode == "always":
        return True
    if mode == "off" or scheme in ("tls", "inproc"):
        return False
    if scheme == "ipc":
        return not private_folder(where)
    return True


def private_folder(path: str) -> bool:
    """Whether the Unix socket at ``path`` lies in a folder of this user's
    that no other user may enter or write (mode 0700 or stricter); an
    abstract or relative name, or a folder that cannot be looked at, is not.

    Args:
        path: the socket's path.
    """
    folder = os.path.dirname(path)
    if not path.startswith("/") or not folder:
        return False
    try:
        info = os.stat(folder)
    except OSError:
        return False
    return info.st_uid == os.geteuid() and not info.st_mode & 0o077


def _crypto() -> tuple[type[HKDF], type[SHA256], type[AESGCM]]:
    """cryptography's ``HKDF``, ``SHA256`` and ``AESGCM``. Imported when a
    connection first needs them, or ahead by ``preload``: loading them costs
    a process about 10 ms of CPU, and processes on Unix sockets never do."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from cryptography.hazmat.primitives.hashes import SHA256
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF, SHA256, AESGCM


def preload() -> None:
    """Load what sealing a connection needs now, rather than on the first
    sealed connection, which would wait for it on its event loop.

    A worker on TCP calls it before it forks its fork server, so that its
    procs inherit it instead of each loading it while it first reaches the
    controller; a controller attaching to workers on TCP calls it before its
    first handshake.
    """
    _crypto()


def derive_key(
    secret: bytes, hello: bytes, server_nonce: bytes, label: bytes = b"sender-to-listener"
) -> bytes:
    """HKDF-SHA256 (RFC 5869) of the secret, salted with both sides'
    handshake messages; ``label`` tells apart keys for different uses (one per
    direction, say) from the same handshake. The transport passes its whole
    HELLO, so a relay that renames the peer gets a connection whose first
    message fails its check.

    Args:
        secret: the job's secret.
        hello: the connecting side's HELLO payload (its nonce and name).
        server_nonce: the listener's nonce, from its CHALLENGE.
        label: what the key is for; different labels give unrelated keys.

    Returns:
        A 32-byte key, for ``Sealer`` and ``Opener``.
    """
    HKDF, SHA256, _ = _crypto()
    return HKDF(
        algorithm=SHA256(),
        length=32,
        salt=hello + server_nonce,
        info=b"monarch-transport " + label + b" v2",
    ).derive(secret)


LARGE: Final = 1 << 14  # frames from this size are GMACed a piece at a time
PIECE: Final = 1 << 20  # well under GMAC's 2**31-byte limit per call


class _Tagger:
    """Tags for one direction of one connection, from its key."""

    def __init__(self, key: bytes) -> None:
        # keyed once per connection; each message copies it (cheaper than keying)
        self._keyed = hashlib.blake2b(key=key, digest_size=TAG)
        AESGCM = _crypto()[2]
        pieces_key = hashlib.blake2b(b"gmac pieces", key=key, digest_size=16).digest()
        self._gmac = AESGCM(pieces_key)

    def tag(self, seq: int, kind: int, frames: Sequence[Buffer]) -> bytes:
        mac = self._keyed.copy()
        views = [memoryview(frame) for frame in frames]
        count = len(views)
        # sequence number, kind, count and every length first: frame boundaries
        # are bound, not just the concatenation
        mac.update(struct.pack(f"<QBI{count}Q", seq, kind, count, *(v.nbytes for v in views)))
        piece = 0
        for view in views:
            if view.nbytes < LARGE:
                mac.update(view)  # hashlib reads the buffer in place: no copy
                continue
            flat = view.cast("B") if view.format != "B" or view.ndim != 1 else view
            for start in range(0, flat.nbytes, PIECE):
                # a nonce is never reused under this key: (message, piece) is unique
                nonce = struct.pack("<QI", seq, piece)
                mac.update(self._gmac.encrypt(nonce, b"", flat[start : start + PIECE]))
                piece += 1
        return mac.digest()


class Sealer:
    """The sending side: ``seal`` the next message's tag (taking its sequence
    number); ``unseal`` gives the number back when that message is not sent
    after all (it must be the last one sealed). A large message may
    ``reserve`` its number and compute its ``tag`` later, in another thread,
    while its frames are being written.

    Args:
        key: the connection's key, from ``derive_key``; the ``Opener`` on the other
            side holds the same.
    """

    def __init__(self, key: bytes) -> None:
        self._tagger = _Tagger(key)
        self._seq = 0

    def seal(self, kind: int, frames: Sequence[Buffer]) -> bytes:
        """The tag of the next message, taking its sequence number; it travels with
        the message.

        Args:
            kind: the message's kind byte, bound into the tag.
            frames: the message's frames.

        Returns:
            A 16-byte tag.
        """
        return self.tag(self.reserve(), kind, frames)

    def reserve(self) -> int:
        """Take the next sequence number."""
        self._seq += 1
        return self._seq - 1

    def tag(self, seq: int, kind: int, frames: Sequence[Buffer]) -> bytes:
        """The tag of the message numbered ``seq`` (from ``reserve``).

        Args:
            seq: the message's sequence number, from ``reserve``.
            kind: the message's kind byte, bound into the tag.
            frames: the message's frames.

        Returns:
            A 16-byte tag.
        """
        return self._tagger.tag(seq, kind, frames)

    def unseal(self) -> None:
        """Give back the sequence number the last ``seal`` took: that message is not
        sent, and the next one takes its number."""
        self._seq -= 1


class Opener:
    """The receiving side: ``check`` each message in the order it arrived.

    Args:
        key: the connection's key, from ``derive_key``; the ``Sealer`` on the other
            side holds the same.
    """

    def __init__(self, key: bytes) -> None:
        self._tagger = _Tagger(key)
        self._seq = 0

    def check(self, kind: int, frames: Sequence[Buffer], tag: Buffer) -> None:
        """Check the next message's tag, and count the message when it passes.

        Args:
            kind: the message's kind byte, as received.
            frames: the message's frames, without the tag.
            tag: the tag that came with it.

        Raises:
            IntegrityError: the tag does not match: the message was altered, injected,
                replayed or reordered, or one before it was dropped.
        """
        expected = self._tagger.tag(self._seq, kind, frames)
        if not hmac.compare_digest(expected, tag):
            raise IntegrityError(
                f"message {self._seq} after the handshake failed its integrity check "
                "(altered, injected, replayed, reordered or following a dropped one)"
            )
        self._seq += 1
