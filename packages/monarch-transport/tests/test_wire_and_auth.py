import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monarch_transport import AuthenticationError, DecodeError, MessageTooLarge
from monarch_transport._auth import ClientHandshake, ServerHandshake, job_secret
from monarch_transport._wire import Kind, join, small_message, split

frames = st.lists(st.binary(max_size=300), max_size=8)


@given(st.sampled_from(sorted(Kind.ALL)), frames)
def test_join_split_round_trip(kind, parts):
    got_kind, got = split(join(kind, parts, 1 << 20), 1 << 20)
    assert got_kind == kind
    assert [bytes(f) for f in got] == parts


@given(frames, st.integers(min_value=0, max_value=3000))
def test_a_small_message_is_the_joined_one_or_none(parts, limit):
    views = [memoryview(bytearray(p)) if i % 2 else p for i, p in enumerate(parts)]
    whole = join(Kind.DATA, parts, 1 << 20)
    assert small_message(Kind.DATA, views, 1 << 20, limit) == (
        whole if len(whole) <= limit else None
    )


def test_a_small_message_over_the_maximum_is_refused():
    with pytest.raises(MessageTooLarge, match="100 bytes exceeds the maximum of 99"):
        small_message(Kind.DATA, [b"x" * 60, b"y" * 40], 99, 1 << 16)


@given(st.binary(max_size=200))
def test_split_rejects_garbage_with_decode_errors_only(data):
    with contextlib.suppress(DecodeError, MessageTooLarge):
        split(data, 1 << 20)


@given(frames.filter(lambda p: sum(map(len, p)) > 0), st.data())
def test_split_rejects_every_truncation(parts, data):
    whole = join(Kind.DATA, parts, 1 << 20)
    cut = data.draw(st.integers(0, len(whole) - 1))
    with pytest.raises(DecodeError):
        split(whole[:cut], 1 << 20)


def test_size_limits():
    with pytest.raises(MessageTooLarge, match="exceeds the maximum of 10 bytes"):
        join(Kind.DATA, [b"x" * 11], 10)
    announced = struct.pack("<BI", Kind.DATA, 1) + struct.pack("<Q", 1 << 40)
    with pytest.raises(MessageTooLarge, match="peer announced"):
        split(announced, 1 << 20)


def handshake(client_secret: bytes, server_secret: bytes, name: str = "me"):
    client = ClientHandshake(client_secret, name)
    server = ServerHandshake(server_secret)
    challenge = server.step(*client.hello())
    welcome = server.step(*client.answer(*challenge))
    client.check(*welcome)
    return server


def test_handshake_succeeds_with_one_secret():
    server = handshake(b"k" * 32, b"k" * 32, "worker-3")
    assert server.done and server.peer_name == "worker-3"


def test_client_detects_a_server_without_the_secret():
    with pytest.raises(AuthenticationError, match="listener does not know this job's secret"):
        handshake(b"k" * 32, b"q" * 32)


def test_a_client_that_refuses_the_server_tells_it_why():
    client = ClientHandshake(b"k" * 32)
    server = ServerHandshake(b"q" * 32)
    challenge = server.step(*client.hello())
    with pytest.raises(AuthenticationError):
        client.answer(*challenge)
    assert client.objection is not None
    with pytest.raises(AuthenticationError, match="holds another secret"):
        server.step(Kind.DENIED, client.objection)


def test_a_client_refused_by_the_server_has_no_objection_to_send():
    client = ClientHandshake(b"k" * 32)
    with pytest.raises(AuthenticationError, match="refused us"):
        client.answer(Kind.DENIED, b"too many handshakes")
    assert client.objection is None


def test_server_rejects_a_replayed_proof():
    secret = b"k" * 32
    client = ClientHandshake(secret)
    first = ServerHandshake(secret)
    proof = client.answer(*first.step(*client.hello()))
    second = ServerHandshake(secret)  # new nonce: the old proof is worthless
    second.step(*client.hello())
    with pytest.raises(AuthenticationError, match="does not know this job's secret"):
        second.step(*proof)


def test_server_rejects_out_of_order_steps():
    server = ServerHandshake(b"k" * 32)
    with pytest.raises(AuthenticationError, match="expected a HELLO"):
        server.step(Kind.PROOF, b"x" * 32)
    with pytest.raises(AuthenticationError, match="expected a HELLO"):
        server.step(Kind.DATA, b"x" * 40)


def test_job_secret_is_made_once_and_inherited(monkeypatch):
    monkeypatch.delenv("MONARCH_JOB_SECRET", raising=False)
    first = job_secret()
    assert len(first) == 32
    assert job_secret() == first  # exported for child processes
    monkeypatch.setenv("MONARCH_JOB_SECRET", "zz")
    with pytest.raises(AuthenticationError, match="must be hex"):
        job_secret()
    monkeypatch.setenv("MONARCH_JOB_SECRET", "ab" * 4)
    with pytest.raises(AuthenticationError, match="at least 16 bytes"):
        job_secret()


def test_a_refusing_peer_writes_none_of_its_words_into_the_listeners_error():
    server = ServerHandshake(b"q" * 32)
    server.step(*ClientHandshake(b"k" * 32).hello())
    with pytest.raises(AuthenticationError) as refused:
        server.step(Kind.DENIED, b"\n2026-11-29 ERROR forged line \x1b[2J")
    assert "forged" not in str(refused.value) and "\x1b" not in str(refused.value)


@pytest.mark.parametrize("step", ["answer", "check"])
def test_a_listeners_refusal_reaches_the_client_without_forged_lines(step):
    client = ClientHandshake(b"k" * 32)
    forged = b"busy\n2026-11-29 ERROR forged line \x1b[2J" + b"x" * 500
    with pytest.raises(AuthenticationError) as refused:
        getattr(client, step)(Kind.DENIED, forged)
    text = str(refused.value)
    assert "busy?2026" in text and "\n" not in text and "\x1b" not in text
    assert "x" * 300 not in text
