"""Between processes: byte-exact transfers with every host-memory backend,
odd offsets, concurrency, 256 MiB, and owners that drop or die."""

import contextlib
import dataclasses
import hashlib
import os
import signal
import socket
import threading
import time

import pytest
from rdma_actors import Owner, pattern

import monarch_rdma
from monarch_actor.testing import Failures
from monarch_rdma import RDMAAction, RDMABufferDropped, RDMAOwnerGone, RDMATransferError

BACKENDS = ["auto", "cma", "tcp"]


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("size", [1, 4097, (1 << 20) + 3])
def test_byte_exact_read_and_write(owner, backend, size):
    name = f"exact-{backend}-{size}"
    buffer = owner.make.call_one(name, size, 1).get()
    assert buffer.backend == ("cma" if backend == "auto" else backend)
    out = bytearray(size)
    buffer.read_into(memoryview(out)).get(timeout=30)
    assert out == pattern(size, 1)
    new = pattern(size, 2)
    buffer.write_from(memoryview(new)).get(timeout=30)
    assert owner.digest.call_one(name).get() == hashlib.sha256(new).hexdigest()
    if size > 10:  # odd offsets and lengths, both ways
        piece = bytearray(size - 10)
        buffer.read_into(memoryview(piece), offset=7).get(timeout=30)
        assert piece == new[7:-3]
        buffer.write_from(memoryview(b"\xaa" * 5), offset=size - 6).get(timeout=30)
        expected = new[: size - 6] + b"\xaa" * 5 + new[-1:]
        assert owner.digest.call_one(name).get() == hashlib.sha256(expected).hexdigest()
    buffer.drop().get()


@pytest.mark.parametrize("backend", ["cma", "tcp"], indirect=True)
def test_256_mib(owner, backend):
    size = 256 << 20
    buffer = owner.make.call_one("big", size, -1).get()
    src = os.urandom(size)
    buffer.write_from(memoryview(src)).get(timeout=60)
    assert owner.digest.call_one("big").get() == hashlib.sha256(src).hexdigest()
    out = bytearray(size)
    buffer.read_into(memoryview(out)).get(timeout=60)
    assert out == src
    del out, src
    buffer.drop().get()
    owner.release.call_one("big").get()


@pytest.mark.parametrize("backend", ["cma", "tcp"], indirect=True)
def test_many_concurrent_transfers_into_one_buffer(owner, backend):
    pieces, piece = 32, 10_001
    buffer = owner.make.call_one(f"shared-{backend}", pieces * piece, -1).get()
    data = pattern(pieces * piece, 3)
    futures = [
        buffer.write_from(memoryview(data)[i * piece : (i + 1) * piece], offset=i * piece)
        for i in range(pieces)
    ]
    for future in futures:
        future.get(timeout=30)
    assert owner.digest.call_one(f"shared-{backend}").get() == hashlib.sha256(data).hexdigest()
    outs = [bytearray(piece) for _ in range(pieces)]
    action = RDMAAction()
    for i, out in enumerate(outs):
        action.read_remote(memoryview(out), buffer, offset=i * piece)
    action.submit(timeout=30).get()
    assert b"".join(outs) == data
    buffer.drop().get()


def test_a_holder_can_drop_and_the_owner_can_read_ours(owner):
    buffer = owner.make.call_one("dropme", 100, 4).get()
    buffer.drop().get(timeout=10)  # sent to the owner's server
    with pytest.raises(RDMABufferDropped):
        buffer.read_into(memoryview(bytearray(100))).get(timeout=10)
    mine = bytearray(b"controller memory")
    ours = monarch_rdma.RDMABuffer(memoryview(mine))
    assert owner.read_from.call_one(ours).get() == b"controller memory"


@pytest.mark.parametrize("backend", ["cma", "tcp"], indirect=True)
def test_owner_death_is_an_error_not_a_hang(backend):
    import monarch_actor
    from monarch_actor import this_host

    expected = Failures()  # the kill is reported to the controller: expected here
    monarch_actor.unhandled_fault_hook = expected.append
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        victim = procs.spawn("victim", Owner)
        buffer = victim.make.call_one("v", 64 << 20, -1).get()
        pid = victim.pid.call_one().get()
        out = bytearray(64 << 20)
        errors: list[BaseException] = []
        stop = threading.Event()

        reading = threading.Event()  # set once a read went through: the next is under way

        def keep_reading():
            while not stop.is_set():
                try:
                    buffer.read_into(memoryview(out)).get(timeout=30)
                except BaseException as error:
                    errors.append(error)
                    return
                reading.set()

        reader = threading.Thread(target=keep_reading)
        reader.start()
        assert reading.wait(30)
        began = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        reader.join(timeout=20)
        stop.set()
        assert not reader.is_alive(), "a transfer hung after its owner died"
        assert time.monotonic() - began < 10
        assert errors and isinstance(errors[0], RDMATransferError)
        with pytest.raises(RDMAOwnerGone, match=r"exited|cannot be reached"):
            buffer.read_into(memoryview(out)).get(timeout=30)
        assert expected.wait(10)
    finally:
        stop.set()
        procs.stop().get(timeout=30)


@pytest.mark.parametrize("backend", ["cma", "tcp"], indirect=True)
def test_a_large_transfer_shows_its_bytes_when_progress_is_shown(
    owner, backend, monkeypatch, capfd
):
    size = 256 << 20  # monarch_rdma._buffer.LARGE_TRANSFER: the smallest that shows a line
    buffer = owner.make.call_one("shown", size, -1).get()
    owner.fill.call_one("shown", 3).get()
    calls = []
    transfer = monarch_rdma._buffer.run_transfer
    line_for = monarch_rdma._buffer.progress
    advanced = []

    def counted(*args, **kwargs):
        calls.append(args[0].nbytes)  # the bytes of this call
        return transfer(*args, **kwargs)

    @contextlib.contextmanager
    def recorded(*args, **kwargs):
        with line_for(*args, **kwargs) as line:  # the real line, on stderr
            advance = line.advance
            line.advance = lambda n: (advanced.append(n), advance(n))
            yield line

    monkeypatch.setattr(monarch_rdma._buffer, "run_transfer", counted)
    monkeypatch.setattr(monarch_rdma._buffer, "progress", recorded)
    try:
        monkeypatch.setenv("MONARCH_PROGRESS", "always")
        out = bytearray(size)
        buffer.read_into(memoryview(out)).get(timeout=60)
        assert out == pattern(size, 3)
        shown = capfd.readouterr().err
        pid = owner.pid.call_one().get()
        assert f"RDMA: reading from pid {pid} on {socket.gethostname()}" in shown
        assert "/256.0" in shown and "MiB" in shown  # counted in bytes
        piece = monarch_rdma._buffer.PIECE
        assert calls == advanced == [piece] * 4  # each piece counted as it lands

        calls.clear()
        monkeypatch.setenv("MONARCH_PROGRESS", "never")
        buffer.write_from(memoryview(out)).get(timeout=60)
        assert capfd.readouterr().err == ""
        assert calls == [size]  # unseen, the backend moves it whole
    finally:
        del out
        buffer.drop().get()
        owner.release.call_one("shown").get()


@pytest.mark.parametrize("backend", ["cma"], indirect=True)
def test_a_backend_at_device_speed_moves_a_large_transfer_whole_and_shows_no_line(
    owner, backend, monkeypatch, capfd
):
    """``Registration.in_pieces=False`` (cuda_ipc's): each piece would cost a
    round trip, and a line for a sub-millisecond copy has nothing to show."""
    size = 256 << 20
    buffer = owner.make.call_one("whole", size, -1).get()
    owner.fill.call_one("whole", 5).get()
    registered = monarch_rdma._backends._registered
    monkeypatch.setitem(registered, "cma", dataclasses.replace(registered["cma"], in_pieces=False))
    calls = []
    transfer = monarch_rdma._buffer.run_transfer
    monkeypatch.setattr(
        monarch_rdma._buffer,
        "run_transfer",
        lambda t, *rest: (calls.append(t.nbytes), transfer(t, *rest))[1],
    )
    monkeypatch.setenv("MONARCH_PROGRESS", "always")
    out = bytearray(size)
    try:
        buffer.read_into(memoryview(out)).get(timeout=60)  # in this thread
        assert out == pattern(size, 5)
        assert "RDMA:" not in capfd.readouterr().err
        RDMAAction().read_remote(memoryview(out), buffer).write_remote(
            buffer, memoryview(bytearray(8))
        ).submit().get(timeout=60)  # two operations: the workers' path (its line advances
        assert sorted(calls) == [8, size, size]  # by operation), still each moved whole
    finally:
        del out
        buffer.drop().get()
        owner.release.call_one("whole").get()
