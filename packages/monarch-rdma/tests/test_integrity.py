"""Integrity of the data plane after the handshake, against an on-path relay.

A relay that does not know the job's secret sits between a reader or writer
and the owner's data-plane server, over real TCP: it forwards the real
handshake, then rewrites a byte of a write's data or of a read's answer,
drops, replays or injects a message, or tries to strip the demand for tags
from the handshake. Every such transfer fails with an error that says so,
nothing of a tampered request is acted upon (a tampered write leaves the
buffer as it was), the connection is closed and the event is logged; a
relay that only forwards changes nothing.

Integrity is forced on (``MONARCH_TRANSPORT_INTEGRITY=always``): everything
here runs on loopback, which ``auto`` spares.
"""

import contextlib
import dataclasses
import logging
import os
import socket
import struct
import threading

import pytest

import monarch_rdma
from monarch_rdma import RDMAAction, RDMABuffer, RDMATransferError, _control, _wire

UP_HANDSHAKE = len(_wire.MAGIC) + _wire.NONCE + 1 + _wire.MAC  # hello; flags and proof
DOWN_HANDSHAKE = _wire.NONCE + 1 + _wire.MAC + 1  # nonce, flags and proof; OK
HEADER = _wire.REQUEST.size
ANSWER = _wire.ANSWER.size
TAG = _wire.TAG
WAIT = 10.0  # the longest any event below may take to come


class Edit:
    """What the relay does to one direction of one connection, by position
    in that direction's byte stream: flip a byte, drop a range, insert
    bytes before a position, or send a range again right after it."""

    def __init__(self, flip=(), drop=None, insert=None, repeat=None):
        self.flip = set(flip)
        self.drop = drop  # (start, end)
        self.insert = insert  # (at, bytes)
        self.repeat = repeat  # (start, end)
        self.seen = bytearray()

    def __call__(self, chunk: bytes) -> bytes:
        start = len(self.seen)
        self.seen += chunk
        data = bytearray(chunk)
        for at in self.flip:
            if start <= at < start + len(data):
                data[at - start] ^= 0x01
        out = bytearray()
        for index, byte in enumerate(data):
            position = start + index
            if self.insert and position == self.insert[0]:
                out += self.insert[1]
            if not (self.drop and self.drop[0] <= position < self.drop[1]):
                out.append(byte)
            if self.repeat and position == self.repeat[1] - 1:
                out += self.seen[self.repeat[0] : self.repeat[1]]
        return bytes(out)


class Relay:
    """A TCP relay to ``target`` that knows no secret. Each connection's
    directions pass through the edits ``make_edits(n)`` gives for the n-th
    connection (None: forward as is). Records what went each way, and
    sets events when either side closes."""

    def __init__(self, target, make_edits=lambda n: (None, None)):
        self.target = target
        self.make_edits = make_edits
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()[:2]
        self.upstream: list[bytearray] = []  # per connection: what the client sent, as sent
        self.downstream: list[bytearray] = []
        self.server_closed = threading.Event()  # the server closed a connection
        self.client_closed = threading.Event()  # a client closed a connection
        self.accepted = threading.Semaphore(0)
        self.threads: list[threading.Thread] = []
        self.sockets: list[socket.socket] = []
        self._start(self._accept)

    def _start(self, target, *args):
        thread = threading.Thread(target=target, args=args, daemon=True)
        self.threads.append(thread)
        thread.start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            self.sockets += [client, server]
            n = len(self.upstream)
            up, down = self.make_edits(n)
            self.upstream.append(bytearray())
            self.downstream.append(bytearray())
            self._start(self._pipe, client, server, up, self.upstream[n], self.client_closed)
            self._start(self._pipe, server, client, down, self.downstream[n], self.server_closed)
            self.accepted.release()

    @staticmethod
    def _pipe(src, dst, edit, record, closed):
        """Forward until ``src`` closes (then set ``closed``, and close
        ``dst``'s way in turn) or ``dst`` can take no more."""
        while True:
            try:
                chunk = src.recv(1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                closed.set()
                with contextlib.suppress(OSError):
                    dst.shutdown(socket.SHUT_WR)
                return
            record += chunk
            try:
                dst.sendall(edit(chunk) if edit else chunk)
            except OSError:
                return

    def handle(self, buffer):
        """``buffer`` as reached through this relay."""
        handle = buffer._handle
        owner = dataclasses.replace(handle.owner, server=self.address)
        return RDMABuffer._from_handle(dataclasses.replace(handle, owner=owner))

    def close(self):
        self.listener.close()
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class LogEvents(logging.Handler):
    """Warnings of ``monarch.rdma``, waited for by what they say."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.records: list[str] = []
        self.changed = threading.Condition()

    def emit(self, record):
        with self.changed:
            self.records.append(record.getMessage())
            self.changed.notify_all()

    def wait_for(self, *words):
        def found():
            return next((r for r in self.records if all(w in r for w in words)), None)

        with self.changed:
            assert self.changed.wait_for(found, WAIT), (words, self.records)
            return found()


@pytest.fixture
def sealed(monkeypatch):
    """Integrity forced on, the tcp backend, a clean connection pool; and the
    warnings of ``monarch.rdma``."""
    monkeypatch.setenv("MONARCH_TRANSPORT_INTEGRITY", "always")
    old = monarch_rdma.configure(backend="tcp")
    logger = logging.getLogger("monarch.rdma")
    events = LogEvents()
    logger.addHandler(events)
    _control._pool.clear()
    yield events
    logger.removeHandler(events)
    _control._pool.clear()
    monarch_rdma.configure(**dataclasses.asdict(old))


@pytest.fixture
def relays():
    made = []

    def make(buffer, make_edits=lambda n: (None, None)):
        relay = Relay(buffer._handle.owner.server, make_edits)
        made.append(relay)
        return relay

    yield make
    for relay in made:
        relay.close()


def first(up=None, down=None):
    """Edits for the first connection only."""
    return lambda n: (up, down) if n == 0 else (None, None)


def owned(size, seed=1):
    data = bytearray(os.urandom(size)) if seed else bytearray(size)
    return data, RDMABuffer(memoryview(data))


# -- a relay that only forwards -----------------------------------------------------------


def test_a_plain_relay_forwards_sealed_traffic(sealed, relays):
    data, buffer = owned(5000)
    relay = relays(buffer)
    far = relay.handle(buffer)
    out = bytearray(5000)
    far.read_into(memoryview(out)).get(timeout=WAIT)
    assert out == data
    new = os.urandom(3000)
    far.write_from(memoryview(new), offset=1000).get(timeout=WAIT)
    assert data[1000:4000] == new
    # one connection, reused; every message carries its tag
    assert len(relay.upstream) == 1
    assert len(relay.upstream[0]) == UP_HANDSHAKE + (HEADER + TAG) + (HEADER + 3000 + TAG)
    assert len(relay.downstream[0]) == DOWN_HANDSHAKE + (ANSWER + 5000 + TAG) + (ANSWER + TAG)
    assert not sealed.records


# ``auto`` seals loopback TCP too: what decides is this side's own address (a port another
# local user may have taken), never the peer's source address
@pytest.mark.parametrize(("mode", "tagged"), [("auto", True), ("off", False), ("always", True)])
def test_loopback_is_sealed_as_the_setting_says(sealed, relays, monkeypatch, mode, tagged):
    monkeypatch.setenv("MONARCH_TRANSPORT_INTEGRITY", mode)
    data, buffer = owned(100)
    relay = relays(buffer)
    relay.handle(buffer).write_from(memoryview(b"x" * 100)).get(timeout=WAIT)
    assert data == b"x" * 100
    assert len(relay.upstream[0]) == UP_HANDSHAKE + HEADER + 100 + (TAG if tagged else 0)


# -- requests ---------------------------------------------------------------------------------


def test_a_rewritten_write_is_refused_before_it_lands(sealed, relays):
    data, buffer = owned(4096)
    before = bytes(data)
    relay = relays(buffer, first(up=Edit(flip=[UP_HANDSHAKE + HEADER + 100])))
    with pytest.raises(RDMATransferError, match="failed its integrity check") as failure:
        relay.handle(buffer).write_from(memoryview(os.urandom(4096))).get(timeout=WAIT)
    assert "nothing of that request was served" in str(failure.value)
    assert data == before  # not one byte of it, the genuine ones included
    assert relay.server_closed.wait(WAIT)  # the server closed the connection
    upstream = relay.sockets[1].getsockname()
    sealed.wait_for("failed its integrity check", f"{upstream[0]}:{upstream[1]}")


def test_a_dropped_request_fails_the_next_one(sealed, relays):
    monarch_rdma.configure(tcp_streams=1, max_chunk_size_mb=1)  # three requests, one connection
    data, buffer = owned(3 << 20)
    before = bytes(data)
    piece = HEADER + (1 << 20) + TAG
    relay = relays(buffer, first(up=Edit(drop=(UP_HANDSHAKE, UP_HANDSHAKE + piece))))
    with pytest.raises(RDMATransferError, match="failed its integrity check"):
        relay.handle(buffer).write_from(memoryview(os.urandom(3 << 20))).get(timeout=WAIT)
    assert data == before
    assert relay.server_closed.wait(WAIT)
    sealed.wait_for("failed its integrity check")


def test_a_replayed_atomic_is_not_applied_twice(sealed, relays):
    data, buffer = owned(8, seed=0)
    request = HEADER + len(b'{"add": 1}') + TAG
    relay = relays(buffer, first(up=Edit(repeat=(UP_HANDSHAKE, UP_HANDSHAKE + request))))
    far = relay.handle(buffer)
    old = bytearray(8)
    RDMAAction().fetch_add(far, memoryview(old), 1).submit().get(timeout=WAIT)
    assert old == bytes(8)
    sealed.wait_for("failed its integrity check")  # the copy: refused, not served
    assert relay.server_closed.wait(WAIT)
    assert struct.unpack("<Q", data)[0] == 1  # added once
    # the pooled connection is closed; the next request opens a new one and works
    _control._pool.clear()
    RDMAAction().fetch_add(far, memoryview(old), 1).submit().get(timeout=WAIT)
    assert struct.unpack("<Q", data)[0] == 2


def test_an_injected_request_is_refused_and_fails_the_transfer(sealed, relays):
    data, buffer = owned(64)
    before = bytes(data)
    handle = buffer._handle
    forged = _wire.request_header(2, handle.buffer_id, handle.token, 0, 4, data=True)
    forged += b"EVIL" + os.urandom(TAG)  # a tag it cannot compute
    relay = relays(buffer, first(up=Edit(insert=(UP_HANDSHAKE, forged))))
    with pytest.raises(RDMATransferError, match="failed its integrity check"):
        relay.handle(buffer).write_from(memoryview(b"good" * 16)).get(timeout=WAIT)
    assert data == before
    assert relay.server_closed.wait(WAIT)
    sealed.wait_for("failed its integrity check")


# -- answers ----------------------------------------------------------------------------------


def test_a_rewritten_read_fails_and_is_logged(sealed, relays):
    data, buffer = owned(4096)
    relay = relays(buffer, first(down=Edit(flip=[DOWN_HANDSHAKE + ANSWER + 7])))
    out = bytearray(4096)
    with pytest.raises(RDMATransferError, match="failed its integrity check") as failure:
        relay.handle(buffer).read_into(memoryview(out)).get(timeout=WAIT)
    assert "look at the network path" in str(failure.value)
    assert relay.client_closed.wait(WAIT)  # the reader closed the connection
    sealed.wait_for("answer from the RDMA data-plane server", "failed its integrity check")
    assert out[7] == data[7] ^ 0x01  # it was received in place, and the read failed


def test_an_injected_answer_fails_the_transfer(sealed, relays):
    _, buffer = owned(8, seed=0)
    forged = _wire.ANSWER.pack(_wire.Status.OK, 0, 12345) + os.urandom(TAG)
    relay = relays(buffer, first(down=Edit(insert=(DOWN_HANDSHAKE, forged))))
    old = bytearray(8)
    with pytest.raises(RDMATransferError, match="failed its integrity check"):
        RDMAAction().fetch_add(relay.handle(buffer), memoryview(old), 1).submit().get(timeout=WAIT)
    assert old == bytes(8)  # the forged value was not handed over
    assert relay.client_closed.wait(WAIT)


def test_a_dropped_answer_fails_the_next_one(sealed, relays):
    monarch_rdma.configure(tcp_streams=1, max_chunk_size_mb=1)
    _, buffer = owned(2 << 20)
    answer = ANSWER + (1 << 20) + TAG
    relay = relays(buffer, first(down=Edit(drop=(DOWN_HANDSHAKE, DOWN_HANDSHAKE + answer))))
    out = bytearray(2 << 20)
    with pytest.raises(RDMATransferError, match="failed its integrity check"):
        relay.handle(buffer).read_into(memoryview(out)).get(timeout=WAIT)
    assert relay.client_closed.wait(WAIT)


# -- the handshake ----------------------------------------------------------------------------


def test_the_demand_for_tags_cannot_be_stripped(sealed, relays):
    """Clearing a side's demand in the handshake breaks that side's proof:
    the connection is refused, and an honest client's next one is sealed."""
    data, buffer = owned(64)
    client_flags = len(_wire.MAGIC) + _wire.NONCE
    relay = relays(buffer, first(up=Edit(flip=[client_flags])))
    relay.handle(buffer).write_from(memoryview(b"y" * 64)).get(timeout=WAIT)  # on a retry
    assert data == b"y" * 64
    sealed.wait_for("refused an RDMA data-plane connection", "secret")
    assert len(relay.upstream) == 2  # the first was refused
    assert len(relay.upstream[1]) == UP_HANDSHAKE + HEADER + 64 + TAG

    server_flags = _wire.NONCE
    relay = relays(buffer, lambda n: (None, Edit(flip=[server_flags])))
    with pytest.raises(RDMATransferError, match="altered on the way"):
        relay.handle(buffer).write_from(memoryview(b"z" * 64)).get(timeout=WAIT)
    assert data == b"y" * 64


# -- an owner in another process --------------------------------------------------------------


def test_a_tampered_write_leaves_another_process_buffer_as_it_was(sealed, relays, owner):
    buffer = owner.make.call_one("integrity", 8192, 3).get()
    digest = owner.digest.call_one("integrity").get()
    relay = relays(buffer, first(up=Edit(flip=[UP_HANDSHAKE + HEADER + 8000])))
    with pytest.raises(RDMATransferError, match="failed its integrity check"):
        relay.handle(buffer).write_from(memoryview(bytes(8192))).get(timeout=WAIT)
    assert relay.server_closed.wait(WAIT)
    assert owner.digest.call_one("integrity").get() == digest
    relay.handle(buffer).write_from(memoryview(bytes(8192))).get(timeout=WAIT)  # next: genuine
    assert owner.digest.call_one("integrity").get() != digest
    owner.release.call_one("integrity").get()


def test_a_large_write_and_read_through_a_relay(sealed, relays):
    """Messages large enough to be tagged beside their sending, staged whole
    by the server, over two streams."""
    data, buffer = owned(12 << 20)
    relay = relays(buffer)
    far = relay.handle(buffer)
    new = os.urandom(12 << 20)
    far.write_from(memoryview(new)).get(timeout=WAIT)
    out = bytearray(12 << 20)
    far.read_into(memoryview(out)).get(timeout=WAIT)
    assert data == new and out == new
    assert len(relay.upstream) == 2  # two streams


# -- refusals on a sealed connection ----------------------------------------------------------


def test_refused_writes_keep_a_sealed_connection_in_step(sealed, buffer_for_raw):
    """A write the owner refuses (read-only, dropped) still has its data
    staged and checked, then dropped: the next request on the same
    connection is served."""
    chan, handle = buffer_for_raw()
    readonly = RDMABuffer(memoryview(bytes(64)))
    gone = RDMABuffer(memoryview(bytearray(64)))
    gone.drop().get(timeout=WAIT)
    for target, status in [
        (readonly._handle, _wire.Status.READONLY),
        (gone._handle, _wire.Status.DROPPED),
        (handle, _wire.Status.OK),
    ]:
        header = _wire.request_header(2, target.buffer_id, target.token, 0, 64, data=True)
        chan.send([header, b"", b"w" * 64])
        assert raw_answer(chan)[0] == status
    data = bytearray(64)
    header = _wire.request_header(1, handle.buffer_id, handle.token, 0, 64)
    chan.send([header, b"", b""])
    header = chan.receive(ANSWER)
    assert _wire.ANSWER.unpack(header)[0] == _wire.Status.OK
    chan.receive_into(memoryview(data))  # a read's data follows its header, then the tag
    chan.verify([header, data])
    assert data == b"w" * 64
    assert not sealed.records


def raw_answer(chan):
    """(status, text) of an answer that carries no data, its tag checked."""
    header = chan.receive(ANSWER)
    status, msg_len, _ = _wire.ANSWER.unpack(header)
    text = chan.receive(msg_len)
    chan.verify([header, text])
    return status, text


def test_malformed_requests_on_a_sealed_connection(sealed, buffer_for_raw):
    """Arguments that are not JSON are answered only once their tag checks;
    a write longer than one request may carry is refused on its header."""
    chan, handle = buffer_for_raw()
    assert chan.sealed
    chan.send([_wire.request_header(_wire.Op.PING, handle.buffer_id, handle.token, arg_len=5),
               b"{nope", b""])  # fmt: skip
    status, text = raw_answer(chan)
    assert status == _wire.Status.BAD_REQUEST and b"not JSON" in text
    sealed.wait_for("bad request")

    chan, handle = buffer_for_raw()
    too_long = _wire.MAX_DATA + 1
    chan.sock.sendall(
        _wire.request_header(2, handle.buffer_id, handle.token, 0, too_long, data=True)
    )
    status, text = raw_answer(chan)
    assert status == _wire.Status.BAD_REQUEST and b"bytes of data" in text


@pytest.fixture
def buffer_for_raw():
    opened = []

    def make():
        buffer = RDMABuffer(memoryview(bytearray(64)))
        address = buffer._handle.owner.server
        chan = _wire.client_handshake(socket.create_connection(address, timeout=WAIT), "tcp",
                                     address[0])  # fmt: skip
        opened.append((chan, buffer))
        return chan, buffer._handle

    yield make
    for chan, buffer in opened:
        chan.close()
        buffer.drop().get(timeout=WAIT)
