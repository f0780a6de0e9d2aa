"""One process: validation, Monarch's errors, pickling, batches, atomics,
and every host-memory backend against a buffer this process owns."""

import ctypes
import pickle
import socket
import warnings

import pytest

import monarch_rdma
from monarch_rdma import RDMAAction, RDMABuffer, RDMABufferDropped

DST_SMALL = r"destination local memory size \(16\) must be >= remote buffer size \(32\)"
SRC_BIG = r"source local memory size \(64\) must be <= remote buffer size \(32\)"
SHAPE = "RDMABuffer only supports 1d contiguous torch.Tensor or 1d c-contiguous memoryview"


def make(size, start=0):
    data = bytearray((start + i) % 251 for i in range(size))
    return data, RDMABuffer(memoryview(data))


def test_public_names():
    for name in (
        "RDMABuffer", "RDMAAction", "is_rdma_available", "is_ibverbs_available",
        "get_rdma_backend", "RDMAReadTransferWarning", "RDMAWriteTransferWarning",
        "RDMATcpFallbackWarning",
    ):  # fmt: skip
        assert name in monarch_rdma.__all__
    assert issubclass(monarch_rdma.RDMATcpFallbackWarning, Warning)


def test_availability_without_hardware():
    assert monarch_rdma.is_ibverbs_available() is False
    assert monarch_rdma.get_rdma_backend() == "tcp"
    with pytest.warns(DeprecationWarning, match="is_rdma_available is deprecated"):
        assert monarch_rdma.is_rdma_available() is False


@pytest.mark.parametrize(
    "bad",
    [
        memoryview(bytearray(8)).cast("B", (2, 4)),
        memoryview(bytearray(8))[::2],
        b"not a view",
        [1, 2, 3],
    ],
    ids=["2d", "strided", "bytes", "list"],
)
def test_shape_errors(bad):
    with pytest.raises(ValueError, match=SHAPE):
        RDMABuffer(bad)


def test_size_and_empty():
    with pytest.raises(ValueError, match=r"^Cannot create RDMABuffer with size 0\.$"):
        RDMABuffer(memoryview(bytearray(0)))
    _, buffer = make(32)
    assert buffer.size() == 32
    assert (
        memoryview(bytearray(32)).cast("f").nbytes
        == RDMABuffer(memoryview(bytearray(32)).cast("f")).size()
    )


def test_monarch_size_errors_and_timeouts():
    _, buffer = make(32)
    with pytest.raises(ValueError, match=DST_SMALL):
        buffer.read_into(memoryview(bytearray(16)))
    with pytest.raises(ValueError, match=SRC_BIG):
        buffer.write_from(memoryview(bytearray(64)))
    with pytest.raises(OverflowError, match="unsigned 64-bit"):
        buffer.read_into(memoryview(bytearray(32)), timeout=-1)
    with pytest.raises(TypeError):
        buffer.read_into(memoryview(bytearray(32)), timeout=1.5)
    with pytest.raises(ValueError, match="read-only"):
        buffer.read_into(memoryview(bytes(32)))


def test_offsets_are_bounds_checked():
    _, buffer = make(100)
    with pytest.raises(ValueError, match="read of 10 bytes at offset 95 is out of bounds"):
        buffer.read_into(memoryview(bytearray(10)), offset=95)
    with pytest.raises(ValueError, match="write of 10 bytes at offset 91 is out of bounds"):
        buffer.write_from(memoryview(bytearray(10)), offset=91)
    with pytest.raises(ValueError, match="offset must be >= 0"):
        buffer.read_into(memoryview(bytearray(10)), offset=-1)
    with pytest.raises(TypeError):
        buffer.read_into(memoryview(bytearray(10)), offset="3")


def test_readonly_buffer_reads_but_refuses_writes():
    buffer = RDMABuffer(memoryview(b"constant bytes"))
    out = bytearray(buffer.size())
    buffer.read_into(memoryview(out)).get()
    assert out == b"constant bytes"
    with pytest.raises(ValueError, match="read-only memory"):
        buffer.write_from(memoryview(b"x"))


@pytest.mark.parametrize("backend", ["cma", "tcp"], indirect=True)
@pytest.mark.parametrize("size", [1, 7, 70_000, (3 << 20) + 5])
def test_round_trip_in_one_process(backend, size):
    data, buffer = make(size)
    assert buffer.backend == backend
    out = bytearray(size + 3)  # larger: the prefix is filled
    buffer.read_into(memoryview(out)).get(timeout=30)
    assert out[:size] == data and out[size:] == b"\0\0\0"
    new = bytes((i * 7) % 256 for i in range(size // 2 + 1))
    buffer.write_from(memoryview(new)).get(timeout=30)
    assert data[: len(new)] == new
    if size > 3:
        piece = bytearray(size - 3)
        buffer.read_into(memoryview(piece), offset=3).get(timeout=30)
        assert piece == data[3:]
        buffer.write_from(memoryview(b"\xff\xfe"), offset=size - 2).get(timeout=30)
        assert data[-2:] == b"\xff\xfe"
    buffer.drop().get()


@pytest.mark.parametrize("backend", ["cma", "tcp"], indirect=True)
def test_dropped_buffer_fails_clearly(backend):
    _, buffer = make(64)
    copy = pickle.loads(pickle.dumps(buffer))
    buffer.drop().get()
    buffer.drop().get()  # twice: harmless
    with pytest.raises(RDMABufferDropped, match="dropped"):
        copy.read_into(memoryview(bytearray(64))).get(timeout=10)
    with pytest.raises(RDMABufferDropped, match="dropped"):
        copy.write_from(memoryview(bytearray(64))).get(timeout=10)


def test_pickles_to_a_small_handle():
    _, buffer = make(1 << 20)
    blob = pickle.dumps(buffer)
    assert len(blob) < 1000
    copy = pickle.loads(blob)
    assert copy.size() == buffer.size() and copy.owner == buffer.owner
    assert "rdma_manager" in copy.owner and "RDMABuffer" in repr(copy)


def test_batches_resubmit_and_report_failure():
    data, buffer = make(4096)
    a, b = bytearray(1000), bytearray(1000)
    action = RDMAAction().read_remote(memoryview(a), buffer, offset=0)
    action.read_remote(memoryview(b), buffer, offset=3000)
    action.write_remote(buffer, memoryview(b"\x01" * 10), offset=2000)
    assert action.submit(timeout=10).get() is None
    assert a == data[:1000] and b == data[3000:4000] and data[2000:2010] == b"\x01" * 10
    data[0] = 99
    action.submit().get()  # again
    assert a[0] == 99
    assert RDMAAction().submit().get() is None
    other = RDMABuffer(memoryview(bytearray(8)))
    pickled = pickle.loads(pickle.dumps(other))
    other.drop().get()
    failing = RDMAAction().read_remote(memoryview(a), buffer, offset=0)
    failing.read_remote(memoryview(bytearray(8)), pickled)
    with pytest.raises(RDMABufferDropped):
        failing.submit().get(timeout=10)


def test_atomics():
    word = (ctypes.c_uint64 * 2)()
    buffer = RDMABuffer(memoryview(word).cast("B"))
    old = bytearray(8)
    RDMAAction().fetch_add(buffer, memoryview(old), 5).submit().get(timeout=10)
    RDMAAction().fetch_add(buffer, memoryview(old), 6).submit().get(timeout=10)
    assert word[0] == 11 and int.from_bytes(old, "little") == 5
    RDMAAction().compare_and_swap(buffer, memoryview(old), 11, 40, offset=8).submit().get()
    assert word[1] == 0 and int.from_bytes(old, "little") == 0
    RDMAAction().compare_and_swap(buffer, memoryview(old), 0, 40, offset=8).submit().get()
    assert word[1] == 40
    with pytest.raises(ValueError, match="aligned"):
        RDMAAction().fetch_add(buffer, memoryview(old), 1, offset=4)


def test_async_await():
    import asyncio

    data, buffer = make(100)
    out = bytearray(100)

    async def main():
        return await buffer.read_into(memoryview(out))

    assert asyncio.run(main()) is None and out == data


def closed(sock):
    try:
        return sock.recv(100) == b""
    except ConnectionResetError:
        return True


def test_server_refuses_peers_without_the_secret():
    from monarch_rdma import _wire

    _, buffer = make(8)
    host, port = buffer._handle.owner.server
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(_wire.MAGIC + b"\0" * _wire.NONCE)
        _wire.recv_exact(sock, _wire.NONCE + 1 + _wire.MAC)  # nonce, flags, proof
        sock.sendall(b"\0" * (1 + _wire.MAC))  # flags and a wrong proof
        assert closed(sock)  # nothing served
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(b"GET / HTTP/1.0\r\n\r\n" + b"\0" * 8)
        assert closed(sock)


def test_numpy_arrays():
    np = pytest.importorskip("numpy")
    array = np.arange(100, dtype=np.int64)
    buffer = RDMABuffer(array)
    assert buffer.size() == 800
    out = np.zeros(100, dtype=np.int64)
    buffer.read_into(out).get()
    assert (out == array).all()
    with pytest.raises(ValueError, match=SHAPE):
        RDMABuffer(np.zeros((2, 2)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        buffer.drop().get()
