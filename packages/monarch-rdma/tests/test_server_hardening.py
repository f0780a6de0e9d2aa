"""The owner's data-plane server against slow, numerous or malformed peers:
one deadline for the whole handshake, a bound on connections still in their
handshake, and malformed requests answered (or the connection closed) with
a log line, while the server keeps serving everyone else."""

import concurrent.futures
import json
import logging
import os
import select
import socket
import threading
import time

import pytest

from monarch_actor.testing import blocks_ctrl_c, threads_named, wait_for
from monarch_rdma import RDMABuffer, _control, _server, _wire


def served(buffer):
    """A full read through the owner's server (tcp), as any other peer would."""
    out = bytearray(buffer.size())
    handle = buffer._handle
    _control.request(handle, _wire.Op.PING, time.monotonic() + 10)
    with _control.connection(handle, time.monotonic() + 10) as chan:
        chan.send([_wire.request_header(1, handle.buffer_id, handle.token, 0, len(out)), b"", b""])
        _control.read_answer(chan, handle, time.monotonic() + 10, memoryview(out))
    return bytes(out)


@pytest.fixture
def buffer():
    data = bytearray(b"still served")
    buffer = RDMABuffer(memoryview(data))
    yield buffer
    buffer.drop().get()


def in_handshake(address):
    """A connection the server has taken into its handshake: it said HELLO
    and has the server's challenge, and says nothing more."""
    sock = socket.create_connection(address, timeout=5)
    sock.sendall(_wire.MAGIC + os.urandom(_wire.NONCE))
    wanted = _wire.NONCE + 1 + _wire.MAC  # the server's nonce, its flags and its proof
    got = b""
    while len(got) < wanted:
        chunk = sock.recv(wanted - len(got))
        assert chunk, "the server closed a connection it should hold in its handshake"
        got += chunk
    return sock


def closed_within(sock, seconds):
    """Whether the peer closed ``sock`` within ``seconds``."""
    ready, _, _ = select.select([sock], [], [], seconds)
    if not ready:
        return False
    try:
        return sock.recv(100) == b""
    except ConnectionResetError:
        return True


def test_a_slow_drip_handshake_is_cut_off_at_one_deadline(buffer, monkeypatch):
    monkeypatch.setattr(_server, "HANDSHAKE_TIMEOUT", 1.0)
    hello = _wire.MAGIC + b"\0" * 16
    with socket.create_connection(buffer._handle.owner.server, timeout=5) as sock:
        sent = 0
        for byte in hello:  # one byte every 0.2 s: each recv is quick, the whole is not
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break
            sent += 1
            if closed_within(sock, 0.2):
                break
        else:
            pytest.fail("a peer dripping its handshake was never cut off")
    # cut off by the deadline of the whole handshake (a per-recv deadline never fires
    # here), and not at once: a merely slow peer got some of its bytes in first
    assert 1 < sent < len(hello), (sent, len(hello))
    assert served(buffer) == b"still served"


def test_connections_in_their_handshake_are_bounded(buffer, monkeypatch, caplog):
    monkeypatch.setattr(_server, "MAX_UNAUTHENTICATED", 2)
    address = buffer._handle.owner.server
    idle = [in_handshake(address) for _ in range(2)]
    try:
        with caplog.at_level(logging.WARNING, logger="monarch.rdma"):
            extra = socket.create_connection(address, timeout=5)
            with extra:
                assert closed_within(extra, 2.0)  # beyond the bound: closed at once
        assert "already in their handshake" in caplog.text
        assert not any(closed_within(sock, 0) for sock in idle)  # the others still wait
        # an honest peer meeting the bound tries again until its deadline, and gets in
        refused = threading.Event()
        handshake = _control.client_handshake

        def noted(*args):
            try:
                return handshake(*args)
            except ConnectionError:
                refused.set()
                raise

        monkeypatch.setattr(_control, "client_handshake", noted)
        opened = concurrent.futures.ThreadPoolExecutor(1).submit(
            _control.dedicated, buffer._handle, time.monotonic() + 10
        )
        assert refused.wait(10)  # closed at once, and tries again
        assert not opened.done()
    finally:
        for sock in idle:
            sock.close()
    with opened.result(timeout=10) as sock:
        _control.exchange(sock, buffer._handle, _wire.Op.PING, time.monotonic() + 5)

    def pinged() -> bool:
        try:
            with authenticated(buffer) as sock:
                send(sock, buffer, _wire.Op.PING, b"")
                return recv_answer(sock)[0] == _wire.Status.OK
        except OSError:
            return False

    # their threads notice the close and free their slots: new peers get in
    assert wait_for(pinged, 5)
    assert served(buffer) == b"still served"


def authenticated(buffer):
    """A connection through the handshake, as the control client opens them
    (sealed or not, as the integrity setting says)."""
    address = buffer._handle.owner.server
    sock = socket.create_connection(address, timeout=5)
    return _wire.client_handshake(sock, "tcp", address[0])


def send(chan, buffer, op, args_bytes, offset=0):
    handle = buffer._handle
    header = _wire.request_header(
        op, handle.buffer_id, handle.token, offset, 0, arg_len=len(args_bytes)
    )
    chan.send([header, args_bytes, b""])


def recv_answer(chan):
    header = chan.receive(_wire.ANSWER.size)
    status, msg_len, value = _wire.ANSWER.unpack(header)
    text = chan.receive(msg_len)
    chan.verify([header, text])
    return status, text.decode(), value


@pytest.mark.parametrize(
    ("args", "problem"),
    [(b"{nope", "not JSON"), (b"\xff\xfe", "not JSON"), (b"[1, 2]", "JSON list, not an object")],
)
def test_malformed_arguments_are_answered_and_the_server_serves_on(buffer, caplog, args, problem):
    with caplog.at_level(logging.WARNING, logger="monarch.rdma"), authenticated(buffer) as sock:
        send(sock, buffer, _wire.Op.PING, args)
        status, message, _ = recv_answer(sock)
        assert status == _wire.Status.BAD_REQUEST
        assert "malformed RDMA data-plane request" in message and problem in message
        assert closed_within(sock.sock, 5)  # what followed cannot be trusted: closed cleanly
    assert "bad request" in caplog.text
    assert served(buffer) == b"still served"


def test_oversized_arguments_close_the_connection(buffer, caplog):
    handle = buffer._handle
    with caplog.at_level(logging.WARNING, logger="monarch.rdma"), authenticated(buffer) as chan:
        header = _wire.request_header(
            _wire.Op.PING, handle.buffer_id, handle.token, arg_len=_wire.MAX_ARGS + 1
        )
        chan.sock.sendall(header)  # refused on its header: nothing more is read
        status, message, _ = recv_answer(chan)
        assert status == _wire.Status.BAD_REQUEST and "bytes of arguments" in message
        assert closed_within(chan.sock, 5)
    assert served(buffer) == b"still served"


def test_bad_arguments_to_an_operation_are_an_error_answer_not_a_dead_thread(buffer, caplog):
    with caplog.at_level(logging.ERROR, logger="monarch.rdma"), authenticated(buffer) as sock:
        send(sock, buffer, _wire.Op.FETCH_ADD, json.dumps({"wrong": 1}).encode())
        status, message, _ = recv_answer(sock)
        assert status == _wire.Status.FAILED and "KeyError" in message
        send(sock, buffer, 250, b"")  # an operation nobody serves
        status, message, _ = recv_answer(sock)
        assert status == _wire.Status.BAD_REQUEST and "unknown" in message
        send(sock, buffer, _wire.Op.PING, b"")  # the same connection serves on
        assert recv_answer(sock)[0] == _wire.Status.OK
    assert "request 5 failed" in caplog.text  # logged, not silent


def test_a_failing_connection_thread_is_logged_and_the_server_serves_on(
    buffer, monkeypatch, caplog
):
    def broken(*args):
        raise RuntimeError("an unexpected failure inside the server")

    monkeypatch.setattr(_server.DataServer, "_handle", broken)
    with caplog.at_level(logging.ERROR, logger="monarch.rdma"), authenticated(buffer) as sock:
        send(sock, buffer, _wire.Op.PING, b"")
        assert closed_within(sock.sock, 5)
    assert "failed; closing it" in caplog.text
    monkeypatch.undo()
    assert served(buffer) == b"still served"


def test_polling_for_a_request_returns_when_it_comes_and_consumes_nothing():
    """``Channel.poll``: returns when bytes are waiting (left for the
    receive) or the peer has closed, even with a window of an hour (the
    suite's timeout would catch a poll that waited it out), and returns
    when its window ends with nothing received."""
    ours, theirs = socket.socketpair()
    chan = _wire.Channel(ours, "test")
    with ours, theirs:
        chan.poll(0.01)  # nothing comes: returns at the end of its window
        theirs.sendall(b"request")
        chan.poll(3600.0)  # returns on the bytes, not the window
        chan.settimeout(1.0)
        assert chan.receive(7) == b"request"  # peeked, not consumed
        theirs.close()
        chan.poll(3600.0)  # returns on the close
        with pytest.raises(ConnectionError):
            chan.receive(1)


def test_a_connection_that_polls_for_its_next_request_is_served(buffer, monkeypatch):
    """An operation may ask the server to poll for the connection's next
    request (a CUDA copy does): requests on it are served as before."""
    from monarch_rdma import _backend

    made = []
    real = _backend.ConnectionResources

    def polling() -> _backend.ConnectionResources:
        resources = real()
        resources.poll_next = 0.01
        made.append(resources)
        return resources

    monkeypatch.setattr(_server, "ConnectionResources", polling)
    _control._pool.clear()  # a new connection, made with the patched resources
    for _ in range(3):
        assert served(buffer) == b"still served"
    assert made


def test_the_servers_threads_leave_ctrl_c_to_the_script(buffer):
    with in_handshake(buffer._handle.owner.server):
        assert wait_for(lambda: threads_named("monarch-rdma-conn"))
        threads = [
            *threads_named("monarch-rdma-server"),
            *threads_named("monarch-rdma-server-local"),
            *threads_named("monarch-rdma-conn"),
        ]
        assert len(threads) >= 2 and all(blocks_ctrl_c(thread) for thread in threads)
