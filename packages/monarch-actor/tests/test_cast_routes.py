"""Which way a cast leaves the caller: a small call to a few ranks goes
straight to each of them, on other hosts too; a broadcast, a large
argument or more ranks than the fan-out take the host-aware tree, which
crosses each host boundary once."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from monarch_actor._core.router import DIRECT_CALL, Runtime
from monarch_actor._core.wire import Key, Kind
from monarch_mesh import Shape, Slice
from monarch_transport import decode_header, encode_header

OWN = "tcp://10.0.0.9:5000"


def hosts(n_hosts: int, per_host: int) -> list[str]:
    return [f"tcp://10.0.0.{h + 1}:{4000 + p}" for h in range(n_hosts) for p in range(per_host)]


@pytest.fixture
def sent() -> Iterator[tuple[Runtime, list[tuple[str, dict[str, Any]]]]]:
    """A runtime (never started) whose sends are recorded, not written."""
    loop = asyncio.new_event_loop()
    runtime = Runtime(loop, SimpleNamespace(address=OWN), "controller")  # type: ignore[arg-type]
    log: list[tuple[str, dict[str, Any]]] = []

    def record(address: str, frames: Any, batch: bool = False) -> None:
        log.append((address, decode_header(frames)))

    runtime.send_frames = record  # type: ignore[method-assign]
    yield runtime, log
    loop.close()


def cast(runtime: Runtime, addresses: list[str], payload: bytes, batch: bool) -> None:
    header = {Key.KIND: Kind.CALL, Key.ACTOR: "actor-1", Key.OP: "call"}
    shape = Shape(["procs"], Slice.new_row_major([len(addresses)]))
    frames = [encode_header(header), payload]
    runtime.cast(shape, addresses, header, frames, batch=batch)


def test_a_small_call_goes_straight_to_every_rank(sent: Any) -> None:
    runtime, log = sent
    addresses = hosts(3, 2)
    cast(runtime, addresses, b"x" * 100, batch=False)
    assert [address for address, _ in log] == addresses
    assert [h[Key.BRANCH] for _, h in log] == [[i, i + 1] for i in range(6)]
    assert [h[Key.SEQS] for _, h in log] == [[1]] * 6


@pytest.mark.parametrize(
    ("payload", "batch"),
    [(b"x" * 100, True), (b"x" * (DIRECT_CALL + 1), False)],
    ids=["a broadcast", "a large call"],
)
def test_broadcasts_and_large_calls_cross_each_host_boundary_once(
    sent: Any, payload: bytes, batch: bool
) -> None:
    runtime, log = sent
    addresses = hosts(3, 2)
    cast(runtime, addresses, payload, batch=batch)
    assert [address for address, _ in log] == addresses[::2]  # each host's first proc
    assert [h[Key.BRANCH] for _, h in log] == [[0, 2], [2, 4], [4, 6]]
    assert [h[Key.DESTS] for _, h in log] == [addresses[i : i + 2] for i in (0, 2, 4)]


def test_a_call_to_more_ranks_than_the_fanout_takes_the_tree(sent: Any) -> None:
    runtime, log = sent
    addresses = hosts(2, runtime.fanout)  # two hosts, each a fan-out's worth of procs
    cast(runtime, addresses, b"x", batch=False)
    assert [address for address, _ in log] == [addresses[0], addresses[runtime.fanout]]


def test_direct_and_forwarded_messages_are_numbered_on_one_count(sent: Any) -> None:
    """A broadcast through the tree and a call straight to a rank share the
    (address, actor) numbering: the receiver delivers them in send order."""
    runtime, log = sent
    addresses = hosts(3, 2)
    cast(runtime, addresses, b"x", batch=True)
    cast(runtime, addresses, b"x", batch=False)
    numbers: dict[str, list[int]] = {}
    for _, header in log:
        for address, n in zip(header[Key.DESTS], header[Key.SEQS], strict=True):
            numbers.setdefault(address, []).append(n)
    assert numbers == {address: [1, 2] for address in addresses}


def test_calls_to_the_same_ranks_share_one_packed_header_part() -> None:
    """Each call has a reply port of its own, yet the part of the header
    every branch shares is the same bytes call after call: a receiver
    unpacks it once (it keeps the shared parts it has seen), not with every
    call."""
    loop = asyncio.new_event_loop()
    runtime = Runtime(loop, SimpleNamespace(address=OWN), "controller")  # type: ignore[arg-type]
    heads: list[bytes] = []
    runtime.send_frames = lambda address, frames, batch=False: heads.append(  # type: ignore[method-assign]
        bytes(frames[0])
    )
    addresses = hosts(1, 4)
    try:
        for port in (1, 2):
            header = {Key.KIND: Kind.CALL, Key.ACTOR: "actor-1", Key.OP: "call"}
            header[Key.REPLY_TO] = [OWN, port]
            shape = Shape(["procs"], Slice.new_row_major([len(addresses)]))
            runtime.cast(shape, addresses, header, [encode_header(header), b"x"])
    finally:
        loop.close()
    assert len(heads) == 8
    assert [decode_header([h])[Key.REPLY_TO] for h in heads] == [[OWN, 1]] * 4 + [[OWN, 2]] * 4

    def shared(head: bytes) -> bytes:
        size = int.from_bytes(head[1:5], "little")
        return head[1 : 5 + size]

    assert len({shared(h) for h in heads}) == 1
