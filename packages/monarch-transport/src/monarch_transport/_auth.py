"""Connection authentication: an HMAC challenge-response on the job's secret.

Both sides prove they know the secret without sending it, and each proof is
bound to nonces of both sides, so a recorded handshake cannot be replayed:

    client -> HELLO      client nonce, client name
    server -> CHALLENGE  server nonce, HMAC(secret, "server" | client nonce | server nonce)
    client -> PROOF      HMAC(secret, "client" | server nonce | client nonce)
    server -> WELCOME    flags, HMAC(secret, "welcome" | client nonce | server nonce | flags)
                         (or DENIED with the reason, then it closes)

A client that finds the CHALLENGE's proof wrong answers DENIED with its
reason instead of PROOF, then closes: the listener can then tell a peer of
another job from one that merely went away (a process ending mid-handshake).

Until WELCOME the server accepts nothing but these steps, so no byte of an
unauthenticated peer ever reaches the codec. Both sides then hold the same
per-connection key (``_integrity.derive_key``); WELCOME's flag byte says
whether the listener demands that messages be sealed with it, under a MAC of
its own, so a relay cannot turn the demand off (or on).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import threading
from dataclasses import dataclass, field

from ._errors import AuthenticationError, HandshakeRefused
from ._integrity import derive_key
from ._wire import Kind

__all__ = ["ClientHandshake", "ServerHandshake", "job_secret", "SECRET_ENV"]

SECRET_ENV = "MONARCH_JOB_SECRET"
"""The environment variable holding the job's secret, as hex digits (see ``job_secret``)."""
NONCE = 16
PROOF = hashlib.sha256().digest_size
MAX_NAME = 256
SEAL = b"\x01"  # WELCOME's flag: seal every message
NO_SEAL = b"\x00"


_making = threading.Lock()


def job_secret() -> bytes:
    """This job's secret: ``$MONARCH_JOB_SECRET`` (hex), made and exported on
    first use so that every process the job starts inherits it.

    Every connection authenticates on it: processes of one job must share it.

    Raises:
        AuthenticationError: ``$MONARCH_JOB_SECRET`` is not hex, or holds fewer
            than 16 bytes.
    """
    with _making:  # two threads asking first must not make two secrets
        text = os.environ.get(SECRET_ENV)
        if text is None:
            text = secrets.token_hex(32)
            os.environ[SECRET_ENV] = text
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        raise AuthenticationError(
            f"{SECRET_ENV} must be hex digits, got {len(text)} other characters"
        ) from None
    if len(secret) < 16:
        raise AuthenticationError(f"{SECRET_ENV} must hold at least 16 bytes (32 hex digits)")
    return secret


def _printable(said: bytes | memoryview, limit: int = 200) -> str:
    """What a peer not yet authenticated says, fit for a log line: its
    reason, without line breaks or terminal escapes it could forge lines with."""
    text = bytes(said[:limit]).decode(errors="replace")
    return "".join(c if c.isprintable() else "?" for c in text)


def _mac(secret: bytes, role: bytes, first: bytes, second: bytes) -> bytes:
    return hmac.new(secret, role + first + second, hashlib.sha256).digest()


@dataclass
class ServerHandshake:
    """The listening side's steps, one message at a time. ``step`` returns the
    reply to send; ``done`` turns true after WELCOME. Any misstep raises
    ``AuthenticationError`` (the caller sends DENIED and closes)."""

    secret: bytes
    nonce: bytes = field(default_factory=lambda: os.urandom(NONCE))
    peer_name: str = ""
    done: bool = False
    seal: bool = False  # demand sealed messages (told to the peer in WELCOME)
    _client_nonce: bytes = b""
    _hello: bytes = b""

    @property
    def heard(self) -> bool:
        """Whether the peer has said HELLO (a port probe never does)."""
        return bool(self._hello)

    @property
    def key(self) -> bytes:
        """The connection's integrity key (once ``done``)."""
        return derive_key(self.secret, self._hello, self.nonce)

    def step(self, kind: int, payload: bytes | memoryview) -> tuple[int, bytes]:
        payload = bytes(payload)
        if not self._client_nonce:
            if kind != Kind.HELLO or len(payload) < NONCE or len(payload) > NONCE + MAX_NAME:
                raise AuthenticationError("expected a HELLO from a new connection")
            self._client_nonce, self._hello = payload[:NONCE], payload
            try:
                self.peer_name = payload[NONCE:].decode()
            except UnicodeDecodeError:
                raise AuthenticationError("peer name in HELLO is not UTF-8") from None
            proof = _mac(self.secret, b"server", self._client_nonce, self.nonce)
            return Kind.CHALLENGE, self.nonce + proof
        if kind == Kind.DENIED and not self.done:
            # its words are not logged: an unauthenticated peer writes nothing into our logs
            raise AuthenticationError(
                "the peer found this listener's proof wrong, so it holds another secret "
                "(another job's?)"
            )
        if self.done or kind != Kind.PROOF or len(payload) != PROOF:
            raise AuthenticationError("expected the PROOF answering our challenge")
        expected = _mac(self.secret, b"client", self.nonce, self._client_nonce)
        if not hmac.compare_digest(payload, expected):
            raise AuthenticationError("peer does not know this job's secret")
        self.done = True
        flags = SEAL if self.seal else NO_SEAL
        return Kind.WELCOME, flags + _mac(self.secret, b"welcome", self._hello, self.nonce + flags)


@dataclass
class ClientHandshake:
    """The connecting side's steps: ``hello()``, then ``answer(challenge)``,
    then ``check(reply)``."""

    secret: bytes
    name: str = ""
    nonce: bytes = field(default_factory=lambda: os.urandom(NONCE))
    seal_requested: bool = False  # the listener's WELCOME asked for sealed messages
    # why we refuse the listener, once its proof failed: sent it as DENIED before closing
    objection: bytes | None = None
    _server_nonce: bytes = b""

    @property
    def key(self) -> bytes:
        """The connection's integrity key (once the handshake is through)."""
        return derive_key(self.secret, self.hello()[1], self._server_nonce)

    def hello(self) -> tuple[int, bytes]:
        name = self.name.encode()
        if len(name) > MAX_NAME:
            raise AuthenticationError(f"connection name is {len(name)} bytes; at most {MAX_NAME}")
        return Kind.HELLO, self.nonce + name

    def answer(self, kind: int, payload: bytes | memoryview) -> tuple[int, bytes]:
        payload = bytes(payload)
        if kind == Kind.DENIED:
            raise HandshakeRefused(f"the listener refused us: {_printable(payload)}")
        if kind != Kind.CHALLENGE or len(payload) != NONCE + PROOF:
            raise AuthenticationError("the listener did not answer with a challenge")
        server_nonce, proof = payload[:NONCE], payload[NONCE:]
        if not hmac.compare_digest(proof, _mac(self.secret, b"server", self.nonce, server_nonce)):
            why = "the listener does not know this job's secret (is it another job's address?)"
            self.objection = why.encode()
            raise HandshakeRefused(why)
        self._server_nonce = server_nonce
        return Kind.PROOF, _mac(self.secret, b"client", server_nonce, self.nonce)

    def check(self, kind: int, payload: bytes | memoryview) -> None:
        if kind == Kind.WELCOME:
            payload = bytes(payload)
            flags, tag = payload[:1], payload[1:]
            expected = _mac(self.secret, b"welcome", self.hello()[1], self._server_nonce + flags)
            if flags not in (SEAL, NO_SEAL) or not hmac.compare_digest(tag, expected):
                raise AuthenticationError(
                    "the listener's WELCOME failed its check: something on the path altered it"
                )
            self.seal_requested = flags == SEAL
            return
        if kind == Kind.DENIED:
            raise HandshakeRefused(
                f"the listener refused us: {_printable(payload)} "
                f"(do both sides have the same {SECRET_ENV}?)"
            )
        raise AuthenticationError(f"unexpected message kind {kind} during the handshake")
