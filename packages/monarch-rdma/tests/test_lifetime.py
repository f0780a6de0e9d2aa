"""The owner decides how long its memory is reachable: once ``drop()``
returns, no transfer it serves touches the memory again (a write in flight
is stopped and its writer told ``RDMABufferDropped``; a same-host read holds
a lease that ``drop()`` waits for); and a process of another user gets
nothing from an owner's data plane."""

import contextlib
import ctypes
import json
import os
import pickle
import socket
import threading
import time

import pytest

from monarch_rdma import RDMABuffer, RDMABufferDropped, _cma, _control, _regions, _wire

SIZE = 128 << 20  # a write long enough to be caught in flight


@pytest.fixture
def paused_after_first_piece(monkeypatch):
    """Make the race deterministic: the owner's first copied piece of a
    transfer waits until ``drop()`` has begun. Returns the event set once
    that first piece has landed."""
    landed, dropping = threading.Event(), threading.Event()
    touching, drop = getattr(_regions.RegionTable, "touching", None), _regions.RegionTable.drop
    if touching is None:  # an owner that does not track its copies: the race stays a race
        return landed

    @contextlib.contextmanager
    def paused(self, region):
        with touching(self, region):
            yield
        if not landed.is_set():
            landed.set()
            dropping.wait(60)

    def dropped(self, buffer_id, token):
        dropping.set()
        return drop(self, buffer_id, token)

    monkeypatch.setattr(_regions.RegionTable, "touching", paused, raising=False)
    monkeypatch.setattr(_regions.RegionTable, "drop", dropped)
    return landed


@pytest.mark.parametrize("via", ["cma", "tcp"])
def test_nothing_lands_after_drop_returns(owner, via, paused_after_first_piece):
    data = bytearray(SIZE)
    buffer = RDMABuffer(memoryview(data))
    writing = owner.write_into.call_one(buffer, 0xAB, via)  # another process writes it all
    start = (ctypes.c_char * 64).from_buffer(data)
    # the first bytes change as the first piece lands (the event says so where the owner copies)
    while not paused_after_first_piece.is_set() and bytes(start) == bytes(64):
        paused_after_first_piece.wait(0.001)  # lets the owner's threads run meanwhile
    buffer.drop().get(timeout=60)
    at_drop = bytes(data)
    assert writing.get(timeout=120) == RDMABufferDropped.__name__
    after = bytes(data)
    landed_after_drop = after.count(0xAB) - at_drop.count(0xAB)
    assert landed_after_drop == 0 and after == at_drop  # not a byte landed after drop() returned
    assert 0 < at_drop.count(0xAB) < SIZE  # and it was caught in flight


def test_drop_waits_for_a_readers_lease():
    buffer = RDMABuffer(memoryview(bytearray(4096)))
    handle = buffer._handle
    order = []
    with _control.dedicated(handle, time.monotonic() + 10, local=True) as chan:
        lease, _ = _control.exchange(chan, handle, _cma.CMA_LEASE, time.monotonic() + 10,
                                     {"seconds": 60}, 0, 4096)  # fmt: skip
        dropping = threading.Thread(target=lambda: order.append(buffer.drop().get(timeout=60)))
        dropping.start()
        dropping.join(0.5)
        assert dropping.is_alive()  # the reader still copies: drop() waits for it
        order.append("released")
        _control.tell(chan, handle, _cma.CMA_RELEASE, {"lease": lease})
        dropping.join(60)
    assert order == ["released", None]


def test_a_lease_ends_with_its_readers_connection():
    buffer = RDMABuffer(memoryview(bytearray(4096)))
    handle = buffer._handle
    chan = _control.dedicated(handle, time.monotonic() + 10, local=True)
    _control.exchange(chan, handle, _cma.CMA_LEASE, time.monotonic() + 10, {"seconds": 60}, 0, 64)
    chan.close()  # the reader died mid-read
    buffer.drop().get(timeout=60)  # returns: the lease went with the connection


def test_a_lease_is_bounded_in_time(monkeypatch):
    monkeypatch.setattr(_regions, "LEASE_MAX", 0.2)
    buffer = RDMABuffer(memoryview(bytearray(4096)))
    handle = buffer._handle
    with _control.dedicated(handle, time.monotonic() + 10, local=True) as chan:
        _control.exchange(chan, handle, _cma.CMA_LEASE, time.monotonic() + 10, {"seconds": 3600},
                          0, 64)  # fmt: skip
        buffer.drop().get(timeout=60)  # a stuck reader holds drop() back 0.2 s, not an hour


def test_no_lease_after_drop_and_none_out_of_bounds():
    buffer = RDMABuffer(memoryview(bytearray(4096)))
    handle = buffer._handle
    deadline = time.monotonic() + 10
    with pytest.raises(_control.RDMATransferError, match="out of bounds"):
        _control.request(handle, _cma.CMA_LEASE, deadline, {"seconds": 1}, 4000, 100, local=True)
    buffer.drop().get()
    with pytest.raises(RDMABufferDropped):
        _control.request(handle, _cma.CMA_LEASE, deadline, {"seconds": 1}, 0, 64, local=True)


# -- integrity: by this side's own address ---------------------------------------------------


@pytest.mark.parametrize(("mode", "tcp", "unix"), [("auto", True, False), ("always", True, True),
                                                  ("off", False, False)])  # fmt: skip
def test_sealing_follows_each_sides_own_address(monkeypatch, mode, tcp, unix):
    """Loopback TCP is sealed under ``auto`` (the server decides by the
    address it listens on, not by where the peer comes from); the owner's
    Unix socket, in a folder only this user may enter, is not."""
    monkeypatch.setenv("MONARCH_TRANSPORT_INTEGRITY", mode)
    _control._pool.clear()
    buffer = RDMABuffer(memoryview(bytearray(64)))
    handle = buffer._handle
    assert oct(os.stat(os.path.dirname(handle.owner.local)).st_mode & 0o777) == oct(0o700)
    deadline = time.monotonic() + 10
    with _control.dedicated(handle, deadline) as over_tcp:
        assert over_tcp.sealed is tcp
        assert _control.exchange(over_tcp, handle, _wire.Op.PING, deadline)[0] >= 1
    with _control.dedicated(handle, deadline, local=True) as over_unix:
        assert over_unix.sealed is unix
        assert _control.exchange(over_unix, handle, _wire.Op.PING, deadline)[0] >= 1
    buffer.drop().get()
    _control._pool.clear()


# -- another user -----------------------------------------------------------------------------

INTRUDER = """
import ctypes, json, os, socket, sys
owner = json.loads(sys.argv[1])
seen = {}
# the TCP port: a handshake without the secret, then a read request anyway
try:
    with socket.create_connection(tuple(owner["server"]), timeout=10) as sock:
        sock.sendall(owner["magic"].encode("latin-1") + os.urandom(16))
        reply = sock.recv(4096)
        sock.sendall(b"\\0" + os.urandom(32))  # flags, a made-up proof
        sock.sendall(bytes.fromhex(owner["read"]))
        got = b""
        while True:
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            got += chunk
        seen["tcp"] = owner["secret_bytes"].encode("latin-1") in got and "read" or len(got)
except OSError as error:
    seen["tcp"] = type(error).__name__
# the Unix socket
try:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(owner["local"])
        seen["unix"] = "connected"
except OSError as error:
    seen["unix"] = type(error).__name__
# the memory itself
class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
libc = ctypes.CDLL(None, use_errno=True)
cell = ctypes.create_string_buffer(16)
local, remote = IoVec(ctypes.addressof(cell), 16), IoVec(owner["addr"], 16)
for name in ("process_vm_readv", "process_vm_writev"):
    fn = getattr(libc, name)
    fn.restype = ctypes.c_ssize_t
    done = fn(owner["pid"], ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    seen[name] = os.strerror(ctypes.get_errno()) if done < 0 else done
print(json.dumps(seen))
"""


def test_another_user_gets_nothing():
    from monarch_transport.testing import other_user_unavailable, run_as_other_user

    why = other_user_unavailable()
    if why is not None:
        pytest.skip(why)
    secret = b"only this user's: 32 bytes long!"
    data = bytearray(secret)
    buffer = RDMABuffer(memoryview(data))
    handle = buffer._handle
    owner = {
        "server": list(handle.owner.server),
        "local": handle.owner.local,
        "pid": handle.owner.pid,
        "addr": handle.addr,
        "magic": _wire.MAGIC.decode("latin-1"),
        "secret_bytes": secret.decode("latin-1"),
        "read": _wire.request_header(1, handle.buffer_id, handle.token, 0, len(secret)).hex(),
    }
    ran = run_as_other_user(INTRUDER, json.dumps(owner))
    assert ran.returncode == 0, ran.stderr
    seen = json.loads(ran.stdout)
    assert seen["tcp"] != "read" and seen["tcp"] in (0, "ConnectionResetError", "BrokenPipeError")
    assert seen["unix"] == "PermissionError"  # the owner's folder is closed to others
    assert seen["process_vm_readv"] == seen["process_vm_writev"] == os.strerror(1)  # EPERM
    assert data == secret
    buffer.drop().get()
    with socket.socket(socket.AF_UNIX) as sock:  # and this user still gets in
        sock.connect(handle.owner.local)
    assert pickle.loads(pickle.dumps(buffer)).size() == len(secret)
