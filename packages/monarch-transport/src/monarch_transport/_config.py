"""The transport's settings, declared in the registry of ``monarch_config``
(users set them with ``monarch.config.configure`` or the environment)."""

from __future__ import annotations

from typing import Final

from monarch_config import Bool, Choice, Int, Size, Text, declare

__all__ = [
    "BACKEND",
    "CUDA_IPC",
    "HOST_GPUS",
    "INTEGRITY",
    "MAX_MESSAGE_SIZE",
    "TLS_CA",
    "TLS_CERT",
    "TLS_KEY",
]

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

CUDA_IPC = declare(
    "cuda_ipc",
    Bool(),
    True,
    env="MONARCH_CUDA_IPC",
    doc="Whether a CUDA tensor sent to another process on the same host travels as a CUDA "
    "IPC handle (the receiver copies it device to device) when every process of the host "
    "sees the same GPU; off, or otherwise, it is staged through pinned host memory.",
    owner=_OWNER,
)
HOST_GPUS = declare(
    "host_gpus",
    Int(minimum=0, optional=True, what="a number of GPUs"),
    None,
    env="MONARCH_HOST_GPUS",
    doc="How many GPUs this process's host has (set by the runtime in the processes it "
    "starts, which may each see only their own GPU). CUDA IPC between processes of a host "
    "is used only when it has exactly one; unset, the GPUs this process sees are counted.",
    owner=_OWNER,
)
