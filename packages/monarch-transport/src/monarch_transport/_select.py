"""Which backend and which kind of address a process uses: configuration,
never user code. ``$MONARCH_TRANSPORT`` (a registered backend's name, such
as ``nng`` or ``socket``) picks the backend; ``enable_transport(...)`` may
pick it, or the kind of address to listen on, before the first connection
is made. Backends come from the registry (``_registry``)."""

from __future__ import annotations

import os
import threading

from ._address import Address, ChannelTransport
from ._bindspec import DEFAULT_TRANSPORT
from ._config import BACKEND
from ._errors import AddressError
from ._interface import Listener, Sender, Transport
from ._registry import backend_class, choosable, scheme_owner
from ._settings import Settings

__all__ = [
    "connect",
    "default_listen_address",
    "enable_transport",
    "listen",
    "prefer_backend",
    "transport_for",
]

BACKEND_ENV = BACKEND.env[0]  # prefer_backend sets it, so that started processes inherit


class _Choice:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.backend: str | None = None
        self.listen_on: ChannelTransport | Address | None = None  # None: default_transport
        self.used = False
        self.instances: dict[type[Transport], Transport] = {}


_choice = _Choice()


def enable_transport(transport: ChannelTransport | str) -> None:
    """Choose, before any connection is made, the backend or where to listen.

    Call it first thing in a script. Each call sets one choice: a backend, or
    the address listeners use by default; a later call overrides the same choice.

    Args:
        transport: a registered backend's name (``"nng"``, ``"socket"``), the kind
            of address to listen on (a ``ChannelTransport``, ``"tcp"``,
            ``"ipc"``/``"unix"``, ``"local"``) or an exact address to listen on
            (``"tcp://0.0.0.0:8080"``).

    Raises:
        RuntimeError: a connection or listener was made already.
        TypeError: ``transport`` is neither a ``ChannelTransport`` nor a str.
        AddressError: ``transport`` is neither a backend, an address nor a kind
            of address.
    """
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
        elif transport in choosable():
            _choice.backend = transport
        elif "://" in transport:
            _choice.listen_on = Address.parse(transport)
        else:
            try:
                _choice.listen_on = ChannelTransport.from_name(transport)
            except AddressError as error:
                raise AddressError(
                    f"{error}; or a transport backend, one of {choosable()}"
                ) from None


def prefer_backend(name: str) -> None:
    """Make ``name`` the backend of this process, and of the processes it
    starts, unless ``$MONARCH_TRANSPORT`` or ``enable_transport()`` chose one:
    a runtime's own default, which configuration still overrides.

    It sets ``$MONARCH_TRANSPORT``, which started processes inherit.

    Args:
        name: a registered backend's name.

    Raises:
        TransportError: ``name`` is not a backend configuration may choose, even
            when configuration chose another one.
    """
    backend_class(name)  # an unknown name is an error even when configuration wins
    with _choice.lock:
        if _choice.backend is None and not os.environ.get(BACKEND_ENV):  # empty means unset
            os.environ[BACKEND_ENV] = name


def _configured() -> type[Transport]:
    if _choice.backend is not None:
        return backend_class(_choice.backend)
    name = BACKEND.get()
    source = BACKEND_ENV if os.environ.get(BACKEND_ENV) == name else BACKEND.name
    return backend_class(name, named_by=f"{source}=")


def transport_for(address: Address | str) -> Transport:
    """The backend that handles ``address``: inproc addresses stay in process.

    Other addresses go to the configured backend (``enable_transport``, else
    ``$MONARCH_TRANSPORT``, else ``nng``). There is one instance per backend
    class, made on first use; after this call ``enable_transport`` refuses.

    Args:
        address: the address, or its text.

    Raises:
        AddressError: ``address`` does not parse.
        TransportError: the configured backend is not registered.
    """
    address = Address.parse(address)
    cls = scheme_owner(address.scheme) or _configured()
    with _choice.lock:
        _choice.used = True
        if cls not in _choice.instances:
            _choice.instances[cls] = cls()
        return _choice.instances[cls]


def default_listen_address() -> Address:
    """A fresh address of the configured kind to listen on.

    The kind is what ``enable_transport`` chose, else the ``default_transport``
    setting (a Unix socket by default), with an ephemeral port or a unique path; an
    exact address chosen there is returned as is.
    """
    chosen = _choice.listen_on
    if chosen is None:
        return DEFAULT_TRANSPORT.get().listen_address()
    return chosen if isinstance(chosen, Address) else chosen.any_address()


async def listen(
    address: Address | str | None = None, settings: Settings | None = None
) -> Listener:
    """Listen on ``address`` (default: a fresh one of the configured kind).

    Args:
        address: where to listen; ``None`` for ``default_listen_address``.
            Port 0 binds an ephemeral port: read it from ``listener.address``.
        settings: the secret, limits and TLS files; ``None`` for ``Settings()``.

    Returns:
        The listener; ``async with`` closes it.

    Raises:
        AddressError: ``address`` does not parse, or is ``tcp://*``.
        ConnectError: the address cannot be bound.
    """
    address = default_listen_address() if address is None else Address.parse(address)
    if address.scheme == "tcp" and address.host == "*":
        raise AddressError("listen on tcp://0.0.0.0:PORT or tcp://[::]:PORT rather than tcp://*")
    return await transport_for(address).listen(address, settings or Settings())


async def connect(address: Address | str, settings: Settings | None = None) -> Sender:
    """An authenticated connection to the listener at ``address``.

    Args:
        address: the listener's address, or its text.
        settings: the secret, limits and TLS files; ``None`` for ``Settings()``.

    Returns:
        The sender; ``async with`` closes it.

    Raises:
        AddressError: ``address`` does not parse.
        ConnectError: nothing listens at ``address``.
        AuthenticationError: the handshake failed (for example, the listener holds
            another job's secret).
    """
    address = Address.parse(address)
    return await transport_for(address).connect(address, settings or Settings())
