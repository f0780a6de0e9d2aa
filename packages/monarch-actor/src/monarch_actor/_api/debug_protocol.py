"""The debug server's wire protocol, and ``DebugClient``, its client side.

One JSON object per line, each way. The server speaks first:

    server -> {"t": "hello", "version": 1, "nonce": HEX | null}
    client -> {"t": "auth", "proof": HMAC-SHA256(secret, "monarch-debug" | nonce)}   (if nonce)
    server -> {"t": "out", "text": ...}       text to show
    server -> {"t": "prompt", "text": ...}    show the prompt, answer with one line:
    client -> {"t": "line", "text": ...}
    server -> {"t": "bye", "text": ..., "refused": bool}   then it closes

A server listening beyond the loopback interface sends a nonce, and only a
client that proves the job's secret gets further than ``hello``.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import socket
from pathlib import Path
from typing import Any

from monarch_transport import SECRET_ENV

from .._core.config import debug_server_address
from .._core.errors import MonarchError
from .hosts import SECRET_FILE_ENV

__all__ = [
    "PROTOCOL_VERSION",
    "SECRET_FILE_ENV",
    "DebugClient",
    "DebugConnectionError",
    "decode_message",
    "encode_message",
    "is_loopback",
    "proof",
]

PROTOCOL_VERSION = 1
_DOMAIN = b"monarch-debug"
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1", "ip6-localhost", "ip6-loopback"})


class DebugConnectionError(MonarchError, ConnectionError):
    """``monarch debug`` could not reach the debug server, or was refused by it.

    The message says where it looked and what to do.
    """


def encode_message(kind: str, **fields: Any) -> bytes:
    """One protocol message as a line of JSON."""
    return json.dumps({"t": kind, **fields}).encode() + b"\n"


def decode_message(line: bytes) -> dict[str, Any]:
    """One protocol message from a line of JSON.

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


def proof(secret: bytes, nonce: str) -> str:
    """What a client sends to show it knows ``secret`` (hex), for the server's ``nonce``."""
    return hmac.new(secret, _DOMAIN + bytes.fromhex(nonce), hashlib.sha256).hexdigest()


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback interface only."""
    if host.lower() in _LOOPBACK:
        return True
    return host.startswith("127.")


def _secret_from_env() -> bytes | None:
    text = os.environ.get(SECRET_ENV)
    path = os.environ.get(SECRET_FILE_ENV)
    if not text and path:
        try:
            text = Path(path).read_text().strip()
        except OSError as error:
            raise DebugConnectionError(
                f"{SECRET_FILE_ENV}={path!r} cannot be read: {error}"
            ) from None
    if not text:
        return None
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise DebugConnectionError(f"{SECRET_ENV} must be hex digits") from None


class DebugClient:
    """A connection to the debug server of a running Monarch program.

    ``monarch debug`` is a terminal around this class; scripts and tests can
    drive the debugger with it directly. Each ``send`` returns what the
    server printed up to its next prompt.

    Args:
        host: where the debug server listens; default the setting
            ``debug_server_host`` (``$MONARCH_DEBUG_SERVER_HOST``, else ``localhost``).
        port: its port; default the setting ``debug_server_port``
            (``$MONARCH_DEBUG_SERVER_PORT``, else 27000).
        secret: the job's secret, needed when the server listens beyond the
            loopback interface; default ``$MONARCH_JOB_SECRET`` (hex) or the
            file ``$MONARCH_JOB_SECRET_FILE`` names.
        timeout: the most seconds to wait for the connection and the greeting.

    Attributes:
        host: the debug server's host.
        port: its port.
        greeting: what the server printed on connecting.
        prompt: the prompt the server shows now (``"monarch_dbg> "``, or
            ``"(Pdb) "`` inside a session).
        closed: whether the server ended the conversation.

    Raises:
        DebugConnectionError: no server listens there (the message says how
            one starts), or it refused this client.
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
    ) -> None:
        default_host, default_port = debug_server_address()
        self.host = host = default_host if host is None else host
        self.port = port = default_port if port is None else port
        self.prompt = ""
        self.closed = False
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
        hello = self._read()
        if hello["t"] == "bye":
            self._refused(hello)
        if hello["t"] != "hello" or hello.get("version") != PROTOCOL_VERSION:
            self.close()
            raise DebugConnectionError(
                f"{host}:{port} does not speak the Monarch debugger's protocol version "
                f"{PROTOCOL_VERSION}: is it a Monarch debug server of the same version?"
            )
        nonce = hello.get("nonce")
        if nonce:
            key = secret if secret is not None else _secret_from_env()
            if key is None:
                self.close()
                raise DebugConnectionError(
                    f"the debug server at {host}:{port} listens beyond this machine and asks "
                    f"for the job's secret: set {SECRET_ENV} (hex) or {SECRET_FILE_ENV} as in "
                    "the program's environment"
                )
            self._write("auth", proof=proof(key, nonce))
        self.greeting = self._until_prompt()

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
            DebugConnectionError: the conversation is over or the connection broke.
            TimeoutError: no answer within ``timeout`` (the connection is closed).
        """
        if self.closed:
            raise DebugConnectionError(f"the debug server at {self.host}:{self.port} has closed")
        if "\n" in line:
            raise ValueError("send one line at a time")
        self._sock.settimeout(timeout)
        # the server may have said goodbye first: then what it said is still to be read
        with contextlib.suppress(OSError):
            self._sock.sendall(encode_message("line", text=line))
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

    def _write(self, kind: str, **fields: Any) -> None:
        try:
            self._sock.sendall(encode_message(kind, **fields))
        except OSError as error:
            self.close()
            raise DebugConnectionError(
                f"the connection to the debug server at {self.host}:{self.port} broke: {error}"
            ) from None

    def _read(self) -> dict[str, Any]:
        try:
            line = self._file.readline()
        except TimeoutError:
            self.close()
            raise
        except OSError as error:
            self.close()
            raise DebugConnectionError(
                f"the connection to the debug server at {self.host}:{self.port} broke: {error}"
            ) from None
        if not line:  # closed without a goodbye: the program ended, or was killed
            self.close()
            return {
                "t": "bye",
                "text": f"The debug server at {self.host}:{self.port} closed the connection "
                "(did the program end?).\n",
            }
        try:
            return decode_message(line)
        except ValueError as error:
            self.close()
            raise DebugConnectionError(f"{self.host}:{self.port}: {error}") from None

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
