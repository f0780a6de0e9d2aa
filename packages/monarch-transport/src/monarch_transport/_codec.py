"""The codec: a payload and a header in, a list of frames out, and back.

A message is a list of frames (buffers), so that big binary values travel
without first being copied into one contiguous blob:

* ``frames[0]``: one codec version byte, then the header as msgpack. Routers
  read it with :func:`decode_header` without unpickling anything. A header
  made by :class:`SharedHeader` comes in two parts instead: the part many
  messages share, packed once, and the message's own entries.
* ``frames[1]``: the payload's pickle stream: protocol 5, written by
  cloudpickle's pickler, so that classes and functions defined in ``__main__``,
  lambdas and closures travel by value.
* ``frames[2:]``: out-of-band buffers, as flat unsigned-byte memoryviews over
  the sender's own memory: numpy arrays, torch CPU tensors (when the sender has
  imported torch), and ``bytes``, ``bytearray`` and ``memoryview`` values of at
  least ``inline_threshold`` bytes. Nothing is copied on the send side, so the
  sender must leave those objects alone until the frames have been sent.

CUDA tensors travel by value (see ``_cuda``): copied once into pinned host memory
and sent out-of-band like a CPU tensor, or, with ``same_host=True`` where every
process of the host sees the same GPU, as a CUDA IPC handle to a snapshot that
the receiver copies device to device.

Decoded values sit on the received buffers where they can (numpy arrays,
memoryviews, tensors over a writable buffer): decode a list of frames once, and
copy a value before handing it to code that must not share it.

Unpickling runs code chosen by the sender: decode only frames from peers that
have authenticated.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import io
import pickle
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pickle import PickleBuffer
from types import FunctionType
from typing import Any, Final

import cloudpickle  # type: ignore[import-untyped]
import msgpack  # type: ignore[import-untyped]

from ._buffers import bytes_of
from ._cuda import reduce_cuda_tensor, release_unsent
from ._errors import DecodeError, EncodeError, MessageTooLarge

__all__ = [
    "CODEC_VERSION",
    "DEFAULT_INLINE_THRESHOLD",
    "decode",
    "decode_header",
    "decode_payload",
    "encode",
    "encode_header",
    "frames_size",
]

CODEC_VERSION: Final = 1
"""The version byte that starts every header frame; a peer that speaks another refuses it."""

DEFAULT_INLINE_THRESHOLD: Final = 64 * 1024
"""Bytes-like values this big or bigger travel out-of-band, as frames of their own."""

_PROTOCOL: Final = 5
_VERSION_PREFIX: Final = bytes([CODEC_VERSION])
_EMPTY_HEADER_FRAME: Final[bytes] = _VERSION_PREFIX + msgpack.packb({})

# CPython's C pickler streams a bytes-like value of FRAME_SIZE_TARGET (64 KiB) bytes or
# more to the file as a chunk of its own, right after a chunk that ends with the value's
# opcode and length. That lets the fast pass spot big inline bytes without a hook that
# runs for every object (see _holds_large_bytes).
_STREAMED_SIZE: Final = 64 * 1024
_BINBYTES: Final = ord(pickle.BINBYTES)
_BINBYTES8: Final = ord(pickle.BINBYTES8)
_BYTEARRAY8: Final = ord(pickle.BYTEARRAY8)

# The two kinds of pickler, as indexes into _ThreadState.picklers and _PICKLER_TYPES.
_PLAIN: Final = 0
_BUFFERED: Final = 1

# A pickler is reused for the next message only after a stream this small (see
# _Pickler.retired); making a fresh one costs about as much as pickling 1 KiB.
_REUSE_LIMIT: Final = 1024

# The persistent-id kinds of out-of-band bytes and bytearray values.
_BYTES: Final = 0
_BYTEARRAY: Final = 1

# memoryview.cast accepts only native single-character formats, so only views with one
# of these keep their format and shape across the wire; others arrive as flat bytes.
_CASTABLE_FORMATS: Final = frozenset(
    [*"cbBhHiIlLqQnNfd?P", *(f"@{char}" for char in "cbBhHiIlLqQnNfd?P")]
)

_cloudpickle_reducer_override = cloudpickle.Pickler.reducer_override
_pickler_dump = pickle.Pickler.dump
_unpackb = msgpack.unpackb

# Resolved lazily: torch is optional and never imported here; once the process has
# imported it, the Tensor type is looked up once and kept.
_tensor_type: type[Any] | None = None
_torch_dtype_names: dict[Any, str] = {}


def encode(
    payload: object,
    header: Mapping[str, Any] | None = None,
    *,
    max_size: int | None = None,
    inline_threshold: int = DEFAULT_INLINE_THRESHOLD,
    same_host: bool | Callable[[], bool] = False,
) -> list[bytes | memoryview]:
    """Encode ``payload`` and ``header`` into frames: ``[header, pickle, *buffers]``.

    The header must hold only what msgpack encodes (None, bool, int, float, str,
    bytes, and lists, tuples and dicts of these; tuples arrive as lists); it
    stays readable without unpickling. The payload may be anything cloudpickle
    can pickle. Out-of-band frames share memory with the payload's objects.

    Args:
        payload: the value to send; anything cloudpickle can pickle.
        header: what a router reads without unpickling (msgpack values only);
            ``None`` for an empty header.
        max_size: the largest total size of the frames, in bytes; ``None`` for no
            limit.
        inline_threshold: bytes-like values of this many bytes or more travel
            out-of-band, as frames of their own.
        same_host: the message has exactly one destination, another process on
            this host: CUDA tensors may then travel as CUDA IPC handles (when
            ``cuda_ipc`` is on and every process of the host sees the same GPU)
            instead of being staged through host memory. Say it only when true:
            a receiver elsewhere cannot open the handles and fails to decode.
            A function saying so is asked only if the payload holds a CUDA
            tensor, keeping the check off the path of every other message.

    Returns:
        The frames: the header frame, the pickle frame, then any out-of-band buffers.

    Raises:
        EncodeError: the header holds a value msgpack cannot encode, or the payload
            cannot be pickled.
        MessageTooLarge: the frames add up to more than ``max_size`` bytes.
        ValueError: ``inline_threshold`` is negative.

    Examples:
        >>> frames = encode({"x": 1}, {"to": "actor"})
        >>> len(frames), decode(frames)
        (2, ({'to': 'actor'}, {'x': 1}))
    """
    global _tensor_type
    if inline_threshold < 0:
        raise ValueError(f"inline_threshold must be >= 0 bytes, got {inline_threshold}")
    state = _state
    frames: list[bytes | memoryview] = [_encode_header(header, state.packer)]
    if _plain(payload):  # nothing for the picklers' hooks to do: the C pickler alone
        frames.append(_dumps(payload, _PROTOCOL))
        if max_size is not None:
            _check_size(frames, max_size)
        return frames
    if _tensor_type is None and "torch" in sys.modules:
        _tensor_type = getattr(sys.modules["torch"], "Tensor", None)
    tensor_type = _tensor_type

    # The plain pickler first: it has no hook for bytes, which is right unless a
    # big one turns up. Below _STREAMED_SIZE it could not tell, so it is skipped.
    kind = _PLAIN if inline_threshold >= _STREAMED_SIZE else _BUFFERED
    picklers = state.picklers
    # The CUDA tensors reduced so far, by id: a second pass reuses them rather than
    # copy and share each again (see _reduce_tensor).
    cuda_reduced: dict[int, tuple[Any, tuple[Any, ...]]] = {}
    try:
        while True:
            pickler = picklers[kind]
            if pickler is None or pickler.busy:  # busy: encode called from inside a reduction
                pickler = _PICKLER_TYPES[kind]()
                if picklers[kind] is None:
                    picklers[kind] = pickler
            try:
                if pickler.run(
                    frames, payload, inline_threshold, tensor_type, same_host, cuda_reduced
                ):
                    break
            finally:
                if pickler.retired and picklers[kind] is pickler:
                    picklers[kind] = None
            kind = _BUFFERED
        if max_size is not None:
            _check_size(frames, max_size)
    except BaseException:
        if cuda_reduced:  # never sent: let go of the blocks shared for a receiver
            release_unsent([reduced for _, reduced in cuda_reduced.values()])
        raise
    return frames


_SCALARS: Final = frozenset({type(None), bool, int, float, str})
_dumps = pickle.dumps


def _plain(payload: object) -> bool:
    """Whether ``payload`` is a scalar, or a call's ``(args, kwargs)`` of a few
    scalars: the most common messages (replies of None or a number, calls
    with an index or a name), which every pickler writes the same."""
    kind = type(payload)
    if kind in _SCALARS:
        return True
    if kind is not tuple:
        return False
    pair: tuple[Any, ...] = payload  # type: ignore[assignment]
    if len(pair) != 2:
        return False
    args, kwargs = pair
    if type(args) is not tuple or type(kwargs) is not dict or len(args) + len(kwargs) > 8:
        return False
    scalars = _SCALARS
    for arg in args:
        if type(arg) not in scalars:
            return False
    for key, value in kwargs.items():
        if type(key) not in scalars or type(value) not in scalars:
            return False
    return True


def encode_header(header: Mapping[str, Any]) -> bytes:
    """The header frame alone, for a router that forwards a message with a new
    header and the same payload frames (nothing is pickled again).

    Args:
        header: the new header (msgpack values only).

    Returns:
        The header frame: the codec version byte, then the header as msgpack.

    Raises:
        EncodeError: ``header`` is not a mapping, or holds a value msgpack cannot
            encode.

    Examples:
        >>> frames = encode([1, 2], {"hop": 0})
        >>> decode([encode_header({"hop": 1}), *frames[1:]])
        ({'hop': 1}, [1, 2])
    """
    return _encode_header(header, _state.packer)


class SharedHeader:
    """The entries many headers share, packed once: the branches of one
    multicast differ in a few entries only. ``frame(extra)`` is a header
    frame of the shared entries and ``extra``'s that ``decode_header`` reads
    as their merge. It carries the shared part as it was packed, and a
    receiver unpacks a shared part it has seen before only once: every
    process of a broadcast gets the same one, message after message.

    Args:
        header: the shared entries (msgpack values only).

    Raises:
        EncodeError: as ``encode_header``.

    Examples:
        >>> shared = SharedHeader({"to": "actor"})
        >>> decode_header([shared.frame({"hop": 1})])
        {'to': 'actor', 'hop': 1}
    """

    __slots__ = ("_head", "_header")

    def __init__(self, header: Mapping[str, Any]) -> None:
        packer = _state.packer
        self._header = header
        packed = _encode_header(header, packer)[1:] if header else packer.pack({})
        self._head = _SHARED_PREFIX + len(packed).to_bytes(4, "little") + packed

    def frame(self, extra: Mapping[str, Any]) -> bytes:
        """The header frame of the shared entries and ``extra``'s.

        Args:
            extra: this message's own entries (keys that are not among the
                shared ones; msgpack values only).

        Returns:
            The header frame, for ``frames[0]`` of a message.

        Raises:
            EncodeError: ``extra`` holds a value msgpack cannot encode.
        """
        try:
            own: bytes = _state.packer.pack(dict(extra))
        except Exception:  # the error encode_header gives, naming the culprit
            _encode_header({**self._header, **extra}, _state.packer)
            raise
        return self._head + own


# A header frame in two parts: this byte, the shared part's length (4 bytes,
# little-endian), the shared part, then the message's own entries.
_SHARED_PREFIX: Final = bytes([CODEC_VERSION | 0x80])
_SHARED_KEPT: Final = 4096  # shared parts a receiver keeps unpacked, each ...
_SHARED_MOST: Final = 4096  # ... of at most this many bytes
_shared_seen: dict[bytes, dict[str, Any]] = {}


def _decode_shared(data: bytes | memoryview) -> dict[str, Any]:
    """The header of a frame ``SharedHeader`` made (``data`` after the first byte)."""
    size = int.from_bytes(data[:4], "little")
    if len(data) < 4 + size:
        raise DecodeError(f"the header's shared part of {size} bytes is cut short")
    shared = bytes(data[4 : 4 + size])
    try:
        base = _shared_seen.get(shared)
        if base is None:
            base = _unpackb(shared, strict_map_key=False)
            if type(base) is dict and size <= _SHARED_MOST:
                if len(_shared_seen) >= _SHARED_KEPT:
                    _shared_seen.clear()
                _shared_seen[shared] = base
        own = _unpackb(data[4 + size :], strict_map_key=False)
    except Exception as error:
        raise DecodeError(
            f"the header frame does not hold valid msgpack ({_describe(error)})"
        ) from error
    if type(base) is not dict or type(own) is not dict:
        raise DecodeError("the header's parts must be msgpack maps")
    # a new dict each time; values are shared with the kept base, and no
    # reader changes a received header's values in place
    return {**base, **own}


def decode_header(frames: Sequence[bytes | bytearray | memoryview]) -> dict[str, Any]:
    """The header of a message, read from ``frames[0]`` alone: nothing is unpickled.

    Args:
        frames: a message's frames, as ``encode`` made them.

    Raises:
        DecodeError: the message is empty, its codec version is not
            ``CODEC_VERSION``, or its header is not a msgpack map.

    Examples:
        >>> decode_header(encode(object(), {"seq": 7}))
        {'seq': 7}
    """
    try:
        frame = frames[0]
    except IndexError:
        raise DecodeError(
            "cannot decode an empty message: it has no frames; a message is a header "
            "frame, a pickle frame, then any out-of-band buffers"
        ) from None
    except Exception as error:
        raise DecodeError(
            f"frames must be a sequence of bytes-like objects, got {type(frames).__name__}"
        ) from error
    try:
        data = frame if type(frame) is bytes else memoryview(frame).cast("B")
        version = data[0]
    except IndexError:
        raise DecodeError(
            "the header frame is empty; it must start with the codec version byte"
        ) from None
    except Exception as error:
        raise DecodeError(
            f"the header frame must be a contiguous bytes-like object, got {type(frame).__name__}"
        ) from error
    if version == _SHARED_PREFIX[0]:
        return _decode_shared(data[1:])
    if version != CODEC_VERSION:
        raise DecodeError(
            f"unsupported codec version {version}; this side speaks {CODEC_VERSION} "
            "(were the peers built from different releases?)"
        )
    try:
        # strict_map_key=False: int and bytes keys round-trip, as msgpack packed them.
        header = _unpackb(data[1:], strict_map_key=False)
    except Exception as error:
        raise DecodeError(
            f"the header frame does not hold valid msgpack ({_describe(error)})"
        ) from error
    if type(header) is not dict:
        raise DecodeError(f"the header must be a msgpack map, got {type(header).__name__}")
    return header


def decode(frames: Sequence[bytes | bytearray | memoryview]) -> tuple[dict[str, Any], object]:
    """Decode frames made by ``encode`` into ``(header, payload)``.

    Values sent out-of-band come back as the types sent, on the received buffers
    where the type allows it: numpy arrays and memoryviews always, tensors and
    bytearrays when the frame is writable, bytes when the frame is ``bytes``.

    Unpickling runs code chosen by the sender: decode only frames from
    authenticated peers.

    Args:
        frames: a message's frames, as ``encode`` made them.

    Returns:
        The header and the payload.

    Raises:
        DecodeError: the frames are not a valid message, or the payload cannot be
            unpickled here (for example, it needs a module this process cannot
            import). No other exception is raised.
    """
    header = decode_header(frames)
    return header, decode_payload(frames)


def decode_payload(frames: Sequence[bytes | bytearray | memoryview]) -> object:
    """The payload of a message whose header was read already (``decode_header``):
    ``decode(frames)[1]`` without reading the header a second time.

    Unpickling runs code chosen by the sender: decode only frames from
    authenticated peers.

    Args:
        frames: the message's frames, as ``encode`` made them (the header frame
            first; it is skipped).

    Returns:
        The payload.

    Raises:
        DecodeError: the frames hold no pickle frame, or the payload cannot be
            unpickled here. No other exception is raised.

    Examples:
        >>> decode_payload(encode([1, 2], {"seq": 7}))
        [1, 2]
    """
    try:
        count = len(frames)
    except TypeError:
        raise DecodeError(
            f"frames must be a sequence of bytes-like objects, got {type(frames).__name__}"
        ) from None
    if count < 2:
        raise DecodeError(
            "the message has a header frame but no pickle frame; a message is a header "
            "frame, a pickle frame, then any out-of-band buffers"
        )
    try:
        data = frames[1]
        if count == 2 and type(data) is memoryview and data.nbytes <= _COPIED_PICKLE_SIZE:
            data = data.tobytes()  # a received frame: a small copy buys the fast path
        payload = _NOT_LOADED
        if count == 2 and type(data) is not memoryview and _STACK_GLOBAL not in data:
            try:
                payload = pickle.loads(data)  # nothing to import: the fastest path
            except Exception:  # say, a persistent id: the unpickler of messages tells
                payload = _NOT_LOADED
        if payload is _NOT_LOADED:
            payload = _Unpickler(io.BytesIO(data), buffers=frames[2:]).load()
    except DecodeError:  # a rebuild's own words (a CUDA tensor where there is no CUDA)
        raise
    except Exception as error:  # a corrupt stream can raise almost anything
        raise DecodeError(
            f"cannot unpickle the payload ({_describe(error)}); the frames are "
            "corrupt or incomplete, or the payload needs a module this process cannot import"
        ) from error
    return payload


def frames_size(frames: Iterable[bytes | bytearray | memoryview]) -> int:
    """The total size of ``frames`` in bytes, as they go on the wire.

    >>> frames_size([b"ab", bytearray(3), memoryview(b"xyz")])
    8
    """
    total = 0
    for frame in frames:
        total += frame.nbytes if type(frame) is memoryview else len(frame)
    return total


# -- encoding -------------------------------------------------------------------------


def _encode_header(header: Mapping[str, Any] | None, packer: Any) -> bytes:
    if header is None:
        return _EMPTY_HEADER_FRAME
    if type(header) is not dict:
        if not isinstance(header, Mapping):
            raise EncodeError(
                f"the header must be a mapping of str keys to msgpack values, "
                f"got {type(header).__name__}"
            )
        header = dict(header)  # msgpack packs only real dicts as maps
    if not header:
        return _EMPTY_HEADER_FRAME
    try:
        packed: bytes = packer.pack(header)
    except Exception as error:
        where, culprit = _find_unpackable(header, "header", packer)
        raise EncodeError(
            f"cannot encode the header: msgpack cannot encode {where}, of type "
            f"{_type_name(culprit)} ({_describe(error)}); headers hold only None, bool, int, "
            "float, str, bytes, and lists, tuples and dicts of these: put other values in "
            "the payload"
        ) from error
    return _VERSION_PREFIX + packed


def _find_unpackable(value: object, where: str, packer: Any, depth: int = 0) -> tuple[str, object]:
    """The path to, and the value of, the innermost part of ``value`` msgpack refuses."""
    if depth < 32:  # a self-referencing container would otherwise recurse forever
        if isinstance(value, dict):
            for key, item in value.items():
                if not _packs(key, packer):
                    return f"{where} key {key!r}", key
                if not _packs(item, packer):
                    return _find_unpackable(item, f"{where}[{key!r}]", packer, depth + 1)
        elif isinstance(value, list | tuple):
            for index, item in enumerate(value):
                if not _packs(item, packer):
                    return _find_unpackable(item, f"{where}[{index}]", packer, depth + 1)
    return where, value


def _packs(value: object, packer: Any) -> bool:
    try:
        packer.pack(value)
    except Exception:
        return False
    return True


def _check_size(frames: list[bytes | memoryview], max_size: int) -> None:
    size = frames_size(frames)
    if size > max_size:
        # Release the views now, so the payload's buffers are not left exported (and a
        # bytearray left unresizable) while the caller handles the error.
        for frame in frames[2:]:
            if type(frame) is memoryview:
                frame.release()
        raise MessageTooLarge(
            f"the message is {size} bytes, above the limit of {max_size} bytes; send "
            "less per message, or raise the limit (max_size is configurable)"
        )


def _holds_large_bytes(chunks: list[bytes | bytearray], threshold: int) -> bool:
    """Whether the fast pass wrote a bytes or bytearray of ``threshold`` bytes or more inline.

    Only the C pickler's streamed chunks need checking: ``threshold`` is at least
    the size from which every bytes-like value is streamed as a chunk of its own.
    A false alarm costs a second pass, never a wrong message.
    """
    for index in range(1, len(chunks)):
        size = len(chunks[index])
        if size >= threshold:
            before = chunks[index - 1]
            if (
                len(before) >= 5
                and before[-5] == _BINBYTES
                and int.from_bytes(before[-4:], "little") == size
            ) or (
                len(before) >= 9
                and before[-9] in (_BINBYTES8, _BYTEARRAY8)
                and int.from_bytes(before[-8:], "little") == size
            ):
                return True
    return False


class _Sink:
    """A write-only file whose ``write`` is a list's ``append``: no copy, no Python frame."""

    __slots__ = ("write",)

    def __init__(self, chunks: list[bytes | bytearray]) -> None:
        self.write = chunks.append


class _Pickler(cloudpickle.Pickler):  # type: ignore[misc]
    """cloudpickle's pickler, writing chunks to a list, with the codec's own reductions.

    One per thread is kept and reused: setting up a pickler costs more than
    pickling a typical small message.
    """

    def __init__(self) -> None:
        self.chunks: list[bytes | bytearray] = []
        self.buffers: list[PickleBuffer] = []
        self.threshold = DEFAULT_INLINE_THRESHOLD
        self.tensor_type: type[Any] | None = None
        self.same_host: bool | Callable[[], bool] = False
        self.cuda_reduced: dict[int, tuple[Any, tuple[Any, ...]]] | None = None
        # The last object handed to reducer_override: the one that failed, when one does.
        self.current: object = None
        self.busy = False
        self.streams_large_bytes = True  # whether big bytes values may land inline
        # Set once the pickler has grown (its memo table, its output buffer) on a big
        # message: clearing and refilling those would slow every later message down.
        self.retired = False
        super().__init__(
            _Sink(self.chunks), protocol=_PROTOCOL, buffer_callback=self.buffers.append
        )

    def run(
        self,
        frames: list[bytes | memoryview],
        payload: object,
        threshold: int,
        tensor_type: type[Any] | None,
        same_host: bool | Callable[[], bool] = False,
        cuda_reduced: dict[int, tuple[Any, tuple[Any, ...]]] | None = None,
    ) -> bool:
        """Pickle ``payload``, appending the stream and the out-of-band buffers to ``frames``.

        Returns False, appending nothing, when a bytes or bytearray of
        ``threshold`` bytes or more went inline (only the plain pickler lets that
        happen): the caller then pickles again with a _BufferPickler.
        """
        self.busy = True
        self.threshold = threshold
        self.tensor_type = tensor_type
        self.same_host = same_host
        self.cuda_reduced = cuda_reduced
        chunks = self.chunks
        buffers = self.buffers
        try:
            try:
                _pickler_dump(self, payload)  # not cloudpickle's wrapper: we report recursion
            except Exception as error:
                self.retired = True
                raise _pickling_error(payload, self.current, error) from error
            if len(chunks) > 1 or len(chunks[0]) > _REUSE_LIMIT:
                self.retired = True
            first = chunks[0]
            if len(chunks) == 1 and type(first) is bytes:
                frames.append(first)
            elif self.streams_large_bytes and _holds_large_bytes(chunks, threshold):
                return False
            else:
                frames.append(b"".join(chunks))
            for buffer in buffers:
                frames.append(buffer.raw())
            return True
        finally:
            # Drop every reference to the payload, ready for the next message.
            chunks.clear()
            buffers.clear()
            self.clear_memo()
            if self.globals_ref:  # cloudpickle's per-dump map of function globals
                self.globals_ref.clear()
            self.current = None
            self.cuda_reduced = None
            self.busy = False

    def reducer_override(self, obj: Any) -> Any:
        self.current = obj
        cls = type(obj)
        if cls is memoryview:
            return _reduce_memoryview(obj, self.threshold)
        if cls is self.tensor_type:
            reduced = _reduce_tensor(obj, self.same_host, self.cuda_reduced)
            if reduced is not None:
                return reduced
        if cls is FunctionType or isinstance(obj, type):
            module = obj.__module__
            if module not in _importable:
                _by_value_if_unimportable(module)
        return _cloudpickle_reducer_override(self, obj)


# Receivers import a class or function by its module's name, on their sys.path
# (processes of a job share the controller's). A module loaded from a file that no
# sys.path entry reaches (a pytest test module imported by path) cannot be imported
# that way: it travels by value instead, as __main__ does. Decided once per module.
_importable: dict[str | None, bool] = {None: True, "__main__": False}


def _by_value_if_unimportable(name: str) -> None:
    top = name.partition(".")[0]
    found = top in sys.builtin_module_names or (
        importlib.machinery.PathFinder.find_spec(top, sys.path) is not None
    )
    _importable[name] = found
    module = sys.modules.get(name)
    if not found and module is not None:
        cloudpickle.register_pickle_by_value(module)


class _BufferPickler(_Pickler):
    """The pickler that also sends big ``bytes`` and ``bytearray`` values out-of-band.

    The C pickler writes exact bytes and bytearray objects itself, before
    reducer_override could see them; only persistent_id comes first. That hook
    runs for every object, so this pickler runs only when the fast one found
    such a value, or when the threshold is too low for the fast one to notice.
    """

    def __init__(self) -> None:
        self.pids: dict[int, tuple[int, PickleBuffer]] = {}
        super().__init__()
        self.streams_large_bytes = False

    def persistent_id(self, obj: Any) -> Any:
        cls = type(obj)
        if (cls is bytes or cls is bytearray) and len(obj) >= self.threshold:
            pid = self.pids.get(id(obj))
            if pid is None:
                # One pid per object: the pickler memoizes it, so a value referenced
                # twice travels once and arrives as one object.
                pid = self.pids[id(obj)] = (
                    _BYTES if cls is bytes else _BYTEARRAY,
                    PickleBuffer(obj),
                )
            return pid
        return None

    def run(
        self,
        frames: list[bytes | memoryview],
        payload: object,
        threshold: int,
        tensor_type: type[Any] | None,
        same_host: bool | Callable[[], bool] = False,
        cuda_reduced: dict[int, tuple[Any, tuple[Any, ...]]] | None = None,
    ) -> bool:
        try:
            return super().run(frames, payload, threshold, tensor_type, same_host, cuda_reduced)
        finally:
            self.pids.clear()


def _pickling_error(payload: object, culprit: object, error: Exception) -> EncodeError:
    if isinstance(error, RecursionError) or isinstance(error.__cause__, RecursionError):
        return EncodeError(
            f"cannot pickle the payload, of type {_type_name(payload)}: it is nested too "
            f"deeply ({_describe(error)}); flatten it, or send it in parts"
        )
    if culprit is None:
        culprit = payload
    return EncodeError(
        f"cannot pickle a value of type {_type_name(culprit)} in the payload "
        f"({_describe(error)}); make that type picklable (define __reduce__, or "
        "__getstate__ and __setstate__), or leave it out of the message"
    )


def _describe(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _type_name(value: object) -> str:
    cls = type(value)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _reduce_memoryview(view: memoryview, threshold: int) -> tuple[Any, ...]:
    layout = None
    shape = view.shape or ()
    if (
        (view.format != "B" or view.ndim != 1)
        and view.format in _CASTABLE_FORMATS
        and 0 not in shape  # memoryview.cast refuses zeros in a shape
    ):
        layout = (view.format, shape)
    data: object
    if view.nbytes >= threshold and view.c_contiguous:
        data = PickleBuffer(view)  # out-of-band, without a copy, read-only if the view is
    elif view.readonly:
        data = view.tobytes()
    else:
        data = bytearray(view)  # keeps it writable on the other side
    return _rebuild_memoryview, (data, layout)


def _reduce_tensor(
    tensor: Any,
    same_host: bool | Callable[[], bool] = False,
    cuda_reduced: dict[int, tuple[Any, tuple[Any, ...]]] | None = None,
) -> tuple[Any, ...] | None:
    """A torch CPU tensor as raw bytes out-of-band, a CUDA tensor staged or by IPC
    handle (see ``_cuda``), or None to let torch pickle it.

    ``cuda_reduced`` remembers the CUDA reductions of one ``encode`` across its
    pickling passes: each costs a device copy, and an IPC share that no message
    carries would keep its block in torch's limbo for good.
    """
    torch = sys.modules["torch"]
    if tensor.layout != torch.strided or tensor.is_quantized or tensor.is_nested:
        return None
    if tensor.is_cuda:
        if cuda_reduced is not None:
            seen = cuda_reduced.get(id(tensor))
            if seen is not None:
                return seen[1]
        reduced = reduce_cuda_tensor(tensor, _dtype_name(tensor.dtype), same_host)
        if cuda_reduced is not None:
            cuda_reduced[id(tensor)] = (tensor, reduced)  # the tensor keeps its id unique
        return reduced
    if not tensor.is_cpu:
        return None
    try:
        # Viewing as uint8 lets numpy carry every dtype, bfloat16 included; detach and
        # contiguous copy only when the tensor is not already a plain dense block.
        flat = (
            tensor.detach()
            .resolve_conj()
            .resolve_neg()
            .contiguous()
            .reshape(-1)
            .view(torch.uint8)
            .numpy()
        )
    except (RuntimeError, TypeError, ValueError):  # numpy missing, or an exotic dtype
        return None
    name = _dtype_name(tensor.dtype)
    return _rebuild_tensor, (PickleBuffer(flat), name, tuple(tensor.shape), tensor.requires_grad)


def _dtype_name(dtype: Any) -> str:
    """A torch dtype's name in the torch module (``torch.float32`` -> ``"float32"``)."""
    name = _torch_dtype_names.get(dtype)
    if name is None:
        name = _torch_dtype_names[dtype] = str(dtype).removeprefix("torch.")
    return name


# -- decoding -------------------------------------------------------------------------
#
# Pickle streams name _rebuild_memoryview, _rebuild_tensor and the persistent-id kinds:
# changing them breaks the wire format, and calls for a new CODEC_VERSION.


# Two threads importing one package at once can break it: to get out of a lock cycle
# between a package and its submodule, CPython hands one thread the half-made module
# ("cannot import name ... from partially initialized module"). Actors decode what
# they receive on threads of their own, so two spawns arriving together (an actor whose
# class uses torch, and monarch-tensor's worker) would import torch twice at once: every
# import an unpickler makes holds this lock. A module already imported needs no lock.
_import_lock = threading.RLock()
_STACK_GLOBAL: Final = pickle.STACK_GLOBAL  # the opcode that imports (protocol 4 and up)
# A received pickle frame this small is copied to bytes to be unpickled by
# pickle.loads, without an unpickler object and a file around it.
_COPIED_PICKLE_SIZE: Final = 4096
_NOT_LOADED: Final = object()  # no payload yet (None is a payload)
_subimport = cloudpickle.cloudpickle.subimport


def _locked_subimport(name: str) -> Any:
    with _import_lock:
        return _subimport(name)


def _imported(module: str) -> bool:
    loaded = sys.modules.get(module)
    spec = getattr(loaded, "__spec__", None)
    return loaded is not None and not getattr(spec, "_initializing", False)


class _Unpickler(pickle.Unpickler):
    """The unpickler of messages: out-of-band buffers, persistent ids, imports one at a time."""

    def __init__(self, file: io.BytesIO, *, buffers: Iterable[Any]) -> None:
        super().__init__(file, buffers=buffers)
        self.loaded: dict[int, tuple[object, object]] = {}

    def find_class(self, module: str, name: str) -> Any:
        if _imported(module):
            found = super().find_class(module, name)
        else:
            with _import_lock:
                found = super().find_class(module, name)
        return _locked_subimport if found is _subimport else found

    def persistent_load(self, pid: Any) -> Any:
        # Keyed by the pid object, which the cache keeps alive so its id stays unique.
        seen = self.loaded.get(id(pid))
        if seen is not None:
            return seen[1]
        kind, buffer = pid
        value: bytes | bytearray
        if kind == _BYTES:
            # a frame received into a bytes object of its own is that object
            value = buffer if type(buffer) is bytes else bytes_of(memoryview(buffer))
        elif kind == _BYTEARRAY:
            value = buffer if type(buffer) is bytearray else bytearray(buffer)
        else:
            raise pickle.UnpicklingError(f"unknown persistent id kind {kind!r}")
        self.loaded[id(pid)] = (pid, value)
        return value


def _rebuild_memoryview(data: Any, layout: tuple[str, tuple[int, ...]] | None) -> memoryview:
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    if layout is not None:
        fmt: Any = layout[0]  # typeshed's cast overloads take only literal formats
        view = view.cast(fmt, layout[1])
    return view


def _rebuild_tensor(data: Any, dtype_name: str, shape: tuple[int, ...], requires_grad: bool) -> Any:
    if _imported("torch"):
        torch = sys.modules["torch"]
    else:
        with _import_lock:
            torch = importlib.import_module("torch")
    dtype = getattr(torch, dtype_name, None)
    if not isinstance(dtype, torch.dtype):
        raise pickle.UnpicklingError(f"{dtype_name!r} is not a torch dtype")
    view = memoryview(data)
    if view.nbytes == 0:
        tensor = torch.empty(shape, dtype=dtype)
    else:
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        # torch warns about, and must not write through, a read-only buffer: copy it.
        buffer = bytearray(view) if view.readonly else view
        tensor = torch.frombuffer(buffer, dtype=torch.uint8)
        if tensor.data_ptr() % dtype.itemsize:
            tensor = tensor.clone()  # a frame at an odd offset: kernels expect alignment
        tensor = tensor.view(dtype).reshape(shape)
    if requires_grad:
        tensor.requires_grad_(True)
    return tensor


class _ThreadState(threading.local):
    """Each thread's packer and picklers, made on first use and then reused."""

    def __init__(self) -> None:
        self.packer = msgpack.Packer()
        self.picklers: list[_Pickler | None] = [None, None]  # by kind: _PLAIN, _BUFFERED


_PICKLER_TYPES: Final[tuple[type[_Pickler], type[_Pickler]]] = (_Pickler, _BufferPickler)


_state = _ThreadState()
