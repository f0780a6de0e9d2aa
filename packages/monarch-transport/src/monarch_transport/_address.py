"""Addresses: ``tcp://host:port``, ``ipc:///path`` (alias ``unix://``), ``inproc://name``.

Monarch's ``ChannelTransport`` names map to the kind of address a process
binds when none is given.
"""

from __future__ import annotations

import enum
import ipaddress
import os
import re
import tempfile
import uuid
from dataclasses import dataclass
from typing import Literal

from ._errors import AddressError

__all__ = ["Address", "ChannelTransport"]

Scheme = Literal["tcp", "tls", "ipc", "inproc"]
_HOSTNAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.\-]*[A-Za-z0-9])?$")
_FORMS = (
    "tcp://HOST:PORT, tcp://[IPV6]:PORT, tls+tcp://HOST:PORT, ipc:///PATH (or unix:///PATH) "
    "or inproc://NAME"
)


@dataclass(frozen=True, slots=True)
class Address:
    """A parsed transport address. ``str(address)`` gives the canonical text.

    Build one with ``parse`` rather than the constructor, which checks nothing.

    Args:
        scheme: ``"tcp"``, ``"tls"`` (written ``tls+tcp://``), ``"ipc"`` (a Unix
            socket) or ``"inproc"`` (within this process).
        host: the host name or IP address, for ``tcp`` and ``tls`` only.
        port: the TCP port, for ``tcp`` and ``tls`` only; 0 asks the listener for
            an ephemeral port.
        path: the socket file for ``ipc``; the name for ``inproc``.

    Attributes:
        scheme: ``"tcp"``, ``"tls"``, ``"ipc"`` or ``"inproc"``.
        host: the host name or IP address (``tcp`` and ``tls``); ``""`` otherwise.
        port: the TCP port (``tcp`` and ``tls``); 0 for an ephemeral port or no port.
        path: the socket file (``ipc``) or the name (``inproc``); ``""`` otherwise.

    Examples:
        >>> Address.parse("tcp://[::1]:0").host, Address.parse("unix:///tmp/a.sock")
        ('::1', Address.parse('ipc:///tmp/a.sock'))
    """

    scheme: Scheme
    host: str = ""  # tcp and tls only
    port: int = 0  # tcp and tls only; 0 asks the listener for an ephemeral port
    path: str = ""  # ipc: the socket file; inproc: the name

    @staticmethod
    def parse(text: str | Address) -> Address:
        """Parse an address's text; an ``Address`` is returned as it is.

        Accepted forms: ``tcp://HOST:PORT``, ``tcp://[IPV6]:PORT``,
        ``tls+tcp://HOST:PORT`` (or ``tls://``), ``ipc:///PATH`` (or ``unix:///PATH``)
        and ``inproc://NAME``. Schemes are case-insensitive.

        Args:
            text: the address's text, or an ``Address``.

        Returns:
            The parsed address.

        Raises:
            AddressError: ``text`` is not a str, has no or an unknown scheme, or is
                malformed (a missing host, port, path or name, an unbracketed IPv6
                host, a port outside 0 to 65535, an invalid host name).
        """
        if isinstance(text, Address):
            return text
        if not isinstance(text, str):
            raise AddressError(f"an address must be a str, got {type(text).__name__}")
        scheme, sep, rest = text.partition("://")
        if not sep:
            raise AddressError(f"address {text!r} has no scheme; expected {_FORMS}")
        scheme = scheme.lower()
        if scheme == "tcp":
            return _parse_tcp(text, rest)
        if scheme in ("tls+tcp", "tls"):
            return _parse_tcp(text, rest, "tls")
        if scheme in ("ipc", "unix"):
            if not rest:
                raise AddressError(f"address {text!r} has no socket path; expected ipc:///PATH")
            if "\0" in rest:
                raise AddressError(f"address {text!r}: a socket path cannot contain NUL")
            return Address("ipc", path=rest)
        if scheme == "inproc":
            if not rest:
                raise AddressError(f"address {text!r} has no name; expected inproc://NAME")
            return Address("inproc", path=rest)
        raise AddressError(f"address {text!r} has unknown scheme {scheme!r}; expected {_FORMS}")

    @property
    def family(self) -> Literal["tcp", "unix", "local"]:
        """The kind of socket: ``"tcp"`` (``tcp`` and ``tls``), ``"unix"`` (``ipc``) or
        ``"local"`` (``inproc``)."""
        return {"tcp": "tcp", "tls": "tcp", "ipc": "unix", "inproc": "local"}[self.scheme]  # type: ignore[return-value]

    def with_port(self, port: int) -> Address:
        """A copy of this address with another port, such as the one a listener on
        port 0 was given.

        Args:
            port: the new port.
        """
        return Address(self.scheme, self.host, port, self.path)

    def __str__(self) -> str:
        if self.scheme in ("tcp", "tls"):
            host = f"[{self.host}]" if ":" in self.host else self.host
            return f"{'tls+tcp' if self.scheme == 'tls' else 'tcp'}://{host}:{self.port}"
        return f"{self.scheme}://{self.path}"

    def __repr__(self) -> str:
        return f"Address.parse({str(self)!r})"


def _parse_tcp(text: str, rest: str, scheme: Literal["tcp", "tls"] = "tcp") -> Address:
    if rest.startswith("["):
        host, bracket, port_text = rest[1:].partition("]")
        if not bracket or not port_text.startswith(":"):
            raise AddressError(f"address {text!r}: write IPv6 as tcp://[ADDR]:PORT")
        port_text = port_text[1:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise AddressError(f"address {text!r}: {host!r} is not an IPv6 address") from None
    else:
        host, colon, port_text = rest.rpartition(":")
        if not colon or not host:
            raise AddressError(f"address {text!r} needs a host and a port: tcp://HOST:PORT")
        if ":" in host:
            raise AddressError(
                f"address {text!r}: put an IPv6 host in brackets, tcp://[{host}]:PORT"
            )
        if host != "*" and not _HOSTNAME.match(host):
            raise AddressError(f"address {text!r}: {host!r} is not a valid host name or address")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise AddressError(f"address {text!r}: port must be a number from 0 to 65535")
    return Address(scheme, host=host, port=int(port_text))


class ChannelTransport(enum.Enum):
    """Monarch's names for the kinds of channel a process can listen on."""

    TcpWithLocalhost = "tcp-localhost"
    """TCP on the loopback interface, ``127.0.0.1``: reachable from this host only."""
    TcpWithHostname = "tcp-hostname"
    """TCP on this host's name: reachable from other hosts."""
    Unix = "unix"
    """A Unix socket in the temporary directory (the default)."""
    Local = "local"
    """An ``inproc://`` address: reachable from this process only."""

    @classmethod
    def from_name(cls, name: str) -> ChannelTransport:
        """The member that ``name`` stands for, ignoring case.

        Args:
            name: ``"tcp"`` (``TcpWithLocalhost``), ``"ipc"`` or ``"unix"``,
                ``"inproc"`` or ``"local"``, or a member's name or value
                (``"TcpWithHostname"``, ``"tcp-hostname"``).

        Raises:
            AddressError: ``name`` names no member.
        """
        aliases = {"tcp": cls.TcpWithLocalhost, "ipc": cls.Unix, "inproc": cls.Local}
        for member in cls:
            aliases[member.name.lower()] = member
            aliases[member.value] = member
        try:
            return aliases[name.lower()]
        except KeyError:
            raise AddressError(
                f"unknown channel transport {name!r}; use one of {sorted(aliases)}"
            ) from None

    def any_address(self) -> Address:
        """A fresh address of this kind for a listener (ephemeral port, unique path)."""
        unique = uuid.uuid4().hex[:16]
        if self is ChannelTransport.TcpWithLocalhost:
            return Address("tcp", host="127.0.0.1", port=0)
        if self is ChannelTransport.TcpWithHostname:
            return Address("tcp", host=os.uname().nodename, port=0)
        if self is ChannelTransport.Unix:
            return Address(
                "ipc", path=os.path.join(tempfile.gettempdir(), f"monarch-{unique}.sock")
            )
        return Address("inproc", path=f"monarch-{unique}")

