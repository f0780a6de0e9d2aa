"""CUDA tensors in messages, by value, at device speed.

The codec hands every dense CUDA tensor of a payload to :func:`reduce_cuda_tensor`,
which picks one of two ways:

* **CUDA IPC** (same host): the tensor is copied device to device into a block
  of its own (a snapshot only the message holds, so later writes by the sender
  never show), and the message carries that block's IPC handle, through torch's
  own ``torch.multiprocessing.reductions.reduce_tensor``. Torch records an
  interprocess event on the sender's current stream and keeps the block alive,
  in its cross-process reference-counted "limbo", until the receiver has let go.
  The receiver waits for that event on its current stream, copies the block
  device to device into an allocation of its own and drops the mapping
  (torch then synchronizes that stream and releases the sender's block).
  Allowed only when the encoder says every destination is another process of
  this host (``encode(..., same_host=True)``, which the actor runtime sets),
  ``cuda_ipc`` is on, and every process of the host sees the same GPU (the host
  has exactly one: ``MONARCH_HOST_GPUS`` is 1, or, where it is unset, this
  process sees one GPU). Each IPC handle is opened by one receiver: a message
  for several receivers must be staged (the actor runtime asks for IPC only for
  a message with one destination).
* **Staged** (anywhere): one copy device to pinned host memory, synchronized on
  an event recorded on the tensor's device's current stream, sent out-of-band as
  raw bytes like a CPU tensor; the receiver copies it to ``cuda:<i>`` (the
  sender's index, where it exists, else its current device).

Either way the receiver gets a contiguous tensor of the same dtype, shape and
``requires_grad``. A receiver without CUDA fails with an error that says so.
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
from collections.abc import Callable
from pickle import PickleBuffer
from typing import Any, Final

from ._config import CUDA_IPC, HOST_GPUS
from ._errors import DecodeError

__all__ = ["counts", "cuda_ipc_allowed", "reduce_cuda_tensor", "release_unsent"]

_log = logging.getLogger("monarch.transport.cuda")

# How many CUDA tensors this process sent and received each way: tests read them to
# check which path a message took. Counted under a lock: several threads encode.
_counts: dict[str, int] = {"ipc_sent": 0, "staged_sent": 0, "ipc_received": 0, "staged_received": 0}
_counts_lock = threading.Lock()
_warned_ipc_failure = False

# Same lock discipline as the codec's unpickler: one thread imports a package at a time.
_import_lock = threading.RLock()

_IPC_OFF_HINT: Final = (
    "set MONARCH_CUDA_IPC=0 (or monarch.config.configure(cuda_ipc=False)) to stage "
    "CUDA tensors through host memory instead"
)


def counts() -> dict[str, int]:
    """How many CUDA tensors this process has sent and received by each path.

    Returns:
        A copy of the counters ``ipc_sent``, ``staged_sent``, ``ipc_received`` and
        ``staged_received``.
    """
    with _counts_lock:
        return dict(_counts)


def _count(key: str) -> None:
    with _counts_lock:
        _counts[key] += 1


def cuda_ipc_allowed() -> bool:
    """Whether a CUDA tensor for another process of this host may travel by CUDA IPC.

    True when the ``cuda_ipc`` setting (``MONARCH_CUDA_IPC``) is on and every
    process of this host sees the same GPU: the ``host_gpus`` setting
    (``MONARCH_HOST_GPUS``, which the runtime sets in the processes it starts) is
    1, or, where it is unset, this process sees exactly one GPU. A process pinned
    to one GPU of several (``CUDA_VISIBLE_DEVICES``) cannot open another GPU's
    memory, so several GPUs on the host mean the staged path.

    Raises:
        ValueError: ``MONARCH_CUDA_IPC`` or ``MONARCH_HOST_GPUS`` holds an invalid value.
    """
    if not CUDA_IPC.get():
        return False
    gpus = HOST_GPUS.get()
    if gpus is None:
        torch = sys.modules.get("torch")
        if torch is None:
            return False
        gpus = torch.cuda.device_count()  # cached by torch; creates no CUDA context
    return bool(gpus == 1)


# -- sending ---------------------------------------------------------------------------


def reduce_cuda_tensor(
    tensor: Any, dtype_name: str, same_host: bool | Callable[[], bool]
) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """The pickle reduction of a dense CUDA tensor: by IPC handle or staged bytes.

    Args:
        tensor: a strided, non-quantized CUDA ``torch.Tensor``.
        dtype_name: its dtype's name in the ``torch`` module (``"float32"``).
        same_host: the encoder's word that every destination of the message is
            another process on this host, and that there is only one (or a
            function saying so, asked only when a CUDA tensor is met).

    Returns:
        ``(rebuild, args)`` for the pickler.
    """
    global _warned_ipc_failure
    torch = sys.modules["torch"]
    here = same_host() if callable(same_host) else same_host
    if here and tensor.numel() and cuda_ipc_allowed():
        try:
            reduced = _reduce_ipc(torch, tensor)
        except RuntimeError as error:
            # Some allocations cannot be shared (expandable segments on old drivers, a
            # pluggable allocator): staging is always correct, only slower. Said once.
            if not _warned_ipc_failure:
                _warned_ipc_failure = True
                _log.warning(
                    "a CUDA tensor on %s could not be shared by CUDA IPC (%s); such tensors "
                    "are staged through host memory instead",
                    tensor.device,
                    error,
                )
        else:
            _count("ipc_sent")
            return reduced
    reduced = _reduce_staged(torch, tensor, dtype_name)
    _count("staged_sent")
    return reduced


def release_unsent(reductions: list[tuple[Any, ...]]) -> None:
    """Let go of the blocks shared by CUDA IPC for a message that will not be sent.

    A shared block stays in torch's limbo until its receiver releases it; a message
    that failed to encode has no receiver, so its sender releases it instead, as
    a receiver would.

    Args:
        reductions: ``reduce_cuda_tensor`` results of the failed message; staged
            ones need nothing and are skipped.
    """
    for rebuild, args in reductions:
        if rebuild is not _rebuild_cuda_ipc:
            continue
        torch = sys.modules["torch"]
        shared = args[0]  # reduce_tensor's arguments for rebuild_cuda_tensor
        try:
            torch.UntypedStorage._release_ipc_counter(shared[11], shared[12], device=shared[6])
        except Exception as error:  # best effort, as torch's own receivers do
            _log.warning("could not release a CUDA IPC block of an unsent message: %s", error)


def _plain(tensor: Any) -> Any:
    # A conjugate or negative view is materialized: the bytes must hold the values.
    return tensor.detach().resolve_conj().resolve_neg()


def _reduce_ipc(torch: Any, tensor: Any) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    reduce_tensor = importlib.import_module("torch.multiprocessing.reductions").reduce_tensor
    source = _plain(tensor)
    with torch.cuda.device(source.device):
        # A block only the message holds: sharing the sender's own storage would let
        # its later writes show on the receiver (which copies when it decodes, maybe
        # much later), and would wrap the user's storage in torch's IPC bookkeeping.
        # On the current stream, after the writes queued there that made the tensor.
        snapshot = torch.empty(source.shape, dtype=source.dtype, device=source.device)
        snapshot.copy_(source)
        # Records an interprocess event on the current stream (the receiver waits for
        # it) and hands the block to torch's reference counts: when `snapshot` dies at
        # the end of encoding, the block waits in torch's limbo until the receiver
        # releases it.
        _, args = reduce_tensor(snapshot)
    return _rebuild_cuda_ipc, (tuple(args), bool(tensor.requires_grad))


def _reduce_staged(
    torch: Any, tensor: Any, dtype_name: str
) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    source = _plain(tensor)
    if not source.is_contiguous():
        source = source.contiguous()  # on the device, where it is cheap
    device = source.device
    nbytes = source.numel() * source.element_size()
    data: object = b""
    if nbytes:
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        with torch.cuda.device(device):
            stream = torch.cuda.current_stream(device)
            # Pinned memory: the copy runs at full bus speed and needs no staging copy.
            host.copy_(source.reshape(-1).view(torch.uint8), non_blocking=True)
            done = torch.cuda.Event()
            done.record(stream)
            done.synchronize()  # only this copy and what came before it on the stream
        # The numpy view keeps `host` alive until the frames have been sent.
        data = PickleBuffer(host.numpy())
    return _rebuild_cuda_staged, (
        data,
        dtype_name,
        tuple(tensor.shape),
        bool(tensor.requires_grad),
        device.index,
    )


# -- receiving -------------------------------------------------------------------------
#
# Pickle streams name _rebuild_cuda_staged and _rebuild_cuda_ipc: renaming them, or
# changing their arguments, breaks the wire format and calls for a new CODEC_VERSION.


def _torch() -> Any:
    torch = sys.modules.get("torch")
    spec = getattr(torch, "__spec__", None)
    if torch is None or getattr(spec, "_initializing", False):
        with _import_lock:
            torch = importlib.import_module("torch")
    return torch


def _no_cuda(torch: Any, sent_from: str) -> DecodeError:
    return DecodeError(
        f"a CUDA tensor (on {sent_from} in the sending process) arrived in a process where "
        f"CUDA is not available (torch {torch.__version__}, "
        f"{'built without CUDA' if torch.version.cuda is None else 'no GPU visible'}); "
        "send tensor.cpu() instead, or receive it in a process that has a GPU"
    )


def _target_device(torch: Any, index: int | None) -> Any:
    """``cuda:<index>`` where this process has it, else its current CUDA device."""
    sent_from = "cuda" if index is None else f"cuda:{index}"
    if not torch.cuda.is_available():
        raise _no_cuda(torch, sent_from)
    if index is not None and 0 <= index < torch.cuda.device_count():
        return torch.device("cuda", index)
    return torch.device("cuda", torch.cuda.current_device())


def _dtype(torch: Any, dtype_name: str) -> Any:
    dtype = getattr(torch, dtype_name, None)
    if not isinstance(dtype, torch.dtype):
        raise DecodeError(f"{dtype_name!r} is not a torch dtype")
    return dtype


def _rebuild_cuda_staged(
    data: Any,
    dtype_name: str,
    shape: tuple[int, ...],
    requires_grad: bool,
    device_index: int | None,
) -> Any:
    torch = _torch()
    dtype = _dtype(torch, dtype_name)
    device = _target_device(torch, device_index)
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    if view.nbytes == 0:
        tensor = torch.empty(shape, dtype=dtype, device=device)
    else:
        # torch must not write through, and warns about, a read-only buffer: copy it
        # (the copy to the device below would read it once either way).
        host = torch.frombuffer(bytearray(view) if view.readonly else view, dtype=torch.uint8)
        # A blocking copy: the tensor holds its values when the rebuild returns, on
        # whatever stream the receiver then uses.
        tensor = host.to(device).view(dtype).reshape(shape)
    if requires_grad:
        tensor.requires_grad_(True)
    _count("staged_received")
    return tensor


def _rebuild_cuda_ipc(args: tuple[Any, ...], requires_grad: bool) -> Any:
    torch = _torch()
    sent_from = f"cuda:{args[6]}"  # reduce_tensor's storage_device
    if not torch.cuda.is_available():
        raise _no_cuda(torch, sent_from)
    rebuild_cuda_tensor = importlib.import_module(
        "torch.multiprocessing.reductions"
    ).rebuild_cuda_tensor
    try:
        # Waits, on this device's current stream, for the event the sender recorded.
        mapped = rebuild_cuda_tensor(*args)
    except Exception as error:
        raise DecodeError(
            f"cannot open the CUDA IPC handle of a tensor sent from {sent_from} of another "
            f"process on this host ({type(error).__name__}: {error}); both processes must see "
            f"that GPU, and the sender must still be running: {_IPC_OFF_HINT}"
        ) from error
    try:
        with torch.cuda.device(mapped.device):
            # By value: an allocation of our own, so neither side's later writes show
            # on the other. Same stream as the event wait, so it reads finished data.
            tensor = mapped.clone(memory_format=torch.contiguous_format)
    finally:
        # Dropping the mapping synchronizes the stream (the copy is done), then lets
        # the sender's block go.
        del mapped
    if requires_grad:
        tensor.requires_grad_(True)
    _count("ipc_received")
    return tensor
