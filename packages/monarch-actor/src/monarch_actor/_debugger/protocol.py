"""The debug server's wire protocol, and ``DebugClient``, its client side.

One JSON object per line, each way. Every client proves the job's secret,
loopback included (another local user can reach a loopback port too), and
the server proves it as well, so a client never types pdb commands into a
process that squatted the port. The server speaks first::

    server -> {"t": "hello", "version": 2, "nonce": Ns}
    client -> {"t": "auth", "nonce": Nc, "takeover": bool, "pid": int, "host": str,
               "proof": HMAC(K, CLIENT_PROOF | H(hello line) | H(auth fields but proof))}
    server -> {"t": "welcome", "proof": HMAC(K, SERVER_PROOF | H(hello line) | H(auth line))}
              (or {"t": "bye", "refused": true, ...} and it closes)

``Ns`` and ``Nc`` are 32 fresh random bytes (hex) of each side, ``H`` is
SHA-256, and ``K = HMAC(secret, KEY | Ns | Nc)`` is the connection's key, so
a proof is bound to both nonces and to every field of the handshake: a
recorded one neither replays nor survives an altered ``takeover``. Before
the handshake ends the server accepts one line of at most
``MAX_HANDSHAKE_LINE`` bytes within ``HANDSHAKE_WAIT`` seconds.

After ``welcome`` every line, each way, is sealed::

    HEX(HMAC(K_dir, seq | json)) SP json

``K_dir = HMAC(K, direction)`` differs per direction and ``seq`` (8 bytes,
big-endian) counts that direction's messages from 0, so no line can be
injected, altered, reordered, replayed or reflected; the first line that
fails its check closes the connection. The messages themselves::

    server -> {"t": "out", "text": ...}       text to show
    server -> {"t": "prompt", "text": ...}    show the prompt, answer with one line:
    client -> {"t": "line", "text": ...}
    server -> {"t": "bye", "text": ..., "refused": bool}   then it closes

A second client is refused while one is attached, unless it asks to take
over (``takeover``). The conversation is not encrypted: integrity, not
secrecy.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import socket
from typing import Any

from monarch_transport import SECRET_ENV

from .._api.hosts import SECRET_FILE_ENV
from .._core.config import debug_server_address
from .._core.errors import MonarchError
from .._core.private import PrivateFileError, private_dir, read_private, read_records

__all__ = [
    "HANDSHAKE_WAIT",
    "MAX_HANDSHAKE_LINE",
    "NONCE_BYTES",
    "PROTOCOL_VERSION",
    "RECORD_KIND",
    "SECRET_FILE_ENV",
    "DebugClient",
    "DebugConnectionError",
    "Seal",
    "auth_body",
    "client_proof",
    "connection_key",
    "decode_message",
    "encode_message",
    "is_loopback",
    "parse_nonce",
    "server_proof",
]

PROTOCOL_VERSION = 2
NONCE_BYTES = 32
MAX_HANDSHAKE_LINE = 4096  # bytes: the longest line either side reads before the handshake ends
HANDSHAKE_WAIT = 10.0  # seconds a client has, from connecting, to prove the secret
RECORD_KIND = "debug"  # the kind of the record the controller publishes for its user's tools
_MAC_HEX = 2 * hashlib.sha256().digest_size
# domain separation: no MAC of one purpose is ever valid for another, nor for
# the transport's own handshake on the same secret
_KEY = b"monarch-debug/2 connection key\x00"
_CLIENT_PROOF = b"monarch-debug/2 client proof\x00"
_SERVER_PROOF = b"monarch-debug/2 server proof\x00"
_TO_SERVER = b"monarch-debug/2 client to server\x00"
_TO_CLIENT = b"monarch-debug/2 server to client\x00"
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1", "ip6-localhost", "ip6-loopback"})
_WILDCARD = frozenset({"", "0.0.0.0", "::"})


class DebugConnectionError(MonarchError, ConnectionError):
    """``monarch debug`` could not reach the debug server, or was refused by it.

    The message says where it looked and what to do.
    """


def encode_message(kind: str, **fields: Any) -> bytes:
    """One protocol message as a line of JSON, unsealed (the handshake's).

    Args:
        kind: the message's type (``"hello"``, ``"auth"``, ...).
        **fields: its fields (JSON values).

    Returns:
        The line, ending in a newline (JSON escapes any inside).
    """
    return json.dumps({"t": kind, **fields}).encode() + b"\n"


def decode_message(line: bytes) -> dict[str, Any]:
    """One protocol message from a line of JSON.

    Args:
        line: the line, with or without its newline.

    Returns:
        The message: a dict with a string ``"t"``.

    Raises:
        ValueError: the line is no protocol message.
    """
    try:
        message = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"not a debugger protocol message: {error}") from None
    if not isinstance(message, dict) or not isinstance(message.get("t"), str):
        raise ValueError("not a debugger protocol message: no type")
    return message


def connection_key(secret: bytes, server_nonce: bytes, client_nonce: bytes) -> bytes:
    """The key of one connection, from the job's secret and both sides' nonces.

    Args:
        secret: the job's secret.
        server_nonce: the server's ``NONCE_BYTES`` fresh bytes.
        client_nonce: the client's.

    Returns:
        32 bytes that only holders of ``secret`` can compute.
    """
    return hmac.new(secret, _KEY + server_nonce + client_nonce, hashlib.sha256).digest()


def auth_body(fields: dict[str, Any]) -> bytes:
    """The canonical bytes of an ``auth`` message's fields but its proof: what
    the client's proof covers, computed alike on both sides.

    Args:
        fields: the ``auth`` message (with or without ``"proof"``).

    Returns:
        Its fields but ``proof`` as sorted, compact JSON.
    """
    kept = {name: value for name, value in fields.items() if name != "proof"}
    return json.dumps(kept, sort_keys=True, separators=(",", ":")).encode()


def client_proof(key: bytes, hello: bytes, body: bytes) -> str:
    """What a client sends to show it knows the job's secret.

    Args:
        key: the connection's key (``connection_key``).
        hello: the server's ``hello`` line, exactly as it came.
        body: ``auth_body`` of the client's ``auth`` message.

    Returns:
        The proof, hex.
    """
    digest = hashlib.sha256(hello).digest() + hashlib.sha256(body).digest()
    return hmac.new(key, _CLIENT_PROOF + digest, hashlib.sha256).hexdigest()


def server_proof(key: bytes, hello: bytes, auth: bytes) -> str:
    """What the server sends to show it knows the job's secret.

    Args:
        key: the connection's key (``connection_key``).
        hello: the server's ``hello`` line, exactly as sent.
        auth: the client's ``auth`` line, exactly as it came.

    Returns:
        The proof, hex.
    """
    digest = hashlib.sha256(hello).digest() + hashlib.sha256(auth).digest()
    return hmac.new(key, _SERVER_PROOF + digest, hashlib.sha256).hexdigest()


class Seal:
    """One side's sealing of the messages after the handshake: a MAC under
    its direction's key over its sequence number and the line.

    Args:
        key: the connection's key (``connection_key``).
        server: whether this is the server's side.
    """

    def __init__(self, key: bytes, *, server: bool) -> None:
        sending, receiving = (_TO_CLIENT, _TO_SERVER) if server else (_TO_SERVER, _TO_CLIENT)
        self._send_key = hmac.new(key, sending, hashlib.sha256).digest()
        self._receive_key = hmac.new(key, receiving, hashlib.sha256).digest()
        self._sent = 0
        self._received = 0

    def seal(self, kind: str, **fields: Any) -> bytes:
        """One message as a sealed line; the next one sent must be the next sealed.

        Args:
            kind: the message's type.
            **fields: its fields.

        Returns:
            The line, ending in a newline.
        """
        body = json.dumps({"t": kind, **fields}).encode()
        mac = self._mac(self._send_key, self._sent, body)
        self._sent += 1
        return mac + b" " + body + b"\n"

    def open(self, line: bytes) -> dict[str, Any]:
        """The message of the next sealed line received, once its MAC checks.

        Args:
            line: the line, with or without its newline.

        Returns:
            The message.

        Raises:
            ValueError: the line fails its check (altered, injected, replayed
                or out of order) or is no protocol message.
        """
        mac, space, body = line.removesuffix(b"\n").partition(b" ")
        expected = self._mac(self._receive_key, self._received, body)
        if not space or not hmac.compare_digest(mac, expected):
            raise ValueError(
                f"message {self._received} failed its integrity check: something between the "
                "two ends altered, injected or replayed it"
            )
        self._received += 1
        return decode_message(body)

    @staticmethod
    def _mac(key: bytes, seq: int, body: bytes) -> bytes:
        return hmac.new(key, seq.to_bytes(8, "big") + body, hashlib.sha256).hexdigest().encode()


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback interface only.

    Args:
        host: a host name or address.

    Returns:
        True for ``localhost``, ``127.x.y.z``, ``::1`` and their aliases.
    """
    if host.lower() in _LOOPBACK:
        return True
    return host.startswith("127.")


def _hex_secret(text: str, where: str) -> bytes:
    try:
        secret = bytes.fromhex(text.strip())
    except ValueError:
        raise DebugConnectionError(
            f"{where} must hold the job's secret as hex digits, as in the program's {SECRET_ENV}"
        ) from None
    if not secret:
        raise DebugConnectionError(f"{where} is empty: it must hold the job's secret (hex)")
    return secret


def _secret_from_env() -> tuple[bytes, str] | None:
    """The secret from ``$MONARCH_JOB_SECRET``, else the file
    ``$MONARCH_JOB_SECRET_FILE`` names (only if it is this user's alone)."""
    text = os.environ.get(SECRET_ENV)
    if text:
        return _hex_secret(text, f"${SECRET_ENV}"), f"${SECRET_ENV}"
    path = os.environ.get(SECRET_FILE_ENV)
    if not path:
        return None
    try:
        data = read_private(path, SECRET_FILE_ENV)
    except PrivateFileError as error:
        raise DebugConnectionError(f"{error}; then run this again") from None
    except OSError as error:
        raise DebugConnectionError(
            f"{SECRET_FILE_ENV}={path!r} cannot be read: {error.strerror or error}; point it at "
            "a file (mode 0600) holding the job's secret as hex digits"
        ) from None
    try:
        text = data.decode()
    except UnicodeDecodeError:
        text = "?"
    return _hex_secret(text, f"{SECRET_FILE_ENV} {path!r}"), f"${SECRET_FILE_ENV} ({path})"


def _secret_in(record: dict[str, Any], host: str, port: int) -> str | None:
    """The secret (hex) of the debug server at ``host:port``, if ``record``
    describes one there."""
    if is_loopback(host) and record.get("hostname", socket.gethostname()) != socket.gethostname():
        return None  # a shared home folder may hold records of other machines' programs
    servers = record.get("servers")
    if not isinstance(servers, list):
        servers = [record]
    for server in servers:
        if not isinstance(server, dict) or server.get("port") != port:
            continue
        there = str(server.get("host", ""))
        if there == host or there in _WILDCARD or (is_loopback(there) and is_loopback(host)):
            secret = server.get("secret", record.get("secret"))
            return secret if isinstance(secret, str) else None
    return None


def _secret_from_records(host: str, port: int) -> tuple[bytes, str] | None:
    """The secret a live program of this user published for the debug
    server at ``host:port`` (``publish_record``), if one did."""
    for record in read_records(RECORD_KIND):
        secret = _secret_in(record, host, port)
        if secret is not None:
            where = f"the record of process {record.get('pid')} in {_records_folder()}"
            return _hex_secret(secret, where), where
    return None


def _records_folder() -> str:
    try:
        return str(private_dir("jobs"))
    except (OSError, PrivateFileError) as error:
        return f"(this user's Monarch state folder, unusable: {error})"


class DebugClient:
    """A connection to the debug server of a running Monarch program.

    ``monarch debug`` is a terminal around this class; scripts and tests can
    drive the debugger with it directly. Each ``send`` returns what the
    server printed up to its next prompt. Both ends prove the job's secret
    before anything else, and every message after that is sealed against
    tampering (``protocol``).

    Args:
        host: where the debug server listens; default the setting
            ``debug_server_host`` (``$MONARCH_DEBUG_SERVER_HOST``, else ``localhost``).
        port: its port; default the setting ``debug_server_port``
            (``$MONARCH_DEBUG_SERVER_PORT``, else 27000).
        secret: the job's secret; default ``$MONARCH_JOB_SECRET`` (hex), else
            the file ``$MONARCH_JOB_SECRET_FILE`` names (it must be this user's,
            mode 0600), else the record the program published for its own
            user when its debug server started (same user, same machine).
        timeout: the most seconds to wait for the connection and the handshake.
        takeover: replace a client already attached (it is told and closed);
            without it, such a server refuses this client.

    Attributes:
        host: the debug server's host.
        port: its port.
        greeting: what the server printed on connecting.
        prompt: the prompt the server shows now (``"monarch_dbg> "``, or
            ``"(Pdb) "`` inside a session).
        closed: whether the server ended the conversation.

    Raises:
        DebugConnectionError: no server listens there (the message says how
            one starts), no secret was found (the message says what to set),
            the server refused this client (wrong secret, another client
            attached), or what listens there did not prove the job's secret.
        ValueError: the setting read for a default holds no valid value.

    Examples:
        >>> from monarch_actor import DebugClient
        >>> try:
        ...     DebugClient("127.0.0.1", 9, timeout=5)
        ... except ConnectionError as error:
        ...     print(str(error).split(":")[0])
        no debug server at 127.0.0.1
    """

    def __init__(
        self,
        host: str | None = None,
        port: int | None = None,
        *,
        secret: bytes | None = None,
        timeout: float | None = 30.0,
        takeover: bool = False,
    ) -> None:
        default_host, default_port = debug_server_address()
        self.host = host = default_host if host is None else host
        self.port = port = default_port if port is None else port
        self.prompt = ""
        self.closed = False
        self._seal: Seal | None = None
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as error:
            raise DebugConnectionError(
                f"no debug server at {host}:{port}: {error.strerror or error}. The debug server "
                "runs in the Monarch program (the controller) and starts when an actor first "
                "calls breakpoint() or the program calls debug_controller(); check that the "
                "program runs and that --host/--port match its MONARCH_DEBUG_SERVER_HOST/"
                "MONARCH_DEBUG_SERVER_PORT (default localhost:27000)"
            ) from None
        self._file = self._sock.makefile("rb")
        try:
            self._handshake(secret, takeover)
        except BaseException:
            self.close()
            raise
        self.greeting = self._until_prompt()

    def _handshake(self, secret: bytes | None, takeover: bool) -> None:
        where = f"{self.host}:{self.port}"
        hello_line = self._read_handshake_line("its greeting")
        hello = self._decode(hello_line)
        if hello["t"] != "hello" or hello.get("version") != PROTOCOL_VERSION:
            raise DebugConnectionError(
                f"{where} does not speak the Monarch debugger's protocol version "
                f"{PROTOCOL_VERSION}: is it a Monarch debug server of the same version? Run "
                "`monarch debug` from the Monarch version the program uses"
            )
        server_nonce = parse_nonce(hello.get("nonce"))
        if server_nonce is None:
            raise DebugConnectionError(f"{where} sent a greeting without a valid nonce")
        found = (secret, "secret=") if secret is not None else _secret_from_env()
        if found is None:
            found = _secret_from_records(self.host, self.port)
        if found is None:
            raise DebugConnectionError(
                f"the debug server at {where} asks for the job's secret: set {SECRET_ENV} "
                f"(hex, as in the program's environment) or {SECRET_FILE_ENV} (a file of "
                "yours, mode 0600, holding it), or run `monarch debug` as the user who runs "
                "the program, on its machine: the program leaves the secret for its own user "
                f"in {_records_folder()}, and no record there names {where}"
            )
        key_secret, source = found
        client_nonce = secrets.token_bytes(NONCE_BYTES)
        fields: dict[str, Any] = {
            "t": "auth",
            "nonce": client_nonce.hex(),
            "takeover": takeover,
            "pid": os.getpid(),
            "host": socket.gethostname(),
        }
        key = connection_key(key_secret, server_nonce, client_nonce)
        fields["proof"] = client_proof(key, hello_line, auth_body(fields))
        auth_line = json.dumps(fields).encode() + b"\n"
        try:
            self._sock.sendall(auth_line)
        except OSError as error:
            raise DebugConnectionError(
                f"the connection to the debug server at {where} broke: {error}"
            ) from None
        answer = self._decode(self._read_handshake_line("its answer to this client's proof"))
        if answer["t"] == "bye":
            # unauthenticated: what the server wrote is not shown, only what it means
            raise DebugConnectionError(
                f"the debug server at {where} refused this client: it did not prove the job's "
                f"secret (the secret from {source} is not this program's). Use the program's "
                f"{SECRET_ENV}, or unset it to use the record the program left for its user"
            )
        given = answer.get("proof")
        expected = server_proof(key, hello_line, auth_line)
        if answer["t"] != "welcome" or not (
            isinstance(given, str) and hmac.compare_digest(given.encode(), expected.encode())
        ):
            raise DebugConnectionError(
                f"what listens at {where} did not prove that it knows the job's secret (from "
                f"{source}): it is not this program's debug server, or the secret is another "
                "job's. Another program or user may hold the port: nothing was typed into it. "
                "Check --host/--port (MONARCH_DEBUG_SERVER_HOST/MONARCH_DEBUG_SERVER_PORT)"
            )
        self._seal = Seal(key, server=False)

    def send(self, line: str, timeout: float | None = None) -> str:
        """Type one line at the current prompt.

        Args:
            line: a debugger command (``list``, ``attach a 0``, ...) or, inside
                a session, a pdb command.
            timeout: the most seconds to wait for the answer (``None``: as long
                as it takes; a pdb command may run the program for a while).

        Returns:
            What the server printed in answer, up to its next prompt (now in
            ``prompt``), or up to the end when it closed the conversation.

        Raises:
            DebugConnectionError: the conversation is over, the connection
                broke, or a message failed its integrity check.
            TimeoutError: no answer within ``timeout`` (the connection is closed).
            ValueError: ``line`` holds a newline.
        """
        if self.closed or self._seal is None:
            raise DebugConnectionError(f"the debug server at {self.host}:{self.port} has closed")
        if "\n" in line:
            raise ValueError("send one line at a time")
        self._sock.settimeout(timeout)
        # the server may have said goodbye first: then what it said is still to be read
        with contextlib.suppress(OSError):
            self._sock.sendall(self._seal.seal("line", text=line))
        return self._until_prompt()

    def close(self) -> None:
        """End the conversation; the sessions stay in place for the next client."""
        self.closed = True
        try:
            self._file.close()
        finally:
            self._sock.close()

    def __enter__(self) -> DebugClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _broke(self, error: object) -> DebugConnectionError:
        self.close()
        return DebugConnectionError(
            f"the connection to the debug server at {self.host}:{self.port} broke: {error}"
        )

    def _read_handshake_line(self, what: str) -> bytes:
        try:
            line = self._file.readline(MAX_HANDSHAKE_LINE + 1)
        except TimeoutError:
            raise DebugConnectionError(
                f"{self.host}:{self.port} accepted the connection but sent no {what} in time: "
                "is it a Monarch debug server?"
            ) from None
        except OSError as error:
            raise self._broke(error) from None
        if not line:
            raise DebugConnectionError(
                f"the debug server at {self.host}:{self.port} closed the connection before "
                f"{what}: is the program ending, or is the server another Monarch version?"
            )
        if len(line) > MAX_HANDSHAKE_LINE or not line.endswith(b"\n"):
            raise DebugConnectionError(
                f"{self.host}:{self.port} sent an overlong line as {what}: it is no Monarch "
                "debug server"
            )
        return line

    def _decode(self, line: bytes) -> dict[str, Any]:
        try:
            return decode_message(line)
        except ValueError as error:
            raise DebugConnectionError(f"{self.host}:{self.port}: {error}") from None

    def _read(self) -> dict[str, Any]:
        try:
            line = self._file.readline()
        except TimeoutError:
            self.close()
            raise
        except OSError as error:
            raise self._broke(error) from None
        if not line:  # closed without a goodbye: the program ended, or was killed
            self.close()
            return {
                "t": "bye",
                "text": f"The debug server at {self.host}:{self.port} closed the connection "
                "(did the program end?).\n",
            }
        assert self._seal is not None
        try:
            return self._seal.open(line)
        except ValueError as error:
            self.close()
            raise DebugConnectionError(
                f"the connection to the debug server at {self.host}:{self.port} is closed: "
                f"{error}. Connect again; if it recurs, something on the way tampers with it "
                "(use an SSH tunnel)"
            ) from None

    def _until_prompt(self) -> str:
        shown: list[str] = []
        while True:
            message = self._read()
            kind = message["t"]
            if kind == "out":
                shown.append(str(message.get("text", "")))
            elif kind == "prompt":
                self.prompt = str(message.get("text", ""))
                return "".join(shown)
            elif kind == "bye":
                if message.get("refused"):
                    self._refused(message)
                shown.append(str(message.get("text", "")))
                self.prompt = ""
                if not self.closed:
                    self.close()
                return "".join(shown)

    def _refused(self, message: dict[str, Any]) -> None:
        self.close()
        raise DebugConnectionError(
            f"the debug server at {self.host}:{self.port} refused this client: "
            f"{message.get('text', '')}".rstrip()
        )


def parse_nonce(text: object) -> bytes | None:
    """The nonce a message's hex field holds.

    Args:
        text: the field's value.

    Returns:
        Its ``NONCE_BYTES`` bytes, or ``None`` when it is no such hex string.
    """
    if not isinstance(text, str):
        return None
    try:
        nonce = bytes.fromhex(text)
    except ValueError:
        return None
    return nonce if len(nonce) == NONCE_BYTES else None
