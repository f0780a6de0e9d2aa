"""What a process does with a message it cannot deliver: whoever waits for
an answer hears why; one nobody waits for is dropped without a line per
message (a job ending with broadcasts in flight printed hundreds)."""

from __future__ import annotations

import logging

from monarch_actor._core.wire import Key, Kind, Op
from monarch_transport import encode_header


def broadcast() -> list[bytes]:
    header = {
        Key.KIND: Kind.CALL,
        Key.OP: Op.CALL,
        Key.ACTOR: "a",
        Key.METHOD: "hit",
        Key.DESTS: ["ipc:///proc-3"],  # the end of its branch: nobody further to skip
        Key.SEQS: [1],
    }
    return [encode_header(header), b"payload"]


def test_a_broadcast_for_a_peer_that_is_gone_is_dropped_quietly(bare_runtime, caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="monarch")
    for _ in range(100):
        bare_runtime.undeliverable(
            broadcast(), "ipc:///proc-3", "the listener closed the connection"
        )
    said = [r for r in caplog.records if "dropped a message" in r.getMessage()]
    assert len(said) == 100 and all(r.levelno == logging.DEBUG for r in said)


def test_a_drop_that_is_a_mistake_is_said_loudly(bare_runtime, caplog) -> None:
    bare_runtime.undeliverable(
        broadcast(), "ipc:///proc-3", "no actor a in this process", loud=True
    )
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "no actor a in this process" in caplog.text
