"""The one-shot result a call's replies settle (``Reply``): set once on one
thread, waited on from others, awaited from asyncio."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import pytest

from monarch_actor._core.future import INTERNAL, Future, _result_interruptibly
from monarch_actor._core.reply import Reply, to_asyncio


def test_a_waiter_blocked_before_the_result_gets_it() -> None:
    reply: Reply[int] = Reply()
    waiting = threading.Event()
    got: list[int] = []

    def wait() -> None:
        waiting.set()
        got.append(reply.result())

    waiters = [threading.Thread(target=wait) for _ in range(3)]
    for thread in waiters:
        thread.start()
    waiting.wait()
    reply.set_result(5)
    for thread in waiters:
        thread.join(10)
    assert got == [5, 5, 5]
    assert reply.result() == 5 and reply.done() and reply.exception() is None


def test_a_failure_is_raised_to_every_waiter() -> None:
    reply: Reply[int] = Reply()
    error = KeyError("k")
    reply.set_exception(error)
    for _ in range(2):
        with pytest.raises(KeyError) as caught:
            reply.result()
        assert caught.value is error
    assert reply.exception() is error


def test_waiting_times_out_and_the_result_still_comes() -> None:
    reply: Reply[str] = Reply()
    with pytest.raises(concurrent.futures.TimeoutError):
        reply.result(timeout=0.01)
    with pytest.raises(concurrent.futures.TimeoutError):
        reply.exception(timeout=0)
    reply.set_result("late")
    assert reply.result(timeout=0) == "late"


def test_it_is_settled_once() -> None:
    reply: Reply[int] = Reply()
    reply.set_result(1)
    with pytest.raises(concurrent.futures.InvalidStateError):
        reply.set_result(2)
    with pytest.raises(concurrent.futures.InvalidStateError):
        reply.set_exception(ValueError())
    assert not reply.cancel() and not reply.cancelled()
    assert reply.result() == 1


def test_a_cancelled_reply_says_so() -> None:
    reply: Reply[int] = Reply()
    assert reply.cancel() and reply.cancel() and reply.cancelled()
    with pytest.raises(concurrent.futures.CancelledError):
        reply.result()
    with pytest.raises(concurrent.futures.InvalidStateError):
        reply.set_result(1)


def test_callbacks_run_once_settled_or_at_once(caplog: pytest.LogCaptureFixture) -> None:
    reply: Reply[int] = Reply()
    seen: list[object] = []

    def broken(_: Reply[int]) -> None:
        raise RuntimeError("a bad callback")

    reply.add_done_callback(lambda r: seen.append(("before", r.result())))
    reply.add_done_callback(broken)  # logged; the others still run
    reply.add_done_callback(lambda r: seen.append(("also", r.result())))
    assert seen == []
    reply.set_result(3)
    reply.add_done_callback(lambda r: seen.append(("after", r.result())))
    assert seen == [("before", 3), ("also", 3), ("after", 3)]
    assert "a bad callback" in caplog.text


def test_asyncio_awaits_a_reply_settled_on_another_thread() -> None:
    async def main() -> list[object]:
        loop = asyncio.get_running_loop()
        ok: Reply[int] = Reply()
        failed: Reply[int] = Reply()
        cancelled: Reply[int] = Reply()
        done: Reply[int] = Reply()
        done.set_result(0)
        for reply, how in ((ok, 1), (failed, ValueError("no")), (cancelled, None)):
            threading.Thread(target=settle, args=(reply, how)).start()
        results = await asyncio.gather(
            *(to_asyncio(r, loop) for r in (ok, failed, cancelled, done)),
            return_exceptions=True,
        )
        plain: concurrent.futures.Future[int] = concurrent.futures.Future()
        plain.set_result(9)
        return [*results, await to_asyncio(plain, loop)]

    def settle(reply: Reply[int], how: object) -> None:
        if how is None:
            reply.cancel()
        elif isinstance(how, Exception):
            reply.set_exception(how)
        else:
            reply.set_result(how)  # type: ignore[arg-type]

    ok, failed, cancelled, done, plain = asyncio.run(main())
    assert ok == 1 and isinstance(failed, ValueError) and done == 0 and plain == 9
    assert isinstance(cancelled, asyncio.CancelledError)


class _SettledAsTheSliceEnds(Reply[int]):
    """A reply whose first wait times out at the moment it is settled: the
    race a `get()` waiting in slices meets when the answer arrives just as a
    slice ends."""

    def _wait(self, timeout: float | None) -> None:
        if not self.done():
            self.set_result(7)
            raise concurrent.futures.TimeoutError()
        super()._wait(timeout)


@pytest.mark.parametrize("timeout", [None, 30.0])
def test_get_returns_a_result_settled_as_its_wait_slice_times_out(timeout: float | None) -> None:
    assert _result_interruptibly(_SettledAsTheSliceEnds(), timeout) == 7


def test_get_raises_the_timeout_error_a_call_was_settled_with() -> None:
    reply: Reply[int] = Reply()
    reply.set_exception(TimeoutError("the endpoint's own"))
    with pytest.raises(TimeoutError, match="the endpoint's own"):
        _result_interruptibly(reply, None)


def test_get_off_the_main_thread_returns_a_result_settled_as_its_wait_times_out() -> None:
    future: Future[int] = Future(INTERNAL, _SettledAsTheSliceEnds())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert pool.submit(future.get, 30.0).result(30) == 7
