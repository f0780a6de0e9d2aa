"""One-sided RDMA buffers: ``monarch.rdma`` of Monarch in Python.

An actor registers memory as an :class:`RDMABuffer` and hands out the small
picklable buffer; any other process reads or writes that memory without the
owner's code running. Backends: ``ibverbs`` (RDMA NICs, via pyverbs),
``cma`` (same host, ``process_vm_readv``), ``tcp`` (any host), ``cuda_ipc``
(CUDA memory on one host), chosen per transfer (see :mod:`monarch_rdma`'s
docs page on backends).

>>> from monarch_rdma import RDMABuffer
>>> data = bytearray(b"hello, rdma")
>>> buffer = RDMABuffer(memoryview(data))
>>> out = bytearray(buffer.size())
>>> buffer.read_into(memoryview(out)).get()
>>> bytes(out)
b'hello, rdma'
>>> buffer.drop().get()
"""

# The built-in backends: each module registers itself with ``_backends`` on
# import, and nothing else in the package names them.
from . import _cma, _cuda_ipc, _ibverbs, _tcp  # noqa: F401  (imported to register)
from ._backend import RdmaBackend
from ._buffer import (
    RDMAAction,
    RDMABuffer,
    get_rdma_backend,
    is_ibverbs_available,
    is_rdma_available,
)
from ._config import RdmaConfig, configure, get_config
from ._errors import (
    RDMABackendUnavailable,
    RDMABufferDropped,
    RDMAError,
    RDMAOwnerGone,
    RDMAReadTransferWarning,
    RDMATcpFallbackWarning,
    RDMATimeoutError,
    RDMATransferError,
    RDMAWriteTransferWarning,
)

__all__ = [
    "RDMAAction",
    "RDMABackendUnavailable",
    "RDMABuffer",
    "RDMABufferDropped",
    "RDMAError",
    "RDMAOwnerGone",
    "RDMAReadTransferWarning",
    "RDMATcpFallbackWarning",
    "RDMATimeoutError",
    "RDMATransferError",
    "RDMAWriteTransferWarning",
    "RdmaBackend",
    "RdmaConfig",
    "configure",
    "get_config",
    "get_rdma_backend",
    "is_ibverbs_available",
    "is_rdma_available",
]

__version__ = "0.1.0"
