"""torch tensors (skipped where torch is not installed)."""

import pickle

import pytest

torch = pytest.importorskip("torch")

from monarch_rdma import RDMABackendUnavailable, RDMABuffer  # noqa: E402

DST_SMALL = r"destination local memory size \(16\) must be >= remote buffer size \(32\)"
SRC_BIG = r"source local memory size \(64\) must be <= remote buffer size \(32\)"
SHAPE = "RDMABuffer only supports 1d contiguous torch.Tensor or 1d c-contiguous memoryview"


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.int64, torch.bfloat16, torch.uint8, torch.bool]
)
def test_any_dtype_round_trips(dtype, backend):
    source = (torch.arange(1000) % 7).to(dtype)
    buffer = RDMABuffer(source)
    assert buffer.size() == source.numel() * source.element_size()
    out = torch.zeros(1000, dtype=dtype)
    pickle.loads(pickle.dumps(buffer)).read_into(out).get(timeout=10)
    assert torch.equal(out, source)
    buffer.drop().get()


def test_monarch_errors_with_tensors():
    with pytest.raises(ValueError, match=SHAPE + r". Got: tensor\(\[\[0., 0.\]"):
        RDMABuffer(torch.zeros(2, 2))
    with pytest.raises(ValueError, match=SHAPE):
        RDMABuffer(torch.zeros(8)[::2])
    with pytest.raises(ValueError, match=r"^Cannot create RDMABuffer with size 0\.$"):
        RDMABuffer(torch.zeros(0))
    buffer = RDMABuffer(torch.arange(8, dtype=torch.float32))
    assert buffer.size() == 32
    with pytest.raises(ValueError, match=DST_SMALL):
        buffer.read_into(torch.zeros(4))
    with pytest.raises(ValueError, match=SRC_BIG):
        buffer.write_from(torch.zeros(16))


def test_views_slices_and_uint8_views():
    weights = torch.arange(100, dtype=torch.float32)
    buffer = RDMABuffer(weights[10:20])  # a slice of a larger tensor
    out = torch.zeros(10)
    buffer.read_into(out).get()
    assert torch.equal(out, weights[10:20])
    grid = torch.ones(4, 4)
    flat = RDMABuffer(grid.view(torch.uint8).flatten())
    back = torch.zeros(4, 4)
    flat.read_into(back.view(torch.uint8).flatten()).get()
    assert torch.equal(back, grid)
    buffer.write_from(torch.full((2,), -1.0), offset=8).get()
    assert weights[12] == -1 and weights[13] == -1 and weights[11] == 11


def test_forcing_cuda_ipc_on_host_tensors_is_a_clear_error():
    """Without a GPU, cuda_ipc says CUDA is missing; with one, that it moves
    CUDA memory and this buffer is host memory."""
    import monarch_rdma

    reason = (
        "the remote buffer is host memory"
        if torch.cuda.is_available()
        else "torch sees no CUDA device"
    )
    old = monarch_rdma.configure(backend="cuda_ipc")
    try:
        buffer = RDMABuffer(torch.zeros(4))
        with pytest.raises(RDMABackendUnavailable, match=reason):
            buffer.read_into(torch.zeros(4)).get(timeout=5)
    finally:
        monarch_rdma.configure(backend=old.backend)
