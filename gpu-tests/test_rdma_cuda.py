"""RDMABuffer over CUDA memory between two processes on one GPU host, with
the ``cuda_ipc`` backend (forced: a fallback would fail, not pass)."""

import gc
import os
import sys

import pytest

torch = pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # the owner's proc imports rdma_cuda_actors by name, as a user's would
    sys.path.insert(0, HERE)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")]))

from rdma_cuda_actors import CudaOwner, digest, pattern  # noqa: E402

import monarch_rdma  # noqa: E402
from monarch_rdma import RDMAAction, RDMABufferDropped, _backends, _cuda_ipc  # noqa: E402

MIB = 1 << 20


@pytest.fixture(scope="module")
def owner():
    from monarch_actor import this_host

    procs = this_host().spawn_procs(per_host={"gpus": 1})
    yield procs.spawn("cuda_owner", CudaOwner)
    procs.stop().get(timeout=30)


@pytest.fixture(autouse=True)
def cuda_ipc_forced():
    old = monarch_rdma.configure(backend="cuda_ipc")
    yield
    monarch_rdma.configure(backend=old.backend)


def cpu_bytes(tensor):
    torch.cuda.synchronize()
    return tensor.cpu()


@pytest.mark.gpu
def test_the_cuda_ipc_backend_serves_cuda_buffers_of_this_host(owner):
    monarch_rdma.configure(backend="auto")  # chosen, not forced
    buffer = owner.make.call_one("chosen", 4096, 1).get()
    assert buffer.backend == "cuda_ipc"
    out = torch.zeros(4096, dtype=torch.uint8, device="cuda")
    buffer.read_into(out).get(timeout=30)
    assert torch.equal(cpu_bytes(out), pattern(4096, 1))
    backend = _backends.by_name("cuda_ipc").backend
    assert len(backend.exports) >= 1  # our CUDA tensor was lent to the owner directly


@pytest.mark.gpu
@pytest.mark.parametrize("size", [1, 4095, MIB + 3, 64 * MIB])
def test_read_into_and_write_from_cuda_tensors(owner, size):
    buffer = owner.make.call_one(f"rw{size}", size, 2).get()
    out = torch.zeros(size, dtype=torch.uint8, device="cuda")
    buffer.read_into(out).get(timeout=60)
    assert torch.equal(cpu_bytes(out), pattern(size, 2))
    src = pattern(size, 3).to("cuda")
    buffer.write_from(src).get(timeout=60)
    assert owner.digest.call_one(f"rw{size}").get() == digest(pattern(size, 3))


@pytest.mark.gpu
def test_other_dtypes_and_a_slice_of_a_larger_tensor(owner):
    buffer = owner.make.call_one("typed", 4000, 4).get()
    big = torch.zeros(3000, dtype=torch.float32, device="cuda")
    window = big[100:1100]  # 4000 bytes, 400 bytes into its storage
    buffer.read_into(window).get(timeout=30)
    assert torch.equal(cpu_bytes(window).view(torch.uint8), pattern(4000, 4))
    assert not big[:100].any() and not big[1100:].any()  # nothing around it touched


@pytest.mark.gpu
def test_host_memory_on_our_side(owner):
    size = 3 * MIB + 5
    buffer = owner.make.call_one("host", size, 5).get()
    out = torch.zeros(size, dtype=torch.uint8)
    buffer.read_into(out).get(timeout=30)
    assert torch.equal(out, pattern(size, 5))
    view = bytearray(pattern(size, 6).numpy().tobytes())
    buffer.write_from(memoryview(view)).get(timeout=30)
    assert owner.digest.call_one("host").get() == digest(pattern(size, 6))


@pytest.mark.gpu
def test_offsets_and_sizes(owner):
    size = 1 * MIB
    buffer = owner.make.call_one("ranges", size, 7).get()
    expected = pattern(size, 7)
    for offset, length in [(0, 1), (1, 4095), (4096, 65536), (size - 10, 10)]:
        out = torch.zeros(length, dtype=torch.uint8, device="cuda")
        buffer.read_into(out, offset=offset).get(timeout=30)
        assert torch.equal(cpu_bytes(out), expected[offset : offset + length])
    patch = torch.full((1000,), 0xAB, dtype=torch.uint8, device="cuda")
    buffer.write_from(patch, offset=5000).get(timeout=30)
    expected[5000:6000] = 0xAB
    assert owner.digest.call_one("ranges").get() == digest(expected)
    with pytest.raises(ValueError, match="out of bounds"):
        buffer.read_into(torch.zeros(11, dtype=torch.uint8, device="cuda"), offset=size - 10)


@pytest.mark.gpu
def test_a_source_just_written_on_the_current_stream_is_what_arrives(owner):
    """The owner copies on its own stream: our pending work on the source
    (a kernel queued just before) must have finished first, and a read's
    destination must be complete when the future resolves."""
    size = 64 * MIB
    buffer = owner.make.call_one("ordered", size, 8).get()
    src = torch.zeros(size, dtype=torch.uint8, device="cuda")
    for value in (1, 2, 3):
        src.fill_(value)  # queued, not finished, when write_from starts
        buffer.write_from(src).get(timeout=60)
        out = torch.zeros(size, dtype=torch.uint8, device="cuda")
        buffer.read_into(out).get(timeout=60)
        assert int(out.min()) == value and int(out.max()) == value


@pytest.mark.gpu
def test_a_read_is_complete_when_it_resolves_though_the_owner_answers_early(owner):
    """The owner answers once the copy is queued; the future resolves only
    once the copy has completed (the peer waits on the owner's event), so a
    kernel queued at once sees every byte, round after round."""
    size = 256 * MIB
    buffer = owner.make.call_one("early", size, 12).get()
    out = torch.zeros(size, dtype=torch.uint8, device="cuda")
    for value in (5, 6, 7, 8):
        owner.fill.call_one("early", value).get()
        buffer.read_into(out).get(timeout=60)
        assert bool((out == value).all())  # queued on our stream at once, no host wait before
    del out, buffer
    owner.drop.call_one("early").get()


@pytest.mark.gpu
def test_a_large_cuda_transfer_moves_whole_even_under_a_progress_line(owner, monkeypatch):
    """cuda_ipc copies at device speed: no pieces (each a round trip), no line."""
    size = 256 * MIB
    buffer = owner.make.call_one("whole", size, 13).get()
    owner.fill.call_one("whole", 9).get()
    calls = []
    transfer = monarch_rdma._buffer.run_transfer
    monkeypatch.setattr(
        monarch_rdma._buffer,
        "run_transfer",
        lambda t, *rest: (calls.append(t.nbytes), transfer(t, *rest))[1],
    )
    monkeypatch.setenv("MONARCH_PROGRESS", "always")
    out = torch.zeros(size, dtype=torch.uint8, device="cuda")
    buffer.read_into(out).get(timeout=60)
    assert calls == [size]
    assert bool((out == 9).all())
    del out, buffer
    owner.drop.call_one("whole").get()


@pytest.mark.gpu
def test_concurrent_transfers(owner):
    size = 8 * MIB
    buffer = owner.make.call_one("many", size, 9).get()
    outs = [torch.zeros(size, dtype=torch.uint8, device="cuda") for _ in range(6)]
    action = RDMAAction()
    for out in outs:
        action.read_remote(out, buffer)
    action.submit(timeout=60).get(timeout=60)
    expected = pattern(size, 9)
    for out in outs:
        assert torch.equal(cpu_bytes(out), expected)


@pytest.mark.gpu
def test_a_dropped_buffer_is_refused(owner):
    buffer = owner.make.call_one("dropped", 4096, 10).get()
    out = torch.zeros(4096, dtype=torch.uint8, device="cuda")
    buffer.read_into(out).get(timeout=30)  # the owner now holds our storage open
    owner.drop.call_one("dropped").get()
    with pytest.raises(RDMABufferDropped):
        buffer.read_into(out).get(timeout=30)
    with pytest.raises(RDMABufferDropped):
        buffer.write_from(out).get(timeout=30)


@pytest.mark.gpu
def test_the_owner_closes_our_storages_once_they_are_gone(owner):
    """Repeated transfers reuse one opened storage; fresh tensors, freed,
    are closed on the owner's side (the peer tells it in its next request)
    instead of piling up."""
    buffer = owner.make.call_one("churn", MIB, 11).get()
    out = torch.zeros(MIB, dtype=torch.uint8, device="cuda")
    buffer.read_into(out).get(timeout=30)
    before = owner.opened.call_one().get()
    for _ in range(5):
        buffer.read_into(out).get(timeout=30)
    assert owner.opened.call_one().get() == before  # the same storage: nothing new opened
    for _ in range(2 * _cuda_ipc.OPENED_PER_CONNECTION):
        fresh = torch.zeros(MIB, dtype=torch.uint8, device="cuda")
        buffer.read_into(fresh).get(timeout=30)
        del fresh
        gc.collect()
    assert owner.opened.call_one().get() <= before + 2
