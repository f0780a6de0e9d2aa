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
    """Settings of this process (the reading/writing side decides the backend)."""

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
        return self.max_chunk_size_mb << 20

    @property
    def copy_threads(self) -> int:
        """How many threads one large same-host copy is split across."""
        if self.cma_threads is not None:
            return self.cma_threads
        return max(1, min(MAX_AUTO_CMA_THREADS, _cores()))

    @classmethod
    def from_env(cls) -> RdmaConfig:
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
    """Change settings of this process, e.g. ``configure(backend="tcp")``;
    ``configure(backend="auto")`` restores automatic selection. Returns the
    settings that were in force before, so a caller can put them back with
    ``configure(**dataclasses.asdict(old))``. Unknown names raise ``TypeError``."""
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
