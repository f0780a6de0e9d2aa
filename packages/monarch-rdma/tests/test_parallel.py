"""Large same-host transfers split across threads: byte-exact at sizes
around the piece boundaries, one control step per transfer, and the piece
scheduler covers every byte once."""

import dataclasses
import hashlib
import itertools
import threading

import pytest
from rdma_actors import pattern

import monarch_rdma
from monarch_actor.testing import wait_for
from monarch_rdma import RDMABuffer, RDMABufferDropped, _cma, _control, _parallel

MIB = 1 << 20
FROM = _cma.PARALLEL_FROM
PIECE = _cma.PARALLEL_PIECE
SIZES = [FROM - 1, FROM, FROM + 1, FROM + PIECE + 4097, 3 * FROM + 7]


@pytest.fixture
def threads(request):
    old = monarch_rdma.configure(backend="cma", cma_threads=request.param)
    yield request.param
    monarch_rdma.configure(**dataclasses.asdict(old))


@pytest.mark.parametrize("threads", [1, 2, 3], indirect=True)
@pytest.mark.parametrize("size", SIZES)
def test_byte_exact_between_processes(owner, threads, size):
    name = f"pieces-{threads}-{size}"
    buffer = owner.make.call_one(name, size, 5).get()
    out = bytearray(size)
    buffer.read_into(memoryview(out)).get(timeout=60)
    assert out == pattern(size, 5)
    new = pattern(size, 6)
    buffer.write_from(memoryview(new)).get(timeout=60)
    assert owner.digest.call_one(name).get() == hashlib.sha256(new).hexdigest()
    piece = bytearray(size - 4099)  # an odd offset and length, both ways
    buffer.read_into(memoryview(piece), offset=4099).get(timeout=60)
    assert piece == new[4099:]
    buffer.write_from(memoryview(pattern(size - 4099, 7)), offset=4099).get(timeout=60)
    expected = new[:4099] + pattern(size - 4099, 7)
    assert owner.digest.call_one(name).get() == hashlib.sha256(expected).hexdigest()
    buffer.drop().get()
    owner.release.call_one(name).get()


@pytest.mark.parametrize("threads", [2], indirect=True)
@pytest.mark.parametrize("size", [FROM - 1, 3 * FROM + 7])
def test_byte_exact_in_process(threads, size):
    data = bytearray(pattern(size, 8))
    buffer = RDMABuffer(memoryview(data))
    out = bytearray(size)
    buffer.read_into(memoryview(out)).get(timeout=60)
    assert out == data
    new = pattern(size, 9)
    buffer.write_from(memoryview(new)).get(timeout=60)
    assert data == new


@pytest.mark.parametrize("threads", [2], indirect=True)
@pytest.mark.parametrize("write", [False, True], ids=["read", "write"])
def test_one_control_step_per_transfer(owner, threads, write, monkeypatch):
    """A cma transfer asks the owner once, whatever its size: a read for a
    lease (released without waiting for an answer), a write for the owner to
    copy it in; neither reads the owner's token slot."""
    size = 3 * FROM + 7
    buffer = owner.make.call_one(f"steps-{write}", size, 1).get()
    checks, exchanges, told = [], [], []
    check, exchange, tell = _cma.check_token, _control.exchange, _control.tell
    monkeypatch.setattr(_cma, "check_token", lambda h, **k: checks.append(h) or check(h, **k))
    monkeypatch.setattr(_control, "exchange", lambda *a: exchanges.append(a[2]) or exchange(*a))
    monkeypatch.setattr(_control, "tell", lambda *a: told.append(a[2]) or tell(*a))
    local = memoryview(bytearray(size))
    for _ in range(3):
        future = buffer.write_from(local) if write else buffer.read_into(local)
        future.get(timeout=60)
    assert not checks
    if write:
        assert exchanges == [_cma.CMA_WRITE] * 3 and not told
    else:
        assert exchanges == [_cma.CMA_LEASE] * 3 and told == [_cma.CMA_RELEASE] * 3
    buffer.drop().get()
    with pytest.raises(RDMABufferDropped):
        (buffer.write_from(local) if write else buffer.read_into(local)).get(timeout=60)


@pytest.mark.parametrize("backend", ["tcp"], indirect=True)
def test_tcp_one_round_trip_per_connection(owner, backend, monkeypatch):
    """A tcp transfer pipelines its requests: one exchange per stream."""
    size = 8 * MIB
    buffer = owner.make.call_one("tcp-steps", size, 2).get()
    old = monarch_rdma.configure(tcp_streams=2, max_chunk_size_mb=1)  # 8 pieces on 2 streams
    answers, connections = [], []
    read_answer, connection = _control.read_answer, _control.connection
    monkeypatch.setattr(_control, "read_answer", lambda *a: answers.append(1) or read_answer(*a))
    monkeypatch.setattr(_control, "connection", lambda *a: connections.append(a) or connection(*a))
    try:
        out = bytearray(size)
        buffer.read_into(memoryview(out)).get(timeout=60)
    finally:
        monarch_rdma.configure(**dataclasses.asdict(old))
    assert out == pattern(size, 2)
    assert len(connections) == 2 and len(answers) == 8  # all requests sent before any answer
    buffer.drop().get()


@pytest.mark.parametrize("nbytes", [1, PIECE - 1, 2 * PIECE, 5 * PIECE + 3, 64 * MIB + 1])
@pytest.mark.parametrize("threads", [1, 2, 5])
def test_pieces_cover_every_byte_once(nbytes, threads):
    taken, lock = [], threading.Lock()

    def move(offset, length):
        assert length > 0
        with lock:
            taken.append((offset, length))

    _parallel.copy_in_pieces(nbytes, move, threads, PIECE)
    taken.sort()
    assert taken[0][0] == 0 and sum(length for _, length in taken) == nbytes
    assert all(a + n == b for (a, n), (b, _) in itertools.pairwise(taken))
    assert all(length >= PIECE for _, length in taken[:-1])


def test_a_failed_piece_fails_the_copy_and_stops_the_others():
    calls = []

    def move(offset, length):
        calls.append(offset)
        if offset >= 4 * PIECE:
            raise OSError("no such page")

    with pytest.raises(OSError, match="no such page"):
        _parallel.copy_in_pieces(64 * MIB, move, 2, PIECE)
    assert len(calls) < 64 * MIB // PIECE  # not every piece was tried after the failure


def test_run_all_runs_every_job_and_reports_the_first_failure():
    done = []

    def ok(n):
        return lambda: done.append(n)

    def bad():
        raise ValueError("job 2")

    with pytest.raises(ValueError, match="job 2"):
        _parallel.run_all([ok(0), ok(1), bad, ok(3)])
    assert sorted(done) == [0, 1, 3]


# -- huge pages under large registered regions -----------------------------------------------


def test_huge_page_range():
    huge = _cma.HUGE_PAGE
    assert _cma.huge_page_range(huge, _cma.HUGE_PAGES_FROM - 1) is None  # too small
    assert _cma.huge_page_range(huge, 8 * huge) == (huge, 9 * huge)
    assert _cma.huge_page_range(huge + 1, 8 * huge) == (2 * huge, 9 * huge)  # aligned inside
    assert _cma.huge_page_range(huge - 1, 8 * huge) == (huge, 8 * huge)


@pytest.fixture
def advice(monkeypatch):
    """Record the owner's madvise calls instead of making them."""
    calls = []
    monkeypatch.setattr(_cma, "_madvise", lambda addr, length, what: calls.append((addr, what)))
    monkeypatch.setattr(_cma, "_collapser", None)
    return calls


def _within(calls, buffer, what):
    """The calls of kind ``what`` on ``buffer``'s memory (a thread of an
    earlier test may still be collapsing its own regions)."""
    start, end = buffer._handle.addr, buffer._handle.addr + buffer.size()
    return [addr for addr, kind in calls if kind == what and start <= addr < end]


def test_large_regions_ask_for_huge_pages_in_the_background(advice):
    size = 3 * _cma.COLLAPSE_STEP + 5 * MIB
    buffer = RDMABuffer(memoryview(bytearray(size)))
    start, end = _cma.huge_page_range(buffer._handle.addr, size)
    assert _within(advice, buffer, _cma.MADV_HUGEPAGE) == [start]
    steps = list(range(start, end, _cma.COLLAPSE_STEP))
    assert wait_for(lambda: _within(advice, buffer, _cma.MADV_COLLAPSE) == steps)
    small = RDMABuffer(memoryview(bytearray(_cma.HUGE_PAGES_FROM - 1)))
    assert not _within(advice, small, _cma.MADV_HUGEPAGE)  # nothing for a small region
    buffer.drop().get()
    small.drop().get()


def test_a_dropped_region_is_not_collapsed(advice):
    old = monarch_rdma.configure(huge_pages=False)  # registered without: queued by hand below
    try:
        gone = RDMABuffer(memoryview(bytearray(_cma.HUGE_PAGES_FROM)))
        kept = RDMABuffer(memoryview(bytearray(_cma.HUGE_PAGES_FROM + 3 * MIB)))
    finally:
        monarch_rdma.configure(**dataclasses.asdict(old))
    assert not _within(advice, gone, _cma.MADV_HUGEPAGE) + _within(advice, kept, _cma.MADV_HUGEPAGE)
    regions = monarch_rdma._owner.regions()
    gone_region = regions.lookup(gone._handle.buffer_id, gone._handle.token)
    kept_region = regions.lookup(kept._handle.buffer_id, kept._handle.token)
    gone.drop().get()
    _cma.prefer_huge_pages(gone_region)  # queued after its drop: skipped
    _cma.prefer_huge_pages(kept_region)  # queued after it, on the same thread
    assert wait_for(lambda: _within(advice, kept, _cma.MADV_COLLAPSE))
    assert not _within(advice, gone, _cma.MADV_COLLAPSE)
    kept.drop().get()


def test_huge_pages_can_be_turned_off(advice):
    old = monarch_rdma.configure(huge_pages=False)
    try:
        buffer = RDMABuffer(memoryview(bytearray(4 * _cma.HUGE_PAGES_FROM)))
    finally:
        monarch_rdma.configure(**dataclasses.asdict(old))
    assert not _within(advice, buffer, _cma.MADV_HUGEPAGE)
    buffer.drop().get()


def test_collapsing_keeps_the_contents_and_transfers_exact(owner):
    """For real: the owner's memory moves to huge pages where the kernel can;
    what a reader sees never changes."""
    size = 3 * _cma.COLLAPSE_STEP + 12345
    buffer = owner.make.call_one("huge", size, 11).get()
    expected = pattern(size, 11)
    out = bytearray(size)
    for _ in range(5):  # while the owner collapses, and after
        buffer.read_into(memoryview(out)).get(timeout=60)
        assert out == expected
    assert owner.digest.call_one("huge").get() == hashlib.sha256(expected).hexdigest()
    buffer.drop().get()
    owner.release.call_one("huge").get()
