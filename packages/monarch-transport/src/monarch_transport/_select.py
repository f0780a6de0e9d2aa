"""Which backend and which kind of address a process uses: configuration,
never user code. ``$MONARCH_TRANSPORT`` (``nng`` or ``socket``) picks the
backend; ``enable_transport(...)`` may pick it, or the kind of address to
listen on, before the first connection is made."""

from __future__ import annotations

import os
import threading

from ._address import Address, ChannelTransport
from ._errors import AddressError, TransportError
from ._inproc import InprocTransport
from ._interface import Listener, Sender, Settings, Transport
from ._nng import NngTransport
from ._socket import SocketTransport

__all__ = [
    "connect",
    "default_listen_address",
    "enable_transport",
    "listen",
    "prefer_backend",
    "transport_for",
]

BACKEND_ENV = "MONARCH_TRANSPORT"
BACKENDS: dict[str, type[Transport]] = {"nng": NngTransport, "socket": SocketTransport}


class _Choice:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.backend: str | None = None
        self.listen_on: ChannelTransport | Address = ChannelTransport.Unix
        self.used = False
        self.instances: dict[str, Transport] = {}


_choice = _Choice()


def enable_transport(transport: ChannelTransport | str) -> None:
    """Choose, before any connection is made, the backend (``"nng"``,
    ``"socket"``), the kind of address to listen on (a ``ChannelTransport``,
    ``"tcp"``, ``"ipc"``/``"unix"``, ``"local"``) or an exact address to
    listen on (``"tcp://0.0.0.0:8080"``)."""
    with _choice.lock:
        if _choice.used:
            raise RuntimeError(
                "`enable_transport()` must be called before any other calls that connect or "
                "listen; call it first thing in your script"
            )
        if isinstance(transport, ChannelTransport):
            _choice.listen_on = transport
        elif not isinstance(transport, str):
            raise TypeError(
                f"enable_transport() takes a ChannelTransport or a str, got {transport!r}"
            )
        elif transport in BACKENDS:
            _choice.backend = transport
        elif "://" in transport:
            _choice.listen_on = Address.parse(transport)
        else:
            _choice.listen_on = ChannelTransport.from_name(transport)


def prefer_backend(name: str) -> None:
    """Make ``name`` the backend of this process, and of the processes it
    starts, unless ``$MONARCH_TRANSPORT`` or ``enable_transport()`` chose one:
    a runtime's own default, which configuration still overrides."""
    if name not in BACKENDS:
        raise TransportError(f"{name!r} is not a transport; use one of {sorted(BACKENDS)}")
    with _choice.lock:
        if _choice.backend is None and not os.environ.get(BACKEND_ENV):  # empty means unset
            os.environ[BACKEND_ENV] = name


def backend_name() -> str:
    name = _choice.backend or os.environ.get(BACKEND_ENV) or "nng"
    if name not in BACKENDS:
        raise TransportError(
            f"{BACKEND_ENV}={name!r} is not a transport; use one of {sorted(BACKENDS)}"
        )
    return name


def transport_for(address: Address | str) -> Transport:
    """The backend that handles ``address``: inproc addresses stay in process."""
    address = Address.parse(address)
    name = "inproc" if address.scheme == "inproc" else backend_name()
    with _choice.lock:
        _choice.used = True
        if name not in _choice.instances:
            _choice.instances[name] = InprocTransport() if name == "inproc" else BACKENDS[name]()
        return _choice.instances[name]


def default_listen_address() -> Address:
    """A fresh address of the configured kind to listen on."""
    chosen = _choice.listen_on
    return chosen if isinstance(chosen, Address) else chosen.any_address()


async def listen(
    address: Address | str | None = None, settings: Settings | None = None
) -> Listener:
    """Listen on ``address`` (default: a fresh one of the configured kind)."""
    address = default_listen_address() if address is None else Address.parse(address)
    if address.scheme == "tcp" and address.host == "*":
        raise AddressError("listen on tcp://0.0.0.0:PORT or tcp://[::]:PORT rather than tcp://*")
    return await transport_for(address).listen(address, settings or Settings())


async def connect(address: Address | str, settings: Settings | None = None) -> Sender:
    """An authenticated connection to the listener at ``address``."""
    address = Address.parse(address)
    return await transport_for(address).connect(address, settings or Settings())
