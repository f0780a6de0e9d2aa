"""The exception hierarchy of monarch_transport."""

from __future__ import annotations

__all__ = [
    "AddressError",
    "AuthenticationError",
    "HandshakeRefused",
    "ConnectError",
    "DecodeError",
    "EncodeError",
    "ListenerClosed",
    "MessageTooLarge",
    "PeerDisconnected",
    "TransportError",
]


class TransportError(Exception):
    """Base class of every error raised by monarch_transport."""


class AddressError(TransportError, ValueError):
    """An address that does not parse, or names an unknown scheme."""


class EncodeError(TransportError, TypeError, RuntimeError):
    """A value that cannot be encoded (for example, it cannot be pickled).

    A ``TypeError``, and a ``RuntimeError`` as what Monarch raises for an
    argument that cannot be pickled.
    """


class DecodeError(TransportError, ValueError):
    """Bytes that are not a valid message."""


class MessageTooLarge(TransportError, ValueError):
    """A message above the configured maximum size."""


class AuthenticationError(TransportError, ConnectionError):
    """A peer that could not prove it knows the job's secret."""


class HandshakeRefused(AuthenticationError):
    """The listener refused the handshake, or proved a different secret: a
    peer of another job, not a slow or broken one, so trying again will not
    help (unlike a handshake that timed out or was cut short)."""


class ConnectError(TransportError, ConnectionError):
    """Nothing listens at the address, or it cannot be bound."""


class PeerDisconnected(TransportError, ConnectionError):
    """The peer closed the connection, or it broke."""


class ListenerClosed(TransportError):
    """``receive()`` on a listener that was closed."""
