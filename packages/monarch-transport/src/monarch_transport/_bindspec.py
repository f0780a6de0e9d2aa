"""Where a process listens by default: Monarch's ``default_transport`` setting
and ``BindSpec``, the value it holds (a kind of channel or an exact address)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from monarch_config import Kind, declare

from ._address import _FORMS, Address, ChannelTransport
from ._errors import AddressError

__all__ = ["DEFAULT_TRANSPORT", "BindSpec"]


_BIND_NAMES = {
    "tcp": ChannelTransport.TcpWithHostname,
    "unix": ChannelTransport.Unix,
    "local": ChannelTransport.Local,
}


class BindSpec:
    """Where a process listens by default, as Monarch's ``default_transport``
    setting holds it: a kind of channel (a ``ChannelTransport``) or an exact
    address.

    Args:
        spec: a ``ChannelTransport``; one of Monarch's names ``"tcp"`` (this
            host's name), ``"unix"``, ``"local"``; or an address
            (``"tcp://127.0.0.1:0"``, ``"ipc:///tmp/a.sock"``, ``"unix:/tmp/a.sock"``).

    Raises:
        TypeError: ``spec`` is neither a ``ChannelTransport`` nor a str.
        AddressError: ``spec`` is a str that names no kind and is no address
            (``AddressError`` is a ``ValueError``).

    Examples:
        >>> BindSpec("tcp") == BindSpec(ChannelTransport.TcpWithHostname)
        True
        >>> BindSpec("tcp://127.0.0.1:8080")
        BindSpec('tcp://127.0.0.1:8080')
    """

    __slots__ = ("target",)
    target: ChannelTransport | Address
    """The kind of channel, or the exact address."""

    def __init__(self, spec: ChannelTransport | str) -> None:
        if isinstance(spec, ChannelTransport):
            target: ChannelTransport | Address = spec
        elif not isinstance(spec, str):
            raise TypeError(
                f"expected a ChannelTransport or a str (a kind or an address), "
                f"got {type(spec).__name__} {spec!r}"
            )
        elif spec.strip().lower() in _BIND_NAMES:
            target = _BIND_NAMES[spec.strip().lower()]
        elif spec.startswith("unix:") and not spec.startswith("unix://"):
            if not spec[5:]:
                raise AddressError(f"invalid bind spec {spec!r}: unix:PATH needs a path")
            target = Address("ipc", path=spec[5:])
        elif "://" in spec:
            try:
                target = Address.parse(spec)
            except AddressError as error:
                raise AddressError(f"invalid bind spec {spec!r}: {error}") from None
        else:
            raise AddressError(
                f"invalid bind spec {spec!r}: use a ChannelTransport, one of "
                f"{', '.join(map(repr, _BIND_NAMES))}, or an address ({_FORMS})"
            )
        object.__setattr__(self, "target", target)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("BindSpec is immutable")

    def listen_address(self) -> Address:
        """The address a listener binds: a fresh one of the kind (ephemeral
        port, unique path), or the exact address."""
        target = self.target
        return target.any_address() if isinstance(target, ChannelTransport) else target

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BindSpec) and other.target == self.target

    def __hash__(self) -> int:
        return hash(self.target)

    def __repr__(self) -> str:
        target = self.target
        if isinstance(target, ChannelTransport):
            return f"BindSpec(ChannelTransport.{target.name})"
        return f"BindSpec({str(target)!r})"

    def __reduce__(self) -> tuple[type[BindSpec], tuple[ChannelTransport | str]]:
        target = self.target
        return (BindSpec, (target if isinstance(target, ChannelTransport) else str(target),))


@dataclass(frozen=True)
class _BindSpecKind(Kind):
    """A ``BindSpec``: ``configure`` takes a ``ChannelTransport``, a name or an address."""

    what: str = "a ChannelTransport, 'tcp', 'unix', 'local' or an address"

    def parse(self, text: str) -> BindSpec:
        return BindSpec(text.strip())

    def check(self, value: Any) -> BindSpec:
        return value if isinstance(value, BindSpec) else BindSpec(value)


DEFAULT_TRANSPORT = declare(
    "default_transport",
    _BindSpecKind(),
    BindSpec(ChannelTransport.Unix),
    env="HYPERACTOR_MESH_DEFAULT_TRANSPORT",
    doc="Where this process and the procs spawned afterwards listen when nothing else "
    'says: a kind of channel (`ChannelTransport.Unix`, `"tcp"` for this host\'s name, '
    '`ChannelTransport.TcpWithLocalhost`, `"local"`) or an exact address (give port 0, '
    "as every proc that inherits it binds it). `enable_transport(...)` in a process, and a "
    "worker's `MONARCH_LISTEN_ADDRESS` for its procs, take precedence; listeners already "
    "open stay where they are. `get_global_config()` shows it as a `BindSpec`.",
    owner="monarch-transport",
)
