"""The transport's settings, declared in the registry of ``monarch_config``
(users set them with ``monarch.config.configure`` or the environment)."""

from __future__ import annotations

from typing import Final

from monarch_config import Choice, Size, Text, declare

__all__ = ["BACKEND", "INTEGRITY", "MAX_MESSAGE_SIZE", "TLS_CA", "TLS_CERT", "TLS_KEY"]

_OWNER: Final = "monarch-transport"

BACKEND = declare(
    "transport_backend",
    Text(what="a registered backend's name (socket, nng)"),
    "nng",
    env="MONARCH_TRANSPORT",
    doc="The transport backend of addresses other than `inproc://`. The actor runtime "
    "prefers `socket` unless this is set; processes it starts inherit the choice.",
    owner=_OWNER,
)
MAX_MESSAGE_SIZE = declare(
    "codec_max_frame_length",
    Size(minimum=1024),
    4 << 30,
    env=("MONARCH_MAX_MESSAGE_SIZE", "HYPERACTOR_CODEC_MAX_FRAME_LENGTH"),
    doc="The largest message a connection sends or accepts, in bytes; a larger one "
    "fails with `MessageTooLarge` at its sender.",
    owner=_OWNER,
)
INTEGRITY = declare(
    "transport_integrity",
    Choice(choices=("auto", "always", "off")),
    "auto",
    env="MONARCH_TRANSPORT_INTEGRITY",
    doc="When messages after the handshake carry an integrity tag: `auto` tags every TCP "
    "connection, loopback included, and spares TLS and Unix sockets in a folder only the "
    "job's user may enter (each end judges by its own address, never the peer's); "
    "`always` tags everything.",
    owner=_OWNER,
)
TLS_CA = declare(
    "tls_ca",
    Text(optional=True, what="a path"),
    None,
    env="HYPERACTOR_TLS_CA",
    doc="PEM file of the CA that signed the peers' certificates (`tls+tcp://` addresses).",
    owner=_OWNER,
)
TLS_CERT = declare(
    "tls_cert",
    Text(optional=True, what="a path"),
    None,
    env="HYPERACTOR_TLS_CERT",
    doc="PEM file of this side's certificate (`tls+tcp://` addresses).",
    owner=_OWNER,
)
TLS_KEY = declare(
    "tls_key",
    Text(optional=True, what="a path"),
    None,
    env="HYPERACTOR_TLS_KEY",
    doc="PEM file of this side's private key (`tls+tcp://` addresses).",
    owner=_OWNER,
)

