"""Checked by mypy --strict in the lint step (never run): endpoints are typed
by their method's parameters and result. An unneeded ``type: ignore`` fails
the check, so the wrong calls below prove that mistakes are caught."""

from typing import assert_type

from monarch_actor import Actor, Future, ValueMesh, endpoint, this_host


class Counter(Actor):
    @endpoint
    def add(self, x: int, *, times: int = 1) -> int:
        return x * times

    @endpoint
    async def label(self, prefix: str) -> str:
        return prefix


def check() -> None:
    counters = this_host().spawn_procs(per_host={"gpus": 2}).spawn("c", Counter)
    assert_type(counters.add.call_one(1), Future[int])
    assert_type(counters.add.call(1, times=2), Future[ValueMesh[int]])
    assert_type(counters.label.choose("x"), Future[str])  # an async def's awaited result
    counters.add.broadcast(3)
    counters.add.call_one("one")  # type: ignore[arg-type]
    counters.add.call(1, twice=True)  # type: ignore[call-arg]
    counters.label.call_one()  # type: ignore[call-arg]
