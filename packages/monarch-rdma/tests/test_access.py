"""Least privilege on the owner's side: read-only buffers are refused writes
by every backend whatever a handle claims, a cma write notices a buffer
dropped while it ran, ibverbs queue pairs a peer makes the owner create are
bounded and released with its connection, and an owner lets only the
readers that asked ptrace it, never every process of its user."""

import contextlib
import dataclasses
import os
import pickle
import subprocess
import sys
import time
import types
import warnings

import pytest
from test_selection import fake_nic, settings  # noqa: F401 (fixtures)

import monarch_rdma
from monarch_actor.testing import wait_for
from monarch_rdma import (
    RDMABuffer,
    RDMABufferDropped,
    RDMATcpFallbackWarning,
    RDMATransferError,
    _backend,
    _backends,
    _cma,
    _control,
    _cuda_ipc,
    _ibverbs,
    _owner,
    _ptrace,
    _wire,
)
from monarch_rdma._handle import Handle, OwnerInfo
from monarch_rdma._regions import Region

READ_ONLY = r"buffer \d+ is read-only"


def lying(buffer):
    """The buffer as a holder who claims it is writable would present it."""
    return RDMABuffer._from_handle(dataclasses.replace(buffer._handle, readonly=False))


# -- read-only buffers, every backend ----------------------------------------------------------


@pytest.mark.parametrize("backend", ["cma", "tcp"], indirect=True)
def test_read_only_is_enforced_by_the_owner_in_process(backend):
    data = b"constant bytes"
    buffer = RDMABuffer(memoryview(data))
    with pytest.raises(ValueError, match="read-only memory"):  # the honest handle: at the call
        buffer.write_from(memoryview(b"x"))
    with pytest.raises(RDMATransferError, match=READ_ONLY):
        lying(buffer).write_from(memoryview(b"XX")).get(timeout=10)
    out = bytearray(len(data))
    lying(buffer).read_into(memoryview(out)).get(timeout=10)
    assert out == b"constant bytes" == data


@pytest.mark.parametrize("backend", ["cma", "tcp"], indirect=True)
def test_read_only_is_enforced_by_the_owner_across_processes(owner, backend):
    buffer = owner.make_readonly.call_one("ro", 4096, 3).get()
    digest = owner.digest.call_one("ro").get()
    with pytest.raises(RDMATransferError, match=READ_ONLY):
        lying(buffer).write_from(memoryview(bytearray(4096))).get(timeout=30)
    assert owner.digest.call_one("ro").get() == digest  # not a byte changed
    out = bytearray(4096)
    lying(buffer).read_into(memoryview(out)).get(timeout=30)
    buffer.drop().get()


def test_read_only_tokens_come_from_the_owner():
    writable = RDMABuffer(memoryview(bytearray(8)))._handle
    readonly = RDMABuffer(memoryview(b"12345678"))._handle
    assert writable.token & 2 and not readonly.token & 2
    assert writable.token & 1 and readonly.token & 1  # never 0, the dropped slot's value


def test_ibverbs_registers_read_only_memory_without_remote_write(fake_nic, settings):  # noqa: F811
    settings(backend="ibverbs")
    data = b"constant over RDMA"
    buffer = RDMABuffer(memoryview(data))
    out = bytearray(len(data))
    buffer.read_into(memoryview(out)).get(timeout=10)
    assert out == data
    region = _owner.regions().lookup(buffer._handle.buffer_id, buffer._handle.token)
    access = region.extras["ibv_mr"].access
    e = fake_nic.enums
    assert access & e.IBV_ACCESS_REMOTE_READ and not access & e.IBV_ACCESS_REMOTE_WRITE
    with pytest.raises(RDMATransferError, match=READ_ONLY):  # the owner said so
        lying(buffer).write_from(memoryview(bytearray(4))).get(timeout=10)
    # a reader that ignores the owner's answer is stopped by the NIC itself
    conn = next(iter(_ibverbs._connections.values()))
    key = (buffer._handle.buffer_id, buffer._handle.token)
    rkey, addr, _ = conn.keys[key]
    conn.keys[key] = (rkey, addr, True)
    with pytest.raises(RDMABufferDropped, match="refused access"):
        lying(buffer).write_from(memoryview(bytearray(4))).get(timeout=10)
    assert data == b"constant over RDMA"


class FakeDevice:
    """A flat uint8 "CUDA" tensor over host bytes: slicing and ``copy_``, as
    the owner's side of cuda_ipc uses them."""

    def __init__(self, view):
        self.view = view
        self.device = types.SimpleNamespace(type="cuda", index=0)

    def __getitem__(self, key):
        return FakeDevice(self.view[key])

    def numel(self):
        return len(self.view)

    def copy_(self, other, non_blocking=False):
        self.view[:] = other.view


class FakeEvent:
    """A CUDA event whose copy has always completed (host copies are synchronous)."""

    def __init__(self, interprocess=False):
        self.interprocess = interprocess

    def ipc_handle(self):
        assert self.interprocess, "only an interprocess event has an IPC handle"
        return bytes(range(64))

    def record(self, stream):
        self.stream = stream

    def synchronize(self):
        pass


@pytest.fixture
def fake_cuda(monkeypatch):
    """The owner's side of cuda_ipc on host bytes: a "CUDA" region and the
    peer's shared staging memory, each a FakeDevice; records what is opened."""
    opened = []
    torch = types.SimpleNamespace(
        cuda=types.SimpleNamespace(
            device=lambda device: contextlib.nullcontext(),
            stream=lambda stream: contextlib.nullcontext(),
            Stream=lambda device: object(),
            Event=FakeEvent,
            set_stream=lambda stream: None,
        )
    )
    monkeypatch.setattr(_cuda_ipc, "torch_module", lambda: torch)
    monkeypatch.setattr(_cuda_ipc, "_idle_lanes", {})  # fake lanes stay here
    monkeypatch.setattr(_cuda_ipc, "bytes_of", lambda memory: FakeDevice(memory.keep))
    peer = FakeDevice(memoryview(bytearray(64)))
    monkeypatch.setattr(_cuda_ipc, "open_shared", lambda items: opened.append(items) or peer)

    def region(data, readonly):
        memory = types.SimpleNamespace(is_cuda=True, readonly=readonly, nbytes=len(data),
                                       keep=memoryview(data))  # fmt: skip
        return Region(1, 3, memory, None)

    return types.SimpleNamespace(region=region, peer=peer, opened=opened)


class Answers:
    """A channel that keeps the answers a server operation sends."""

    def __init__(self):
        self.sent = []

    def send(self, *messages):
        self.sent += messages


def copy_request(region, write, offset=0, length=16, handle=("00",), resources=None, **more):
    args = {"handle": list(handle), "write": write, **more}
    resources = resources or _backend.ConnectionResources()
    return _backend.OwnerRequest(_cuda_ipc.CUDA_COPY, 1, offset, length, args, region, resources)


def test_cuda_ipc_the_owner_copies_and_refuses_writes_to_read_only_memory(fake_cuda):
    data = bytearray(b"read-only on a GPU, 32 bytes....")
    region = fake_cuda.region(data, readonly=True)
    with pytest.raises(_wire.RequestError, match=READ_ONLY) as refused:
        _cuda_ipc._serve_copy(Answers(), copy_request(region, write=True))
    assert refused.value.status == _wire.Status.READONLY
    assert not fake_cuda.opened  # refused before anything of the peer was even opened
    assert data == b"read-only on a GPU, 32 bytes...."
    answers = Answers()
    _cuda_ipc._serve_copy(answers, copy_request(region, write=False, offset=4, length=20))
    assert bytes(fake_cuda.peer.view[:20]) == data[4:24]  # the owner copied into the peer's
    with pytest.raises(_wire.RequestError, match="out of bounds") as refused:
        _cuda_ipc._serve_copy(Answers(), copy_request(region, write=False, offset=30, length=4))
    assert refused.value.status == _wire.Status.BOUNDS


def test_cuda_ipc_writes_only_the_registered_range(fake_cuda):
    data = bytearray(32)
    region = fake_cuda.region(data, readonly=False)
    fake_cuda.peer.view[:] = b"w" * 64
    _cuda_ipc._serve_copy(Answers(), copy_request(region, write=True, offset=8, length=8))
    assert data == bytes(8) + b"w" * 8 + bytes(16)


def test_cuda_ipc_the_owner_keeps_the_peers_memory_open_per_connection(fake_cuda):
    """A repeated transfer on one connection opens the peer's storage once;
    the peer's "forget" closes it, and so does the connection closing; the
    region is still checked on every request (a dropped one is refused)."""
    data = bytearray(b"x" * 32)
    region = fake_cuda.region(data, readonly=False)
    conn = _backend.ConnectionResources()
    for _ in range(3):
        _cuda_ipc._serve_copy(Answers(), copy_request(region, write=False, resources=conn))
    assert fake_cuda.opened == [["00"]]
    cache = _cuda_ipc._opened_for(conn)
    assert len(cache) == 1
    other = _backend.ConnectionResources()  # another connection opens its own
    _cuda_ipc._serve_copy(Answers(), copy_request(region, write=False, resources=other))
    assert len(fake_cuda.opened) == 2
    key = _cuda_ipc.export_key(["00"])
    _cuda_ipc._serve_copy(Answers(), copy_request(region, False, resources=conn, forget=[key]))
    assert len(fake_cuda.opened) == 3  # forgotten first, so opened again for this copy
    dropped = _backend.OwnerRequest(_cuda_ipc.CUDA_COPY, 1, 0, 4,
                                    {"handle": ["01"], "write": False, "forget": [key]}, None,
                                    conn)  # fmt: skip
    with pytest.raises(_wire.RequestError) as refused:
        _cuda_ipc._serve_copy(Answers(), dropped)
    assert refused.value.status == _wire.Status.DROPPED
    assert len(cache) == 0  # the forget still took effect
    _cuda_ipc._serve_copy(Answers(), copy_request(region, write=False, resources=conn))
    conn.close()
    assert len(cache) == 0


def test_cuda_ipc_copies_at_the_peers_offset_and_checks_its_size(fake_cuda):
    data = bytearray(b"0123456789abcdef")
    region = fake_cuda.region(data, readonly=False)
    _cuda_ipc._serve_copy(Answers(), copy_request(region, False, offset=2, length=4, at=60))
    assert bytes(fake_cuda.peer.view[60:64]) == b"2345"
    with pytest.raises(_wire.RequestError, match="smaller than the range"):
        _cuda_ipc._serve_copy(Answers(), copy_request(region, False, length=8, at=60))
    for bad in ({"at": -1}, {"at": True}, {"forget": "k"}, {"forget": ["k"] * 65}):
        with pytest.raises(_wire.RequestError) as refused:
            _cuda_ipc._serve_copy(Answers(), copy_request(region, False, **bad))
        assert refused.value.status == _wire.Status.BAD_REQUEST


class Ordered(Answers):
    """Answers, and when each event was waited for, in one list."""

    def __init__(self, log):
        super().__init__()
        self.log = log

    def send(self, *messages):
        super().send(*messages)
        self.log.append("answer")


def test_cuda_ipc_answers_once_queued_naming_an_event_the_owner_does_not_wait_on(
    fake_cuda, monkeypatch
):
    """The answer goes before the owner's wait (it travels while the device
    copies) and names the lane's interprocess event; the owner waits on a
    private event, which no peer can open, and the region's use ends only
    after that wait."""
    log = []
    monkeypatch.setattr(FakeEvent, "synchronize", lambda self: log.append(("wait", self)))
    region = fake_cuda.region(bytearray(32), readonly=False)
    conn = _backend.ConnectionResources()
    answers = Ordered(log)
    _cuda_ipc._serve_copy(answers, copy_request(region, write=False, resources=conn))
    lane = _cuda_ipc._connection(conn).lanes[0]
    assert log == ["answer", ("wait", lane.done)]
    assert lane.done is not lane.told and lane.told.interprocess and not lane.done.interprocess
    status, _, _ = _wire.ANSWER.unpack(bytes(answers.sent[0][0]))
    assert status == _wire.Status.OK
    assert bytes(answers.sent[0][1]) == bytes(range(64)).hex().encode() == lane.told_name.encode()


def test_cuda_ipc_lanes_outlive_their_connection_for_the_next_one(fake_cuda):
    """A peer may still hold a lane's event open: lanes are kept, never
    destroyed, and the next connection takes the idle one."""
    region = fake_cuda.region(bytearray(32), readonly=False)
    first = _backend.ConnectionResources()
    _cuda_ipc._serve_copy(Answers(), copy_request(region, write=False, resources=first))
    lane = _cuda_ipc._connection(first).lanes[0]
    again = _backend.ConnectionResources()  # open at the same time: a lane of its own
    _cuda_ipc._serve_copy(Answers(), copy_request(region, write=False, resources=again))
    assert _cuda_ipc._connection(again).lanes[0] is not lane
    first.close()
    assert _cuda_ipc._idle_lanes[0] == [lane]
    later = _backend.ConnectionResources()
    _cuda_ipc._serve_copy(Answers(), copy_request(region, write=False, resources=later))
    assert _cuda_ipc._connection(later).lanes[0] is lane
    assert _cuda_ipc._idle_lanes[0] == []


def test_cuda_ipc_a_copy_failing_after_the_answer_closes_the_connection(fake_cuda, monkeypatch):
    def fails(self):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(FakeEvent, "synchronize", fails)
    region = fake_cuda.region(bytearray(32), readonly=False)
    answers = Answers()
    with pytest.raises(ConnectionAbortedError, match="illegal memory access"):
        _cuda_ipc._serve_copy(answers, copy_request(region, write=False))
    assert len(answers.sent) == 1  # the one answer: no second one after it


def test_cuda_ipc_an_unopenable_event_in_the_answer_fails_the_transfer_clearly():
    owner = OwnerInfo("owner", "host", "gpu-host", 4242, 1, ("127.0.0.1", 1), local="/tmp/s")
    owner_handle = Handle(1, 3, 64, 0, "cuda:0", False, 0, owner)
    backend = _cuda_ipc.CudaIpcBackend()
    torch = types.SimpleNamespace(
        cuda=types.SimpleNamespace(
            Event=types.SimpleNamespace(from_ipc_handle=lambda device, name: ("opened", name))
        )
    )
    for told in (b"zz", b"00" * 63, "é".encode()):
        with pytest.raises(RDMATransferError, match="cannot be opened"):
            backend._told_event(torch, owner_handle, told, "cuda:0")
    good = bytes(range(64)).hex().encode()
    opened = backend._told_event(torch, owner_handle, good, "cuda:0")
    assert opened == ("opened", bytes(range(64)))
    assert backend._told_event(torch, owner_handle, good, "cuda:0") is opened  # opened once


def test_cuda_ipc_never_exports_the_owners_memory():
    """No operation of the owner hands out a handle to its memory: the only
    cuda_ipc operation copies, and nothing in the module shares a region."""
    ops = _backends.by_name("cuda_ipc").owner_ops
    assert set(ops) == {_cuda_ipc.CUDA_COPY}
    assert not hasattr(_cuda_ipc, "owner_share")


# -- cma: our library never writes into an owner --------------------------------------------------


@pytest.mark.parametrize("backend", ["cma"], indirect=True)
def test_cma_writes_never_call_process_vm_writev(owner, backend, monkeypatch):
    """The owner copies a write in (it reads the writer): the writer's
    library has no path that writes another process's memory."""

    def forbidden(*args):
        raise AssertionError("process_vm_writev was called")

    monkeypatch.setattr(_cma, "_writev", forbidden)
    buffer = owner.make.call_one("no-writev", 3 << 20, -1).get()
    new = os.urandom(3 << 20)
    buffer.write_from(memoryview(new)).get(timeout=30)
    out = bytearray(3 << 20)
    buffer.read_into(memoryview(out)).get(timeout=30)
    assert out == new
    buffer.drop().get()


def raw_local(buffer):
    """An authenticated connection to the owner's Unix socket, as the control client opens it."""
    return _control.dedicated(buffer._handle, time.monotonic() + 10, local=True)


def address_of(view):
    return monarch_rdma._memory.as_local_memory(view).addr


def test_the_owner_refuses_a_cma_write_to_read_only_memory():
    data = b"read-only, whatever a handle says"
    buffer = RDMABuffer(memoryview(data))
    source = memoryview(bytearray(len(data)))
    handle = lying(buffer)._handle
    with raw_local(buffer) as chan, pytest.raises(RDMATransferError, match=READ_ONLY):
        _control.exchange(chan, handle, _cma.CMA_WRITE, time.monotonic() + 10,
                          {"addr": address_of(source)}, 0, len(data))  # fmt: skip
    assert data == b"read-only, whatever a handle says"
    buffer.drop().get()


def test_a_cma_write_over_tcp_is_refused():
    """Over TCP the owner cannot know which process asks: it copies from none."""
    data = bytearray(16)
    buffer = RDMABuffer(memoryview(data))
    source = memoryview(bytearray(b"x" * 16))
    with pytest.raises(RDMATransferError, match="must come over the owner's Unix socket"):
        _control.request(buffer._handle, _cma.CMA_WRITE, time.monotonic() + 10,
                         {"addr": address_of(source)}, 0, 16)  # fmt: skip
    assert data == bytes(16)
    buffer.drop().get()


@pytest.mark.parametrize("backend", ["cma"], indirect=True)
def test_cma_write_in_process_reports_a_buffer_dropped_during_it(backend, monkeypatch):
    buffer = RDMABuffer(memoryview(bytearray(64)))
    in_pieces = _cma._in_pieces

    def then_dropped(nbytes, move):
        in_pieces(nbytes, move)
        _owner.regions().drop(buffer._handle.buffer_id, buffer._handle.token)

    monkeypatch.setattr(_cma, "_in_pieces", then_dropped)
    with pytest.raises(RDMABufferDropped, match="while this write was in progress"):
        buffer.write_from(memoryview(bytearray(64))).get(timeout=30)


# -- ibverbs: queue pairs a peer makes the owner create --------------------------------------------


def test_owner_queue_pairs_are_released_with_the_readers_connection(fake_nic, settings):  # noqa: F811
    settings(backend="ibverbs")
    buffer = RDMABuffer(memoryview(bytearray(4096)))
    buffer.read_into(memoryview(bytearray(4096))).get(timeout=10)
    dev = _ibverbs.device()
    assert len(dev.peers) == 1
    (qpn,) = dev.peers
    assert qpn in fake_nic.QPS
    for conn in list(_ibverbs._connections.values()):
        conn.close()  # the reader gives up its QP and closes its control connection
    _ibverbs._connections.clear()
    assert wait_for(lambda: not dev.peers, 5.0)  # the owner destroyed its side
    assert qpn not in fake_nic.QPS
    buffer.read_into(memoryview(bytearray(4096))).get(timeout=10)  # a new pair on demand
    assert len(dev.peers) == 1


def test_owner_queue_pairs_are_bounded_per_connection(fake_nic, settings):  # noqa: F811
    buffer = RDMABuffer(memoryview(bytearray(64)))
    handle = buffer._handle
    dev = _ibverbs.device()
    deadline = time.monotonic() + 10
    sock = _control.dedicated(handle, deadline)
    try:
        for _ in range(_ibverbs.MAX_QPS_PER_CONNECTION):
            qp, _ = dev.new_qp()
            _control.exchange(sock, handle, _ibverbs.IBV_CONNECT, deadline,
                              {"qp": dev.address(qp, 1)})  # fmt: skip
        assert len(dev.peers) == _ibverbs.MAX_QPS_PER_CONNECTION
        qp, _ = dev.new_qp()
        with pytest.raises(RDMATransferError, match="already holds 4 ibverbs queue pairs"):
            _control.exchange(sock, handle, _ibverbs.IBV_CONNECT, deadline,
                              {"qp": dev.address(qp, 1)})  # fmt: skip
    finally:
        sock.close()
    assert wait_for(lambda: not dev.peers, 5.0)  # all released with the connection


# -- ptrace: only the readers that asked ---------------------------------------------------------


@pytest.fixture
def yama_scope_1(monkeypatch):
    """Pretend Yama's ptrace_scope is 1, and record every prctl instead of calling it."""
    calls = []
    monkeypatch.setattr(_ptrace, "ptrace_scope", lambda: 1)
    monkeypatch.setattr(_cma, "ptrace_scope", lambda: 1)
    monkeypatch.setattr(_ptrace, "_prctl", lambda *args: calls.append(args[:2]) or 0)
    monkeypatch.setattr(_ptrace, "policy", _ptrace.TracerPolicy())
    yield calls
    assert all(args[1] != _ptrace.PR_SET_PTRACER_ANY for args in calls)


@pytest.fixture
def children():
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
             for _ in range(2)]  # fmt: skip
    yield [p.pid for p in procs]
    for p in procs:
        p.kill()
        p.wait()


def test_an_owner_never_lets_every_process_attach(yama_scope_1, monkeypatch):
    monkeypatch.setattr(_owner, "_current", _owner.Owner())
    RDMABuffer(memoryview(bytearray(64)))  # the first registration starts the owner
    assert yama_scope_1 == []  # nothing granted until a reader asks


def test_an_owner_names_the_nearest_ancestor_of_the_readers_that_asked(yama_scope_1, children):
    first, second = children
    assert _ptrace.policy.allow(first) == first  # the only reader: itself, no wider
    assert _ptrace.policy.allow(first) == first and len(yama_scope_1) == 1  # already covered
    assert _ptrace.policy.allow(second) == os.getpid()  # their nearest common ancestor (us)
    assert yama_scope_1 == [(_ptrace.PR_SET_PTRACER, first), (_ptrace.PR_SET_PTRACER, os.getpid())]
    assert _ptrace.policy.allow(os.getppid()) is None  # our ancestor may attach anyway
    assert len(yama_scope_1) == 2
    with pytest.raises(PermissionError, match="does not exist"):
        _ptrace.policy.allow(2**22 + 12345)


def test_an_owner_refuses_to_name_a_tracer_that_covers_too_much(yama_scope_1, monkeypatch):
    parents = {10: 5, 11: 5, 5: 1, 20: 1, 1: 0}  # 10, 11 under 5; 20 elsewhere
    monkeypatch.setattr(_ptrace, "_stat", lambda pid: (parents[pid], 0) if pid in parents else None)
    monkeypatch.setattr(_ptrace, "_too_wide", lambda pid: "it is init" if pid <= 1 else None)
    assert _ptrace.policy.allow(10) == 10
    assert _ptrace.policy.allow(11) == 5
    with pytest.raises(PermissionError, match="would be process 1, and it is init"):
        _ptrace.policy.allow(20)  # covering it too would cover every process
    assert _ptrace.policy.tracer == (5, 0)  # unchanged by the refusal


def test_too_wide_tracers():
    assert "init" in _ptrace._too_wide(1)
    leader = os.getsid(0)
    if (
        leader > 1
        and os.path.exists(f"/proc/{leader}")
        and (os.stat(f"/proc/{leader}").st_uid == os.geteuid())
    ):
        assert "session leader" in _ptrace._too_wide(leader)


ASKS_FOR_ITSELF = """
import pickle, sys, time
from monarch_rdma import _cma, _control
handle = pickle.loads(bytes.fromhex(sys.argv[1]))._handle
_, answer = _control.request(handle, _cma.ALLOW_ATTACH, time.monotonic() + 30, local=True)
print(answer["tracer"])
"""


def test_allow_attach_names_the_process_that_asks(yama_scope_1, children):
    """The owner names the process at the other end of its Unix socket, as
    the kernel says (SO_PEERCRED); a request that names another is refused."""
    from monarch_transport import job_secret

    job_secret()  # exported: the asking child is of this job
    buffer = RDMABuffer(memoryview(bytearray(64)))
    asking = subprocess.run([sys.executable, "-c", ASKS_FOR_ITSELF, pickle.dumps(buffer).hex()],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert asking.returncode == 0, asking.stderr
    child = int(asking.stdout)
    assert child != os.getpid() and yama_scope_1 == [(_ptrace.PR_SET_PTRACER, child)]
    deadline = time.monotonic() + 10
    with pytest.raises(RDMATransferError, match="a process may only ask for itself"):
        _control.request(buffer._handle, _cma.ALLOW_ATTACH, deadline, {"pid": children[0]},
                         local=True)  # fmt: skip
    with pytest.raises(RDMATransferError, match="must come over the owner's Unix socket"):
        _control.request(buffer._handle, _cma.ALLOW_ATTACH, deadline, {"pid": children[0]})
    assert yama_scope_1 == [(_ptrace.PR_SET_PTRACER, child)]  # no one else was named
    stale = dataclasses.replace(buffer._handle, token=buffer._handle.token ^ 4)
    with pytest.raises(RDMABufferDropped):  # no live buffer of ours, no access
        _control.request(stale, _cma.ALLOW_ATTACH, deadline, local=True)
    buffer.drop().get()


@pytest.mark.parametrize("backend", ["auto"], indirect=True)
def test_a_reader_asks_once_per_owner_and_falls_back_when_refused(owner, backend, monkeypatch):
    cma = _backends.by_name("cma").backend
    monkeypatch.setattr(cma, "allowed", set())
    monkeypatch.setattr(cma, "denied", set())
    monkeypatch.setattr(_cma, "ptrace_scope", lambda: 1)  # the owner's kernel has no Yama here
    asked = []
    request = _control.request
    monkeypatch.setattr(_control, "request", lambda *a, **k: asked.append(a[1]) or request(*a, **k))
    buffer = owner.make.call_one("asks", 1024, 5).get()
    for _ in range(3):
        buffer.read_into(memoryview(bytearray(1024))).get(timeout=30)
    assert asked == [_cma.ALLOW_ATTACH]  # once, before the first transfer
    assert buffer.backend == "cma"

    def refusing(*args, **kwargs):
        if args[1] == _cma.ALLOW_ATTACH:
            raise RDMATransferError("cannot let process 1 attach to this owner")
        return request(*args, **kwargs)

    monkeypatch.setattr(_control, "request", refusing)
    monkeypatch.setattr(cma, "allowed", set())
    out = bytearray(1024)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        buffer.read_into(memoryview(out)).get(timeout=30)  # served by tcp instead
    assert any(issubclass(w.category, RDMATcpFallbackWarning) for w in caught)
    assert buffer.backend == "tcp"
    buffer.drop().get()


OWNER = """
import pickle, sys
from monarch_rdma import RDMABuffer
data = bytearray(b"only for the reader that asked")
buffer = RDMABuffer(memoryview(data))
sys.stdout.write(pickle.dumps(buffer).hex() + "\\n")
sys.stdout.flush()
sys.stdin.read()
"""

ASKING_READER = """
import pickle, sys
import monarch_rdma
monarch_rdma.configure(backend="cma")
buffer = pickle.loads(bytes.fromhex(sys.argv[1]))
out = bytearray(buffer.size())
buffer.read_into(memoryview(out)).get(timeout=30)
print(out.decode())
"""

SILENT_READER = """
import ctypes, errno, pickle, sys
from monarch_rdma import _cma
handle = pickle.loads(bytes.fromhex(sys.argv[1]))._handle
cell = (ctypes.c_char * 8)()
try:
    _cma.copy(handle.owner.pid, ctypes.addressof(cell), handle.addr, 8, False)
    print("read")
except OSError as error:
    print("EPERM" if error.errno == errno.EPERM else error)
"""


@pytest.mark.skipif(
    _ptrace.ptrace_scope() != 1,
    reason=f"Yama ptrace_scope is {_ptrace.ptrace_scope()} here, not 1: without Yama or with "
    "scope 0 every process of the same user may attach anyway (nothing to restrict); with 2 or "
    "3 cross-memory attach is off",
)
def test_under_yama_only_the_reader_that_asked_can_attach():
    from monarch_transport import job_secret

    job_secret()  # exported: the three processes are one job
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        pickled = owner.stdout.readline().strip()
        assert pickle.loads(bytes.fromhex(pickled)).size() > 0
        run = [sys.executable, "-c"]
        asked = subprocess.run([*run, ASKING_READER, pickled], capture_output=True, text=True,
                               timeout=60)  # fmt: skip
        assert asked.stdout.strip() == "only for the reader that asked", asked.stderr
        silent = subprocess.run([*run, SILENT_READER, pickled], capture_output=True, text=True,
                                timeout=60)  # fmt: skip
        assert silent.stdout.strip() == "EPERM", silent.stderr  # a sibling that did not ask
    finally:
        owner.stdin.close()
        owner.wait(timeout=30)
