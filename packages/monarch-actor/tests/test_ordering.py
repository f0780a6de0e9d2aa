"""The per-pair order of actor messages (``_core/ordering.py``), with a
hand-driven clock: early messages wait for the ones before them, a skip
fills a gap, and a gap nobody fills is given up on after the wait."""

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from monarch_actor._core.ordering import InOrder, Numbering

STREAM = ("sender", "tcp://h:1", "actor")


class Clock:
    def __init__(self) -> None:
        self.pending: list[tuple[float, Any, tuple[Any, ...]]] = []
        self.now = 0.0

    def call_later(self, delay: float, fn: Any, *args: Any) -> Any:
        entry = [self.now + delay, fn, args, False]
        self.pending.append(entry)

        class Handle:
            def cancel(self) -> None:
                entry[3] = True

        return Handle()

    def advance(self, seconds: float) -> None:
        self.now += seconds
        due = [e for e in self.pending if e[0] <= self.now and not e[3]]
        self.pending = [e for e in self.pending if e not in due]
        for entry in due:
            entry[1](*entry[2])


def receiver(gap_wait: float = 30.0) -> tuple[InOrder, list[int], Clock]:
    got: list[int] = []
    clock = Clock()
    return InOrder(lambda h, f: got.append(h["i"]), clock.call_later, gap_wait), got, clock


@given(st.permutations(list(range(1, 30))))
def test_any_arrival_order_is_handed_over_in_send_order(order: list[int]) -> None:
    in_order, got, _ = receiver()
    for n in order:
        in_order.arrive(STREAM, n, {"i": n}, None)
    assert got == list(range(1, 30))


def test_streams_do_not_wait_for_each_other() -> None:
    in_order, got, _ = receiver()
    in_order.arrive(STREAM, 2, {"i": 2}, None)
    in_order.arrive(("sender", "tcp://h:1", "other actor"), 1, {"i": 10}, None)
    assert got == [10]


def test_a_skip_fills_a_gap() -> None:
    in_order, got, _ = receiver()
    in_order.arrive(STREAM, 1, {"i": 1}, None)
    in_order.arrive(STREAM, 3, {"i": 3}, None)
    assert got == [1]
    in_order.skip(STREAM, 2)
    assert got == [1, 3]


def test_a_gap_nobody_fills_is_given_up_on_after_the_wait() -> None:
    in_order, got, clock = receiver(gap_wait=30.0)
    in_order.arrive(STREAM, 2, {"i": 2}, None)
    in_order.arrive(STREAM, 3, {"i": 3}, None)
    clock.advance(29.0)
    assert got == []
    clock.advance(2.0)
    assert got == [2, 3]
    in_order.arrive(STREAM, 1, {"i": 1}, None)  # late, not lost: still delivered
    assert got == [2, 3, 1]
    in_order.arrive(STREAM, 4, {"i": 4}, None)
    assert got == [2, 3, 1, 4]


def test_a_handler_that_raises_does_not_hold_up_the_rest() -> None:
    got: list[int] = []

    def deliver(header: dict[str, int], frames: object) -> None:
        if header["i"] == 2:
            raise RuntimeError("bad message")
        got.append(header["i"])

    in_order = InOrder(deliver, Clock().call_later, 30.0)
    for n in (3, 2, 1):
        in_order.arrive(STREAM, n, {"i": n}, None)
    assert got == [1, 3]


def test_numbers_count_per_address_and_actor_and_restart_for_a_new_process() -> None:
    numbering = Numbering()
    assert numbering.take(["a", "b"], "x") == [1, 1]
    assert numbering.take(["a"], "x") == [2]
    assert numbering.take(["a"], "y") == [1]
    numbering.forget("a")
    assert numbering.take(["a", "b"], "x") == [1, 2]
