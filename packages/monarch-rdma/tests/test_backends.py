"""The registry of backends: the built-in ones register themselves, and
configuration, selection, the owner's server and the owner info consult
only the registry, so a backend is one module plus one registration."""

import ctypes
import dataclasses
import socket

import pytest

import monarch_rdma
from monarch_rdma import RDMABackendUnavailable, RDMABuffer, _backends, _control, _owner, _select
from monarch_rdma._backend import OwnerRequest, PairRefused, RdmaBackend
from monarch_rdma._wire import answer_json

FAKE_OP = 99


@pytest.fixture
def settings():
    old = monarch_rdma.configure()
    yield monarch_rdma.configure
    monarch_rdma.configure(**dataclasses.asdict(old))


class Loopback:
    """A backend for this process's own buffers: memmove, counting its calls."""

    name = "loopback"

    def __init__(self, refuse=False):
        self.calls = []
        self.refuse = refuse

    def available(self):
        return True

    def unsupported(self, handle, local):
        return None if handle.owner.pid == _owner.current().owner_info().pid else "not mine"

    def transfer(self, t):
        self.calls.append((t.remote_offset, t.nbytes, t.write))
        if self.refuse:
            raise PairRefused("refused, as the test asked")
        remote = t.handle.addr + t.remote_offset
        src, dst = (t.local.addr, remote) if t.write else (remote, t.local.addr)
        ctypes.memmove(dst, src, t.nbytes)


def serve_fake(conn: socket.socket, request: OwnerRequest) -> None:
    answer_json(conn, {"buffer": request.buffer_id, "size": request.registered().memory.nbytes})


@pytest.fixture
def loopback(request, monkeypatch):
    """Register a backend first in automatic selection, with an owner
    operation and a feature; a fresh owner so the feature is advertised."""
    backend = Loopback(refuse=getattr(request, "param", False))
    _backends.register(
        _backends.Registration(
            backend,
            rank=0,
            owner_ops={FAKE_OP: serve_fake},
            advertise=lambda: {"loopback": "ready"},
        )
    )
    monkeypatch.setattr(_owner, "_current", _owner.Owner())
    yield backend
    _backends.unregister("loopback")


def test_builtin_backends_register_themselves():
    assert _backends.names() == ("cuda_ipc", "cma", "ibverbs", "tcp")  # selection order
    for name in _backends.names():
        registration = _backends.by_name(name)
        assert isinstance(registration.backend, RdmaBackend)
        assert registration.name == name
    assert _backends.owner_op(1) is not None and _backends.owner_op(2) is not None  # tcp
    assert _backends.owner_op(7) is not None  # ibverbs' queue-pair exchange
    assert _backends.owner_op(8) is not None  # cuda_ipc's handle
    features = dict(RDMABuffer(memoryview(bytearray(8)))._handle.owner.features)
    assert set(features) == {"cma", "ibverbs"}  # what the backends advertise, nothing else


def test_a_registered_backend_is_configured_selected_and_served(loopback, settings):
    data = bytearray(b"registered by one call")
    buffer = RDMABuffer(memoryview(data))
    assert buffer._handle.owner.feature("loopback") == "ready"  # advertised
    assert buffer.backend == "loopback"  # first in automatic selection
    out = bytearray(len(data))
    buffer.read_into(memoryview(out)).get(timeout=10)
    assert out == data and loopback.calls == [(0, len(data), False)]
    settings(backend="loopback")  # configuration knows it through the registry
    buffer.write_from(memoryview(b"R"), offset=0).get(timeout=10)
    assert data[:1] == b"R"
    _, answer = _control.request(buffer._handle, FAKE_OP, deadline=_deadline())
    assert answer == {"buffer": buffer._handle.buffer_id, "size": len(data)}  # its owner op
    settings(backend="auto")


def test_an_unregistered_backend_is_unknown(settings):
    with pytest.raises(ValueError, match="unknown RDMA backend 'loopback'"):
        settings(backend="loopback")


@pytest.mark.parametrize("loopback", [True], indirect=True)
def test_a_refused_pair_goes_to_the_next_backend(loopback, settings):
    data = bytearray(b"0123456789")
    buffer = RDMABuffer(memoryview(data))
    out = bytearray(10)
    buffer.read_into(memoryview(out)).get(timeout=10)  # loopback refused: cma served it
    assert out == data and len(loopback.calls) == 1
    settings(backend="loopback")
    with pytest.raises(RDMABackendUnavailable, match="refuses it"):
        buffer.read_into(memoryview(out)).get(timeout=10)


def test_disabled_backends_are_skipped_with_a_reason(settings):
    buffer = RDMABuffer(memoryview(bytearray(8)))
    settings(disable_cma=True, allow_tcp_fallback=False)
    local = monarch_rdma._memory.as_local_memory(memoryview(bytearray(8)))
    with pytest.raises(RDMABackendUnavailable) as error:
        _select.choose(buffer._handle, local)
    assert "cma: cross-memory attach is disabled" in str(error.value)
    assert "tcp: the TCP fallback is disabled" in str(error.value)


def test_names_and_operation_codes_are_unique(loopback):
    with pytest.raises(ValueError, match="already registered"):
        _backends.register(_backends.Registration(Loopback(), rank=1))
    other = Loopback()
    other.name = "other"
    with pytest.raises(ValueError, match="operation code 99"):
        _backends.register(_backends.Registration(other, rank=1, owner_ops={FAKE_OP: serve_fake}))
    with pytest.raises(ValueError, match="operation code 3"):  # DROP: the server's own
        _backends.register(_backends.Registration(other, rank=1, owner_ops={3: serve_fake}))
    assert _backends.by_name("other") is None


def _deadline():
    import time

    return time.monotonic() + 10


def test_memory_copies_run_in_the_caller_except_long_ones_in_an_event_loop():
    import asyncio

    from monarch_rdma import _buffer

    big = _buffer.LOOP_INLINE_BYTES + 1
    assert _buffer._copies_here("cma", big)  # a plain thread: no hand-off
    assert not _buffer._copies_here("tcp", 1)  # waits on the network: a worker's job

    async def in_a_loop():
        return _buffer._copies_here("cma", big), _buffer._copies_here("cma", 1 << 20)

    assert asyncio.run(in_a_loop()) == (False, True)  # the loop never stalls long
