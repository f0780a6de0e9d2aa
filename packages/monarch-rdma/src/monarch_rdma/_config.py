"""The RDMA settings: ``rdma_*`` keys in the registry of ``monarch_config``,
read from ``MONARCH_RDMA_*`` environment variables and changed with
``configure`` (here, or ``monarch.config.configure``). The configuration
reference of the docs lists them.

Backend names are checked against the registry of backends (``_backends``),
so a backend this package does not know is refused where it is configured.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
from typing import Any

import monarch_config
import monarch_rdma._backends as _backends

__all__ = ["RdmaConfig", "configure", "get_config"]

MAX_AUTO_CMA_THREADS = 8
_OWNER = "monarch-rdma"


@functools.cache
def _cores() -> int:
    return os.cpu_count() or 1  # several microseconds a call: asked once


@dataclasses.dataclass(frozen=True)
class _BackendName(monarch_config.Kind):
    """``auto`` or a registered backend's name."""

    what: str = "auto or a backend's name (ibverbs, cma, tcp, cuda_ipc)"

    def parse(self, text: str) -> str:
        """A value from an environment variable's text (see ``Kind.parse``)."""
        return self.check(text.strip().lower() or "auto")

    def check(self, value: Any) -> str:
        """The value ``configure`` stores for ``value`` (see ``Kind.check``)."""
        if not isinstance(value, str):
            raise TypeError(f"expected a backend's name, got {value!r}")
        name = value.strip().lower()
        known = _backends.names()
        if name != "auto" and name not in known:
            raise ValueError(
                f"unknown RDMA backend {value!r}: use 'auto' or one of {', '.join(known)}"
            )
        return name


def _declare(field: str, kind: monarch_config.Kind, default: Any, doc: str) -> Any:
    return monarch_config.declare(
        f"rdma_{field}",
        kind,
        default,
        env=f"MONARCH_RDMA_{field.upper()}",
        doc=doc,
        owner=_OWNER,
    )


_SETTINGS = {
    "backend": _declare(
        "backend", _BackendName(), "auto", "Force one backend for every transfer, or `auto`."
    ),
    "allow_tcp_fallback": _declare(
        "allow_tcp_fallback",
        monarch_config.Bool(),
        True,
        "Whether automatic selection may use the `tcp` backend.",
    ),
    "disable_ibverbs": _declare(
        "disable_ibverbs", monarch_config.Bool(), False, "Never use ibverbs."
    ),
    "disable_cma": _declare(
        "disable_cma",
        monarch_config.Bool(),
        False,
        "Never use same-host cross-memory attach (`process_vm_readv`/`writev`).",
    ),
    "max_chunk_size_mb": _declare(
        "max_chunk_size_mb",
        monarch_config.Int(minimum=1),
        64,
        "The largest piece, in MiB, that one request or ibverbs work request moves.",
    ),
    "tcp_streams": _declare(
        "tcp_streams",
        monarch_config.Int(minimum=1),
        2,
        "Parallel connections of a large `tcp` transfer.",
    ),
    "cma_threads": _declare(
        "cma_threads",
        monarch_config.Int(minimum=1, optional=True),
        None,
        "Threads one large same-host copy uses; unset: one per core, at most 8.",
    ),
    "huge_pages": _declare(
        "huge_pages",
        monarch_config.Bool(),
        True,
        "Back registered host memory of 8 MiB or more with huge pages.",
    ),
    "tcp_host": _declare(
        "tcp_host",
        monarch_config.Text(optional=True, what="a host name or address"),
        None,
        "Where the owner's data-plane server listens; unset: the host the actor "
        "runtime listens on, else loopback.",
    ),
    "ibverbs_device": _declare(
        "ibverbs_device",
        monarch_config.Text(optional=True, what="a device name"),
        None,
        "The RDMA device to open (`mlx5_0`, ...); unset: the first one listed.",
    ),
    "ibverbs_port": _declare(
        "ibverbs_port",
        monarch_config.Int(minimum=1),
        1,
        "The port number on that device.",
    ),
    "ibverbs_gid_index": _declare(
        "ibverbs_gid_index",
        monarch_config.Int(minimum=0, optional=True),
        None,
        "The GID table index; unset: picked on RoCE, 0 on InfiniBand.",
    ),
}


@dataclasses.dataclass(frozen=True)
class RdmaConfig:
    """The RDMA settings of one process.

    The side that starts a transfer (the reader or writer) decides the
    backend, so these settings matter in that process. ``get_config()``
    returns those in force, read from the ``MONARCH_RDMA_*`` environment
    variables, and ``configure(...)`` changes them; each argument below is
    also a ``configure`` keyword.

    Args:
        backend: ``"auto"`` to choose per transfer, or a backend that every
            transfer must use (``"ibverbs"``, ``"cma"``, ``"tcp"``,
            ``"cuda_ipc"``). ``MONARCH_RDMA_BACKEND``.
        allow_tcp_fallback: whether automatic selection may use the ``tcp``
            backend. ``MONARCH_RDMA_ALLOW_TCP_FALLBACK``.
        disable_ibverbs: never use ibverbs. ``MONARCH_RDMA_DISABLE_IBVERBS``.
        disable_cma: never use same-host cross-memory attach (``cma``).
            ``MONARCH_RDMA_DISABLE_CMA``.
        max_chunk_size_mb: the largest piece, in MiB, that one request or
            ibverbs work request moves. ``MONARCH_RDMA_MAX_CHUNK_SIZE_MB``.
        tcp_streams: how many parallel connections a large ``tcp`` transfer
            uses. ``MONARCH_RDMA_TCP_STREAMS``.
        cma_threads: how many threads one large same-host copy uses; None
            for one per core, at most 8. ``MONARCH_RDMA_CMA_THREADS``.
        huge_pages: whether an owner backs registered host memory of 8 MiB
            or more with huge pages, which speeds up same-host readers.
            ``MONARCH_RDMA_HUGE_PAGES``.
        tcp_host: the address the owner's data-plane server listens on; None
            for the host the actor runtime listens on, else loopback.
            ``MONARCH_RDMA_TCP_HOST``.
        ibverbs_device: the RDMA device to open (``"mlx5_0"`` ...); None for
            the first one listed. ``MONARCH_RDMA_IBVERBS_DEVICE``.
        ibverbs_port: the port number on that device.
            ``MONARCH_RDMA_IBVERBS_PORT``.
        ibverbs_gid_index: the GID table index to use; None to pick one (on
            RoCE) or use 0 (on InfiniBand). ``MONARCH_RDMA_IBVERBS_GID_INDEX``.

    Attributes:
        backend: ``"auto"`` or the backend every transfer uses.
        allow_tcp_fallback: whether automatic selection may use ``tcp``.
        disable_ibverbs: whether ibverbs is turned off.
        disable_cma: whether same-host cross-memory attach is turned off.
        max_chunk_size_mb: the largest piece one request moves, in MiB.
        tcp_streams: parallel connections of a large ``tcp`` transfer.
        cma_threads: threads of one large same-host copy (None: automatic).
        huge_pages: whether large registered host memory gets huge pages.
        tcp_host: the data-plane server's listening address (None: automatic).
        ibverbs_device: the RDMA device name (None: the first one).
        ibverbs_port: the port number on the RDMA device.
        ibverbs_gid_index: the GID table index (None: automatic).
    """

    backend: str = "auto"
    allow_tcp_fallback: bool = True
    disable_ibverbs: bool = False
    disable_cma: bool = False
    max_chunk_size_mb: int = 64
    tcp_streams: int = 2
    cma_threads: int | None = None  # None: one per core, at most MAX_AUTO_CMA_THREADS
    huge_pages: bool = True
    tcp_host: str | None = None
    ibverbs_device: str | None = None
    ibverbs_port: int = 1
    ibverbs_gid_index: int | None = None

    @property
    def chunk_bytes(self) -> int:
        """``max_chunk_size_mb`` in bytes."""
        return self.max_chunk_size_mb << 20

    @property
    def copy_threads(self) -> int:
        """How many threads one large same-host copy is split across."""
        if self.cma_threads is not None:
            return self.cma_threads
        return max(1, min(MAX_AUTO_CMA_THREADS, _cores()))

    @classmethod
    def from_env(cls) -> RdmaConfig:
        """The settings in force: the ``rdma_*`` keys of ``monarch.config``
        (what ``configure`` set, else the ``MONARCH_RDMA_*`` environment
        variables, else the defaults).

        Unset (or empty) variables leave the default; a flag is false when it
        is ``0``, ``false``, ``no`` or ``off``.

        Returns:
            The settings.

        Raises:
            ValueError: a variable holds no valid value (the message names it).
        """
        return cls(**{field: setting.get() for field, setting in _SETTINGS.items()})


_lock = threading.Lock()
_cached: tuple[int, RdmaConfig] | None = None


def get_config() -> RdmaConfig:
    """The settings in force in this process.

    The environment is read once; ``configure`` (this module's or
    ``monarch.config``'s) takes effect at once.

    Returns:
        The settings.
    """
    global _cached
    generation = monarch_config.generation()
    cached = _cached
    if cached is None or cached[0] != generation:
        with _lock:
            cached = (generation, RdmaConfig.from_env())
            _cached = cached
    return cached[1]


def configure(**changes: Any) -> RdmaConfig:
    """Change settings of this process, e.g. ``configure(backend="tcp")``.

    ``configure(backend="auto")`` restores automatic selection. Settings not
    named keep their value. The keywords are the fields of
    [`RdmaConfig`][monarch_rdma.RdmaConfig]; ``monarch.config.configure``
    takes the same with an ``rdma_`` prefix (``rdma_backend="tcp"``), as in
    Monarch.

    Args:
        changes: the fields to change, with their new values.

    Returns:
        The settings that were in force before, so a caller can put them
            back with ``configure(**dataclasses.asdict(old))``.

    Raises:
        TypeError: a keyword is not a setting, or a value is not of its kind.
        ValueError: a value is out of range, or the backend is not a
            registered one.
    """
    fields = {f.name for f in dataclasses.fields(RdmaConfig)}
    unknown = sorted(set(changes) - fields)
    if unknown:
        raise TypeError(f"unknown RDMA setting(s) {unknown}; known: {sorted(fields)}")
    old = get_config()
    monarch_config.configure(**{f"rdma_{name}": value for name, value in changes.items()})
    return old
