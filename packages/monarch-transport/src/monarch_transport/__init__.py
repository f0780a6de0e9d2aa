"""Transport for Monarch in Python.

Addresses (``tcp://``, ``ipc://``/``unix://``, ``inproc://``), the
``Transport`` interface with its backends (``nng`` through pynng, the
default; plain ``socket``; ``inproc``), the codec (a msgpack header plus a
pickle-5 payload whose large buffers travel out of band) and connection
authentication on the job's secret. No actor concepts live here.

>>> import asyncio
>>> async def demo():
...     async with await listen("inproc://demo") as inbox:
...         async with await connect(inbox.address) as out:
...             await out.send(encode({"hello": "world"}))
...             event = await inbox.receive()
...             return decode(event.frames)[1]
>>> asyncio.run(demo())
{'hello': 'world'}
"""

# the built-in backends register themselves when imported; nng when first chosen
from . import _inproc, _registry, _socket  # noqa: F401
from ._address import Address, ChannelTransport
from ._auth import SECRET_ENV, job_secret
from ._bindspec import BindSpec
from ._codec import SharedHeader, decode, decode_header, decode_payload, encode, encode_header
from ._errors import (
    AddressError,
    AuthenticationError,
    ConnectError,
    DecodeError,
    EncodeError,
    HandshakeRefused,
    ListenerClosed,
    MessageTooLarge,
    PeerDisconnected,
    TransportError,
)
from ._integrity import IntegrityError, Opener, Sealer, derive_key
from ._integrity import default_mode as integrity_mode
from ._integrity import preload as preload_integrity
from ._integrity import required as integrity_required
from ._interface import Event, Listener, Peer, PeerLeft, Received, Sender, Transport
from ._loop import new_event_loop, run
from ._loop import preload as preload_event_loop
from ._registry import backend_class, register_backend
from ._select import (
    connect,
    default_listen_address,
    enable_transport,
    listen,
    prefer_backend,
    transport_for,
)
from ._settings import TLS_ENV, Settings, TlsFiles

_registry.defer_backend("nng", f"{__name__}._nng")  # pynng loads when nng is first chosen

__all__ = [
    "SECRET_ENV",
    "TLS_ENV",
    "Address",
    "AddressError",
    "AuthenticationError",
    "HandshakeRefused",
    "BindSpec",
    "ChannelTransport",
    "ConnectError",
    "DecodeError",
    "EncodeError",
    "Event",
    "IntegrityError",
    "Listener",
    "ListenerClosed",
    "MessageTooLarge",
    "Opener",
    "Peer",
    "PeerDisconnected",
    "PeerLeft",
    "Received",
    "Sealer",
    "Sender",
    "Settings",
    "TlsFiles",
    "Transport",
    "TransportError",
    "backend_class",
    "connect",
    "decode",
    "decode_header",
    "decode_payload",
    "default_listen_address",
    "derive_key",
    "enable_transport",
    "encode",
    "encode_header",
    "SharedHeader",
    "integrity_mode",
    "integrity_required",
    "job_secret",
    "listen",
    "new_event_loop",
    "prefer_backend",
    "preload_event_loop",
    "preload_integrity",
    "register_backend",
    "run",
    "transport_for",
]

__version__ = "0.1.0"
