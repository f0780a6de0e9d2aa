"""The codec: round trips, zero-copy frames, headers, __main__ code, and errors."""

from __future__ import annotations

import array
import contextlib
import doctest
import gc
import importlib.util
import json
import math
import operator
import os
import pickle
import subprocess
import sys
import textwrap
import threading
import types
import warnings
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import monarch_transport
from monarch_transport import _codec
from monarch_transport._codec import (
    CODEC_VERSION,
    DEFAULT_INLINE_THRESHOLD,
    SharedHeader,
    decode,
    decode_header,
    decode_payload,
    encode,
    frames_size,
)
from monarch_transport._errors import DecodeError, EncodeError, MessageTooLarge

MiB = 1 << 20
SRC = Path(monarch_transport.__file__).resolve().parents[1]


# -- helpers ------------------------------------------------------------------------


def assert_same(sent: Any, got: Any) -> None:
    """Equal values of the very same types, all the way down (numpy arrays included)."""
    assert type(got) is type(sent), (type(sent), type(got))
    if isinstance(sent, np.ndarray):
        assert got.dtype == sent.dtype
        assert got.shape == sent.shape
        assert np.array_equal(got, sent)
    elif isinstance(sent, dict):
        assert list(got) == list(sent)
        for key in sent:
            assert_same(sent[key], got[key])
    elif isinstance(sent, list | tuple):
        assert len(got) == len(sent)
        for a, b in zip(sent, got, strict=True):
            assert_same(a, b)
    elif isinstance(sent, memoryview):
        assert (got.format, got.shape, got.tobytes()) == (sent.format, sent.shape, sent.tobytes())
    else:
        assert got == sent


def carry(frames: list[Any], how: str) -> list[Any]:
    """The frames as a receiver might hold them: as sent, or copied into bytes/bytearrays."""
    if how == "bytes":
        return [bytes(frame) for frame in frames]
    if how == "bytearray":
        return [bytearray(frame) for frame in frames]
    return list(frames)


def address(buffer: Any) -> int:
    return int(np.frombuffer(buffer, dtype=np.uint8).__array_interface__["data"][0])


def check_frame_shapes(frames: list[Any]) -> None:
    assert type(frames[0]) is bytes
    assert frames[0][0] == CODEC_VERSION
    assert type(frames[1]) is bytes
    for frame in frames[2:]:
        assert type(frame) is memoryview
        assert (frame.format, frame.ndim, frame.c_contiguous) == ("B", 1, True)


def _decode_payload(frames: list[bytes]) -> object:
    return decode(frames)[1]


class EncodesItself:
    """Pickles its value with the codec from inside a reduction: encode re-entered."""

    def __init__(self, value: object) -> None:
        self.value = value

    def __reduce__(self) -> tuple[Any, ...]:
        return _decode_payload, ([bytes(frame) for frame in encode(self.value)],)


# -- round trips --------------------------------------------------------------------

BIG = DEFAULT_INLINE_THRESHOLD + 4000  # out-of-band at every threshold tested


def _blob(seed: bytes, size: int) -> bytes:
    return (seed * (size // len(seed) + 1))[:size]


big_bytes = st.builds(_blob, st.binary(min_size=1, max_size=8), st.integers(BIG, BIG + 3000))
arrays = st.sampled_from([np.int32, np.float64, np.uint8, np.bool_]).flatmap(
    lambda dtype: hnp.arrays(
        dtype,
        hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
        elements=st.floats(allow_nan=False, width=64) if dtype is np.float64 else None,
    )
)
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=40),
    st.binary(max_size=40).map(bytearray),
    big_bytes,
    big_bytes.map(bytearray),
    arrays,
)
payloads = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=8), children, max_size=4),
    ),
    max_leaves=12,
)


@given(
    payload=payloads,
    threshold=st.sampled_from([16, 1024, DEFAULT_INLINE_THRESHOLD]),
    how=st.sampled_from(["as sent", "bytes", "bytearray"]),
)
def test_round_trip(payload: object, threshold: int, how: str) -> None:
    header = {"seq": 3, "to": "worker/1"}
    frames = encode(payload, header, inline_threshold=threshold)
    check_frame_shapes(frames)
    got_header, got = decode(carry(frames, how))
    assert got_header == header
    assert_same(payload, got)


@given(
    sizes=st.lists(st.integers(0, 3 * DEFAULT_INLINE_THRESHOLD), max_size=4),
    kinds=st.lists(st.sampled_from([bytes, bytearray, memoryview]), min_size=4, max_size=4),
    threshold=st.sampled_from([0, 1, 100, 60_000, DEFAULT_INLINE_THRESHOLD, 200_000]),
)
def test_exactly_the_big_buffers_go_out_of_band(
    sizes: list[int], kinds: list[type[Any]], threshold: int
) -> None:
    payload = [kind(_blob(b"ab", size)) for kind, size in zip(kinds, sizes, strict=False)]
    frames = encode(payload, inline_threshold=threshold)
    check_frame_shapes(frames)
    # Per object: b"" and one-byte bytes are shared singletons, so they travel once.
    big = {id(value) for value, size in zip(payload, sizes, strict=False) if size >= threshold}
    assert len(frames) - 2 == len(big)
    assert_same(payload, decode(frames)[1])


def test_numpy_layouts_round_trip() -> None:
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    payload = {
        "c": base,
        "fortran": np.asfortranarray(base),
        "strided": base[::2, ::3],
        "readonly": np.frombuffer(bytes(16), dtype=np.int64),
        "scalar": np.float64(2.5),
        "empty": np.zeros((0, 3)),
        "objects": np.array([1, "a", None], dtype=object),
    }
    got = decode(encode(payload))[1]
    assert isinstance(got, dict)
    for key, value in payload.items():
        assert_same(value, got[key])
    assert not got["readonly"].flags.writeable


def test_memoryviews_keep_format_shape_and_writability() -> None:
    matrix = np.arange(12, dtype=np.float64).reshape(3, 4)
    ints = array.array("i", range(50_000))
    for view in [
        memoryview(matrix),  # format d, 2-D, out-of-band
        memoryview(ints),  # format i
        memoryview(bytearray(b"small")),
        memoryview(b"read only"),
        memoryview(bytes(200_000)),
        memoryview(bytearray(200_000))[::2],  # not contiguous: sent as a copy
        memoryview(matrix)[1:2],
        memoryview(np.zeros((0, 4))),  # a zero in the shape: arrives flat
        memoryview(np.zeros(3, dtype=">f8")),  # not a native format: arrives flat
    ]:
        got = decode(encode(view))[1]
        assert isinstance(got, memoryview)
        assert got.tobytes() == view.tobytes()
        assert got.readonly == view.readonly
        if view.format in ("d", "i", "B") and 0 not in (view.shape or ()):
            assert (got.format, got.shape) == (view.format, view.shape)


def test_repeated_big_values_travel_once_and_stay_one_object() -> None:
    blob = _blob(b"xyz", 100_000)
    mutable = bytearray(blob)
    frames = encode([blob, mutable, blob, mutable])
    assert len(frames) == 4
    got = decode(carry(frames, "bytearray"))[1]
    assert isinstance(got, list)
    assert got[0] is got[2] and got[1] is got[3]
    assert type(got[0]) is bytes and type(got[1]) is bytearray


def test_header_values_round_trip() -> None:
    header = {
        "none": None,
        "flag": True,
        "int": -(2**63),
        "float": 1.5,
        "str": "héllo",
        "bytes": b"\x00\xff",
        "list": [1, "two", [3.0]],
        "tuple": (1, 2),  # msgpack has no tuples: it arrives as a list
        "dict": {"nested": {"deeper": 1}},
    }
    got = decode_header(encode(None, header))
    assert got == {**header, "tuple": [1, 2]}
    assert decode_header(encode(None)) == {}
    assert decode_header(encode(None, types.MappingProxyType({"a": 1}))) == {"a": 1}
    assert decode_header(encode(None, {1: "int keys too"})) == {1: "int keys too"}


def test_encode_reentered_from_a_reduction() -> None:
    payload = [EncodesItself({"inner": [1, 2]}), EncodesItself(bytearray(100_000))]
    assert decode(encode(payload))[1] == [{"inner": [1, 2]}, bytearray(100_000)]


def test_threads_encode_concurrently() -> None:
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(200):
                payload = {"n": n, "i": i, "data": [n] * (i % 50), "blob": bytes(i * 500)}
                header, got = decode(encode(payload, {"n": n}))
                assert header == {"n": n}
                assert got == payload
        except BaseException as error:  # surfaced below: a thread cannot fail the test
            errors.append(error)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_big_messages_then_small_ones() -> None:
    # A big message retires the pickler it grew; the next messages must not notice.
    for payload in [list(range(100_000)), {"a": 1}, "x" * 200_000, (1, 2), [b"y" * 100]]:
        assert decode(encode(payload))[1] == payload


def test_small_messages_reuse_the_threads_pickler() -> None:
    encode([1, 2])
    pickler = _codec._state.picklers[_codec._PLAIN]
    encode({"a": "b"}, {"h": 1})
    assert _codec._state.picklers[_codec._PLAIN] is pickler
    encode(list(range(10_000)))  # grows the pickler: it is dropped, not kept
    assert _codec._state.picklers[_codec._PLAIN] is not pickler


def test_frames_size() -> None:
    assert frames_size([]) == 0
    assert frames_size([b"abc", bytearray(2), memoryview(np.zeros(4))]) == 3 + 2 + 32
    frames = encode(np.zeros(1000))
    assert frames_size(frames) == sum(len(bytes(frame)) for frame in frames)


def test_docstring_examples() -> None:
    assert doctest.testmod(_codec, optionflags=doctest.ELLIPSIS).failed == 0


# -- zero copy ----------------------------------------------------------------------


def test_numpy_array_is_sent_without_a_copy() -> None:
    array_ = np.arange(MiB // 8, dtype=np.float64)
    frames = encode({"weights": array_})
    assert len(frames) == 3
    assert address(frames[2]) == array_.__array_interface__["data"][0]
    assert np.shares_memory(np.frombuffer(frames[2], dtype=np.uint8), array_)


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_big_bytes_are_sent_without_a_copy(kind: type[Any]) -> None:
    data = bytearray(os.urandom(MiB))
    value = kind(data) if kind is not bytes else bytes(data)
    frames = encode(["before", value, "after"])
    assert len(frames) == 3
    assert address(frames[2]) == address(value)


def test_small_values_stay_in_band() -> None:
    payload = {
        "bytes": b"x" * 100,
        "bytearray": bytearray(1000),
        "view": memoryview(b"abc"),
        "text": "t" * 100_000,  # str is never a buffer: in-band however big
        "just_under": bytes(DEFAULT_INLINE_THRESHOLD - 1),
    }
    frames = encode(payload)
    assert len(frames) == 2
    assert_same(payload, decode(frames)[1])


def test_received_buffers_are_used_in_place() -> None:
    array_ = np.arange(1000, dtype=np.int32)
    blob = bytes(200_000)
    mutable = bytearray(200_000)
    frames = encode([array_, blob, mutable])
    wire = [bytes(frames[0]), bytes(frames[1]), bytearray(frames[2]), bytes(frames[3])]
    wire.append(bytearray(frames[4]))
    got = decode(wire)[1]
    assert isinstance(got, list)
    assert np.shares_memory(got[0], np.frombuffer(wire[2], dtype=np.uint8))
    assert got[0].flags.writeable
    assert got[1] is wire[3]
    assert got[2] is wire[4]


# -- headers without unpickling ---------------------------------------------------------


def test_header_readable_when_the_payload_cannot_be_unpickled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a module the sender imports from its sys.path (so it goes by reference),
    # and the receiver cannot find
    (tmp_path / "codec_test_vanishing_module.py").write_text("class Gone:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import codec_test_vanishing_module  # type: ignore[import-not-found]

    try:
        frames = encode(codec_test_vanishing_module.Gone(), {"route": [1, 2]})
    finally:
        del sys.modules["codec_test_vanishing_module"]
        monkeypatch.undo()
    assert decode_header(frames) == {"route": [1, 2]}
    with pytest.raises(DecodeError, match="codec_test_vanishing_module") as caught:
        decode(frames)
    assert isinstance(caught.value.__cause__, ImportError)


def test_header_readable_next_to_a_crafted_pickle() -> None:
    class Explodes:
        def __reduce__(self) -> tuple[Any, ...]:
            return operator.truediv, (1, 0)  # raises only when unpickled

    head = encode(None, {"kind": "call"})[0]
    crafted = pickle.dumps(Explodes(), protocol=5)
    assert decode_header([head, crafted]) == {"kind": "call"}
    assert decode_header([head, object()]) == {"kind": "call"}  # frames[1] never touched
    with pytest.raises(DecodeError, match="ZeroDivisionError") as caught:
        decode([head, crafted])
    assert isinstance(caught.value.__cause__, ZeroDivisionError)


# -- code defined in __main__ --------------------------------------------------------------

SENDER = """
import sys
import msgpack
from monarch_transport._codec import encode

class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def norm2(self):
        return self.x ** 2 + self.y ** 2

factor = 3
scale = lambda v: v * factor

def make_adder(n):
    def add(v):
        return v + n
    return add

payload = {"point": Point(3, 4), "cls": Point, "scale": scale, "add": make_adder(10)}
frames = encode(payload, {"from": "__main__"})
with open(sys.argv[1], "wb") as out:
    out.write(msgpack.packb([bytes(frame) for frame in frames]))
"""

RECEIVER = """
import json
import sys
import msgpack
from monarch_transport._codec import decode

with open(sys.argv[1], "rb") as source:
    frames = msgpack.unpackb(source.read())
header, payload = decode(frames)
point = payload["point"]
print(json.dumps({
    "header": header,
    "norm2": point.norm2(),
    "isinstance": isinstance(point, payload["cls"]),
    "scale": payload["scale"](5),
    "add": payload["add"](1),
    "defined_here": "Point" in globals() or "scale" in globals(),
}))
"""


def run_script(tmp_path: Path, name: str, source: str, *args: str) -> str:
    script = tmp_path / name
    script.write_text(textwrap.dedent(source))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_main_classes_functions_and_lambdas_travel_by_value(tmp_path: Path) -> None:
    message = tmp_path / "message.bin"
    run_script(tmp_path, "sender.py", SENDER, str(message))
    result = json.loads(run_script(tmp_path, "receiver.py", RECEIVER, str(message)))
    assert result == {
        "header": {"from": "__main__"},
        "norm2": 25,
        "isinstance": True,
        "scale": 15,
        "add": 11,
        "defined_here": False,
    }


def test_codec_never_imports_torch(tmp_path: Path) -> None:
    source = """
    import sys
    import numpy as np
    from monarch_transport._codec import decode, encode

    decode(encode([np.zeros(3), bytes(100_000), memoryview(b"x"), lambda: 1]))
    assert "torch" not in sys.modules, "the codec imported torch"
    """
    run_script(tmp_path, "no_torch.py", source)


# -- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "type_name"),
    [
        (threading.Lock(), "_thread.lock"),
        ((n for n in range(3)), "generator"),
        ({"deep": [1, {"lock": threading.RLock()}]}, "_thread.RLock"),
    ],
)
def test_unpicklable_values_raise_encode_error(value: object, type_name: str) -> None:
    with pytest.raises(EncodeError, match=f"type {type_name} ") as caught:
        encode({"payload": value})
    assert isinstance(caught.value, TypeError)
    assert caught.value.__cause__ is not None
    assert str(caught.value.__cause__) in str(caught.value)
    assert decode(encode([1, 2]))[1] == [1, 2]  # the failure left nothing behind


def test_too_deep_payload_raises_encode_error() -> None:
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(EncodeError, match="nested too deeply"):
        encode(deep)


@pytest.mark.parametrize(
    ("header", "where"),
    [
        ({"lock": threading.Lock()}, "header['lock']"),
        ({"ok": 1, "nested": [1, {"bad": object()}]}, "header['nested'][1]['bad']"),
        ({"big": 2**70}, "header['big']"),
        ({"set": {1, 2}}, "header['set']"),
    ],
)
def test_header_msgpack_cannot_encode_raises_encode_error(
    header: dict[str, Any], where: str
) -> None:
    with pytest.raises(EncodeError) as caught:
        encode(None, header)
    assert where in str(caught.value)
    assert caught.value.__cause__ is not None


def test_header_must_be_a_mapping() -> None:
    with pytest.raises(EncodeError, match="must be a mapping"):
        encode(None, [("a", 1)])  # type: ignore[arg-type]


def test_negative_inline_threshold_is_refused() -> None:
    with pytest.raises(ValueError, match="inline_threshold"):
        encode(b"x", inline_threshold=-1)


def test_max_size() -> None:
    payload = bytearray(100_000)
    size = frames_size(encode(payload))
    assert frames_size(encode(payload, max_size=size)) == size
    with pytest.raises(MessageTooLarge) as caught:
        encode(payload, max_size=size - 1)
    assert isinstance(caught.value, ValueError)
    assert f"{size} bytes" in str(caught.value)
    assert f"limit of {size - 1} bytes" in str(caught.value)
    assert "configurable" in str(caught.value)
    gc.collect()
    payload.append(1)  # the failed message left the buffer unexported, so resizable


HEAD = encode(None, {"a": 1})[0]
GOOD = encode({"x": np.arange(4)}, {"a": 1})


@pytest.mark.parametrize(
    ("frames", "message"),
    [
        ([], "empty message"),
        ((), "empty message"),
        (None, "sequence"),
        ([b""], "empty"),
        ([b"\x02\x80", b""], "unsupported codec version 2; this side speaks 1"),
        ([b"\x00", b""], "unsupported codec version 0; this side speaks 1"),
        ([b"\x01\xc1", b""], "msgpack"),
        ([b"\x01\x82\xa1a", b""], "msgpack"),
        ([b"\x01\x80\x80", b""], "msgpack"),  # a second object after the map
        ([b"\x01" + msgpack.packb([1, 2]), b""], "must be a msgpack map, got list"),
        ([b"\x01\x01", b""], "must be a msgpack map, got int"),
        ([HEAD], "no pickle frame"),
        ([HEAD, b""], "unpickle"),
        ([HEAD, b"garbage"], "unpickle"),
        ([HEAD, bytes(GOOD[1])[:-3], *GOOD[2:]], "unpickle"),  # truncated pickle
        (GOOD[:2], "unpickle"),  # the out-of-band buffer is missing
        ([HEAD, pickle.dumps(1)[:-1] + b"Q."], "unpickle"),  # a persistent id, unasked
        ([1, 2], "bytes-like"),
        ([HEAD, 5], "unpickle"),
        ([HEAD, GOOD[1], 5], "unpickle"),
    ],
)
def test_malformed_messages_raise_decode_error(frames: Any, message: str) -> None:
    with pytest.raises(DecodeError, match=message):
        decode(frames)


# The C unpickler grows its memo to twice the index a PUT or LONG_BINPUT names, so random
# bytes could ask it for gigabytes. Those two opcodes are mapped away; what is left is
# still garbage to the unpickler.
_NO_MEMO_PUT = bytes.maketrans(b"pr", b"NN")

frame_bytes = st.one_of(
    st.binary(max_size=64),
    st.binary(max_size=64).map(lambda data: b"\x01" + data),
    st.binary(max_size=64).map(lambda data: b"\x80\x05" + data),
).map(lambda data: data.translate(_NO_MEMO_PUT))


@given(st.lists(frame_bytes, max_size=4))
def test_random_frames_raise_decode_error_only(frames: list[bytes]) -> None:
    with contextlib.suppress(DecodeError):  # decoding garbage may also succeed
        decode(frames)


@given(st.data())
def test_corrupted_messages_raise_decode_error_only(data: st.DataObject) -> None:
    frames = [bytearray(frame) for frame in encode({"x": [1, "two", 3.0]}, {"h": 1})]
    index = data.draw(st.integers(0, len(frames) - 1))
    frame = frames[index]
    if frame:
        position = data.draw(st.integers(0, len(frame) - 1))
        frame[position] = data.draw(st.integers(0, 255))
        cut = data.draw(st.integers(0, len(frame)))
        frames[index] = bytearray(bytes(frame[:cut]).translate(_NO_MEMO_PUT))
    with contextlib.suppress(DecodeError):  # decoding garbage may also succeed
        decode(frames)


# -- torch ----------------------------------------------------------------------------------


@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch")


@pytest.mark.parametrize(
    "dtype_name", ["float32", "bfloat16", "float16", "int64", "int8", "uint8", "bool", "complex64"]
)
@pytest.mark.parametrize("how", ["as sent", "bytes", "bytearray"])
def test_tensor_round_trip(torch: Any, dtype_name: str, how: str) -> None:
    dtype = getattr(torch, dtype_name)
    tensor = (torch.arange(24) % 7).reshape(2, 3, 4).to(dtype)
    expected = tensor.clone()
    frames = encode(tensor)
    assert len(frames) == 3
    check_frame_shapes(frames)
    assert address(frames[2]) == tensor.data_ptr()  # sent without a copy
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "non-writable buffer" warning from torch
        got = decode(carry(frames, how))[1]
    assert type(got) is torch.Tensor
    assert got.dtype == dtype and got.shape == tensor.shape
    assert torch.equal(got, expected)
    # Writable. Decoding the frames as sent aliases the sender's tensor: it changes too.
    got.add_(1) if dtype_name != "bool" else got.logical_not_()
    assert not torch.equal(got, expected)


def test_tensor_received_in_place_over_a_writable_buffer(torch: Any) -> None:
    tensor = torch.arange(1000, dtype=torch.float32)
    wire = carry(encode(tensor), "bytearray")
    got = decode(wire)[1]
    assert got.data_ptr() == address(wire[2])


def test_tensor_over_a_misaligned_frame(torch: Any) -> None:
    tensor = torch.arange(100, dtype=torch.float64)
    frames = encode(tensor)
    padded = bytearray(1) + bytearray(frames[2])
    got = decode([*frames[:2], memoryview(padded)[1:]])[1]
    assert got.data_ptr() % 8 == 0
    assert torch.equal(got, tensor)


def test_tensor_shapes_and_layouts(torch: Any) -> None:
    base = torch.arange(12, dtype=torch.float64).reshape(3, 4)
    for tensor in [
        base.t(),  # not contiguous: arrives contiguous
        base[:, ::2],
        torch.tensor(3.5),  # 0-d
        torch.empty(0, 3),
        torch.tensor([1 + 2j, 3 - 4j]).conj(),  # a lazy conjugate
    ]:
        frames = encode(tensor)
        assert len(frames) == 3
        got = decode(frames)[1]
        assert got.shape == tensor.shape and got.dtype == tensor.dtype
        assert torch.equal(got, tensor.resolve_conj())
        assert got.is_contiguous()


def test_tensor_requires_grad(torch: Any) -> None:
    leaf = torch.randn(3, requires_grad=True)
    for tensor in [leaf, leaf * 2, torch.randn(2)]:
        got = decode(encode(tensor))[1]
        assert got.requires_grad == tensor.requires_grad
        assert got.is_leaf
        assert torch.equal(got, tensor.detach())


def test_tensors_torch_pickles_itself(torch: Any) -> None:
    parameter = torch.nn.Parameter(torch.ones(4))
    sparse = torch.eye(3).to_sparse()
    got = decode(encode({"parameter": parameter, "sparse": sparse}))[1]
    assert isinstance(got["parameter"], torch.nn.Parameter)
    assert torch.equal(got["parameter"].detach(), parameter.detach())
    assert torch.equal(got["sparse"].to_dense(), torch.eye(3))


def test_tensors_in_structures(torch: Any) -> None:
    a, b = torch.ones(5), torch.zeros(2, 2, dtype=torch.int32)
    payload = {"a": a, "pair": (b, [a]), "n": 1}
    frames = encode(payload)
    got = decode(frames)[1]
    assert torch.equal(got["a"], a) and torch.equal(got["pair"][0], b)
    assert torch.equal(got["pair"][1][0], a)
    assert math.isclose(float(got["a"].sum()), 5.0)


def test_two_threads_decoding_one_half_imported_package(tmp_path: Path, monkeypatch: Any) -> None:
    """Actors decode on threads of their own: a message whose decoding imports a package
    and one that needs its submodule meanwhile must not meet the package half made."""
    (tmp_path / "halfmade_gate.py").write_text(
        textwrap.dedent(
            """
            import sys
            import threading

            inside, second_done = threading.Event(), threading.Event()
            second_thread = None

            def _waiting(thread):
                # for this package, inside its submodule (with its import lock taken), or
                # for the decoder's own lock, before importing anything
                frame = sys._current_frames().get(thread.ident) if thread.ident else None
                names = set()
                while frame is not None:
                    names.add(frame.f_code.co_name)
                    frame = frame.f_back
                return "_lock_unlock_module" in names or (
                    "find_class" in names and "_find_and_load" not in names
                )

            def hold():
                # the package stays half made until the second decode waits for it,
                # or has ended (bounded: 1000 checks)
                inside.set()
                for _ in range(1000):
                    thread = second_thread
                    if second_done.is_set() or (thread and _waiting(thread)):
                        return
                    second_done.wait(0.01)
            """
        )
    )
    package = tmp_path / "halfmade"
    package.mkdir()
    (package / "__init__.py").write_text(
        "import halfmade_gate\n\nhalfmade_gate.hold()\n\n\ndef made():\n    return 'made'\n\n\n"
        "from halfmade.sub import sub  # the package imports its submodule, as torch does\n"
    )
    (package / "sub.py").write_text(
        "from halfmade import made\n\n\ndef sub():\n    return made()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("halfmade_gate", "halfmade", "halfmade.sub"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import halfmade_gate  # type: ignore[import-not-found]

    def by_name(module: str, name: str) -> list[bytes]:
        # a reference to module.name, pickled without importing it here
        data = pickle.dumps((module, name), protocol=5).replace(b"\x86", pickle.STACK_GLOBAL)
        return [encode(None)[0], data]

    results: dict[str, Any] = {}

    def decode_into(key: str, frames: list[bytes], done: threading.Event) -> None:
        try:
            results[key] = decode(frames)[1]()
        except DecodeError as error:
            results[key] = error
        done.set()

    first_done = threading.Event()
    first = threading.Thread(
        target=decode_into, args=("first", by_name("halfmade", "made"), first_done)
    )
    first.start()
    assert halfmade_gate.inside.wait(10)
    second = threading.Thread(
        target=decode_into,
        args=("second", by_name("halfmade.sub", "sub"), halfmade_gate.second_done),
    )
    halfmade_gate.second_thread = second
    second.start()
    assert first_done.wait(30) and halfmade_gate.second_done.wait(30)
    assert results == {"first": "made", "second": "made"}


def test_code_from_a_module_no_receiver_can_import_travels_by_value(tmp_path: Path) -> None:
    """A test module imported by path (pytest's importlib mode) is in sys.modules under a
    name no other process can import: its functions and classes go by value."""
    source = tmp_path / "hidden" / "by_path.py"
    source.parent.mkdir()
    source.write_text("class Box:\n    size = 3\n\ndef triple(x):\n    return x * Box.size\n")
    spec = importlib.util.spec_from_file_location("hidden_pkg.by_path", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["hidden_pkg.by_path"] = module
    try:
        spec.loader.exec_module(module)
        frames = encode((module.triple, module.Box))
    finally:
        del sys.modules["hidden_pkg.by_path"]
    probe = textwrap.dedent(
        """
        import sys
        from monarch_transport._codec import decode
        triple, box = decode([bytes.fromhex(part) for part in sys.argv[1:]])[1]
        print(triple(2), box.__name__)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, *(bytes(frame).hex() for frame in frames)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["6", "Box"]


@pytest.mark.parametrize("payload", [None, 0, [1, "two"], {"x": b"y"}, ValueError("boom")])
def test_decode_payload_is_decode_without_the_header(payload: object) -> None:
    frames = encode(payload, {"seq": 7})
    received = [memoryview(bytearray(frame)) for frame in frames]  # as a listener hands them
    for sent in (frames, received):
        expected = decode(sent)[1]
        got = decode_payload(sent)
        assert type(got) is type(expected)
        assert repr(got) == repr(expected)


def test_decode_payload_refuses_what_is_not_a_message() -> None:
    for frames in ([], [b"\x01"], 5):
        with pytest.raises(DecodeError):
            decode_payload(frames)  # type: ignore[arg-type]


# -- the fast paths of small messages --------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "plain"),
    [
        (None, True),
        (7, True),
        ("name", True),
        (((), {}), True),
        (((1, "a", 2.5, None, True), {"k": "v"}), True),
        (((1,) * 9, {}), False),  # more than a few arguments
        (((b"bytes",), {}), False),  # bytes may go out of band
        ((([1],), {}), False),  # a container: the picklers look inside
        (((), {1: 2}), True),
        (((), {object(): 2}), False),  # a key of a class the receiver may not know
        ((1, 2), False),  # a pair that is not (args, kwargs)
        (True, True),
    ],
)
def test_which_payloads_skip_the_picklers(payload: object, plain: bool) -> None:
    assert _codec._plain(payload) is plain
    assert decode(encode(payload))[1] == payload or not plain


def test_a_call_with_a_lambda_argument_still_travels_by_value() -> None:
    frames = encode(((lambda x: x + 1,), {}))
    (fn,), _ = decode(frames)[1]
    assert fn(1) == 2


def test_plain_payloads_keep_the_size_limit() -> None:
    with pytest.raises(MessageTooLarge):
        encode("x" * 1000, max_size=100)


def test_a_shared_header_reads_as_the_merged_header() -> None:
    shared = SharedHeader({"op": "call", "a": "actor-1", "s": [["gpus"], 0, [8], [1]]})
    for branch in range(3):
        extra = {"b": [branch, branch + 1], "d": [f"ipc:///p{branch}"], "sq": [branch]}
        merged = {"op": "call", "a": "actor-1", "s": [["gpus"], 0, [8], [1]], **extra}
        frames = [shared.frame(extra), b"payload"]
        assert decode_header(frames) == merged
        assert decode_header([memoryview(bytearray(frames[0]))]) == merged
    assert decode_header([SharedHeader({}).frame({"x": 1})]) == {"x": 1}
    big = {f"k{i}": i for i in range(40)}
    assert decode_header([SharedHeader(big).frame({"z": 0})]) == {**big, "z": 0}


def test_each_read_of_a_shared_header_is_a_dict_of_its_own() -> None:
    shared = SharedHeader({"a": "x"})
    first = decode_header([shared.frame({"n": 1})])
    first["a"] = "changed"
    assert decode_header([shared.frame({"n": 2})]) == {"a": "x", "n": 2}


def test_the_shared_parts_a_receiver_keeps_are_bounded() -> None:
    _codec._shared_seen.clear()
    for i in range(_codec._SHARED_KEPT + 10):
        decode_header([SharedHeader({"i": i}).frame({})])
    assert 0 < len(_codec._shared_seen) <= _codec._SHARED_KEPT
    _codec._shared_seen.clear()
    huge = {"blob": "x" * (2 * _codec._SHARED_MOST)}
    assert decode_header([SharedHeader(huge).frame({"n": 1})]) == {**huge, "n": 1}
    assert not _codec._shared_seen  # read, not kept


@pytest.mark.parametrize(
    "frame",
    [
        bytes([CODEC_VERSION | 0x80]),  # no length
        bytes([CODEC_VERSION | 0x80]) + (50).to_bytes(4, "little") + b"\x81",  # cut short
        bytes([CODEC_VERSION | 0x80]) + (1).to_bytes(4, "little") + b"\x01" + b"\x80",  # not a map
        bytes([CODEC_VERSION | 0x80])
        + (1).to_bytes(4, "little")
        + b"\x80"
        + b"\xc1",  # bad msgpack
    ],
)
def test_a_broken_two_part_header_is_a_decode_error(frame: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_header([frame])


def test_a_shared_header_names_what_msgpack_cannot_encode() -> None:
    with pytest.raises(EncodeError, match="'bad'"):
        SharedHeader({"ok": 1}).frame({"bad": object()})
