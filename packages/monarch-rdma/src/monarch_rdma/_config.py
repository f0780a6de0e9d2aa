"""Configuration: environment variables read once, overridable in-process.

=====================================  ==========  =========================================
variable                               default     meaning
=====================================  ==========  =========================================
``MONARCH_RDMA_BACKEND``               ``auto``    force ``ibverbs``, ``cma``, ``tcp`` or
                                                   ``cuda_ipc`` for every transfer
``MONARCH_RDMA_ALLOW_TCP_FALLBACK``    ``1``       allow the ``tcp`` backend in ``auto``
``MONARCH_RDMA_DISABLE_IBVERBS``       ``0``       never use ibverbs
``MONARCH_RDMA_DISABLE_CMA``           ``0``       never use ``process_vm_readv``
``MONARCH_RDMA_MAX_CHUNK_SIZE_MB``     ``64``      largest piece one request/WR moves
``MONARCH_RDMA_TCP_STREAMS``           ``2``       parallel connections for a large tcp transfer
``MONARCH_RDMA_CMA_THREADS``           (cores)     threads one large same-host copy uses
``MONARCH_RDMA_HUGE_PAGES``            ``1``       back large registered host memory with huge pages
``MONARCH_RDMA_TCP_HOST``              (see doc)   address the data-plane server binds to
``MONARCH_RDMA_IBVERBS_DEVICE``        first       ibverbs device name (``mlx5_0`` ...)
``MONARCH_RDMA_IBVERBS_PORT``          ``1``       port number on that device
``MONARCH_RDMA_IBVERBS_GID_INDEX``     auto        GID table index (RoCE)
=====================================  ==========  =========================================

Backend names are checked against the registry of backends (``_backends``),
so a backend this package does not know is refused where it is configured.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
from typing import Any

import monarch_rdma._backends as _backends

__all__ = ["RdmaConfig", "configure", "get_config"]

MAX_AUTO_CMA_THREADS = 8
_FALSE = {"0", "false", "no", "off", ""}


@functools.cache
def _cores() -> int:
    return os.cpu_count() or 1  # several microseconds a call: asked once


def _flag(name: str, default: bool) -> bool:
    text = os.environ.get(name)
    return default if text is None else text.strip().lower() not in _FALSE


def _int(name: str, default: int, low: int) -> int:
    text = os.environ.get(name)
    if text is None or not text.strip():
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {text!r}") from None
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return value


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
        """The settings the ``MONARCH_RDMA_*`` environment variables give.

        Unset (or empty) variables leave the default; a flag is false when it
        is ``0``, ``false``, ``no`` or ``off``.

        Returns:
            The settings, checked.

        Raises:
            ValueError: a number is malformed or too small, or the backend is
                not a registered one.
        """
        gid = os.environ.get("MONARCH_RDMA_IBVERBS_GID_INDEX")
        return _checked(
            cls(
                backend=os.environ.get("MONARCH_RDMA_BACKEND", "auto").strip().lower() or "auto",
                allow_tcp_fallback=_flag("MONARCH_RDMA_ALLOW_TCP_FALLBACK", True),
                disable_ibverbs=_flag("MONARCH_RDMA_DISABLE_IBVERBS", False),
                disable_cma=_flag("MONARCH_RDMA_DISABLE_CMA", False),
                max_chunk_size_mb=_int("MONARCH_RDMA_MAX_CHUNK_SIZE_MB", 64, 1),
                tcp_streams=_int("MONARCH_RDMA_TCP_STREAMS", 2, 1),
                cma_threads=_int("MONARCH_RDMA_CMA_THREADS", 0, 1) or None,
                huge_pages=_flag("MONARCH_RDMA_HUGE_PAGES", True),
                tcp_host=os.environ.get("MONARCH_RDMA_TCP_HOST") or None,
                ibverbs_device=os.environ.get("MONARCH_RDMA_IBVERBS_DEVICE") or None,
                ibverbs_port=_int("MONARCH_RDMA_IBVERBS_PORT", 1, 1),
                ibverbs_gid_index=int(gid) if gid and gid.strip() else None,
            )
        )


def _checked(config: RdmaConfig) -> RdmaConfig:
    known = _backends.names()
    if config.backend != "auto" and config.backend not in known:
        raise ValueError(
            f"unknown RDMA backend {config.backend!r}: use 'auto' or one of {', '.join(known)}"
        )
    if config.max_chunk_size_mb < 1 or config.tcp_streams < 1 or config.ibverbs_port < 1:
        raise ValueError("max_chunk_size_mb, tcp_streams and ibverbs_port must be >= 1")
    if config.cma_threads is not None and config.cma_threads < 1:
        raise ValueError("cma_threads must be >= 1 (or None: one per core)")
    return config


_lock = threading.Lock()
_config: RdmaConfig | None = None


def get_config() -> RdmaConfig:
    """The settings in force in this process."""
    global _config
    config = _config
    if config is None:
        with _lock:
            if _config is None:
                _config = RdmaConfig.from_env()
            config = _config
    return config


def configure(**changes: Any) -> RdmaConfig:
    """Change settings of this process, e.g. ``configure(backend="tcp")``.

    ``configure(backend="auto")`` restores automatic selection. Settings not
    named keep their value. The keywords are the fields of
    [`RdmaConfig`][monarch_rdma.RdmaConfig].

    Returns:
        The settings that were in force before, so a caller can put them
            back with ``configure(**dataclasses.asdict(old))``.

    Raises:
        TypeError: a keyword is not a setting.
        ValueError: a value is out of range, or the backend is not a
            registered one.
    """
    global _config
    fields = {f.name for f in dataclasses.fields(RdmaConfig)}
    unknown = sorted(set(changes) - fields)
    if unknown:
        raise TypeError(f"unknown RDMA setting(s) {unknown}; known: {sorted(fields)}")
    if isinstance(changes.get("backend"), str):
        changes["backend"] = changes["backend"].strip().lower()
    old = get_config()
    with _lock:
        _config = _checked(dataclasses.replace(old, **changes))
    return old
