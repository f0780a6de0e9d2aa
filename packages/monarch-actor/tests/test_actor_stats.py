"""An actor's counters keep the exception its last failing handler raised,
for the mesh admin to show (the caller got the exception; the actor lives on)."""

from __future__ import annotations

from typing import Any

import pytest

from monarch_actor import Actor, endpoint, this_proc
from monarch_actor._api.actor_host import ActorHost
from monarch_actor._api.actor_stats import ERROR_TEXT, ActorStats


def fail(stats: ActorStats, endpoint: str, error: Exception) -> None:
    started = stats.begin(endpoint)
    try:
        raise error
    except Exception as raised:
        stats.raised(endpoint, raised)
    stats.end(endpoint, started, failed=True)


def test_a_raising_handler_is_kept_with_its_traceback_and_in_its_event() -> None:
    stats = ActorStats()
    assert stats.as_dict(events=False)["last_error"] is None
    fail(stats, "step", ValueError("bad batch"))
    shown = stats.as_dict(events=True)
    assert shown["failures"] == 1 and shown["last_error"]["handler"] == "step"
    assert shown["last_error"]["error"].startswith("Traceback")
    assert shown["last_error"]["error"].rstrip().endswith("ValueError: bad batch")
    assert shown["events"][-1]["detail"] == "step: ValueError: bad batch"
    # a handler that then returns is a plain event again
    stats.end("step", stats.begin("step"), failed=False)
    assert stats.as_dict(events=True)["events"][-1]["detail"] == "step"


def test_a_long_exception_keeps_its_end() -> None:
    stats = ActorStats()
    fail(stats, "load", RuntimeError("x" * (2 * ERROR_TEXT) + " the end"))
    text = stats.as_dict(events=False)["last_error"]["error"]
    assert len(text) == ERROR_TEXT and text.rstrip().endswith("the end")


class Raiser(Actor):
    @endpoint
    def explode(self) -> None:
        raise RuntimeError("on purpose")

    @endpoint
    def fine(self) -> int:
        return 1


def test_a_call_is_counted_before_its_caller_hears_of_it(monkeypatch) -> None:
    """Whoever is answered (and then asks the admin) sees the call counted and
    the actor idle: the stats end before the answer goes out."""
    seen: list[dict[str, Any]] = []
    answer = ActorHost._answer

    def answering(self: ActorHost, header: Any, value: Any, failed: bool = False) -> None:
        seen.append(self.stats.as_dict(events=False))
        answer(self, header, value, failed)

    monkeypatch.setattr(ActorHost, "_answer", answering)
    actor = this_proc().spawn("stats_order", Raiser)
    assert actor.fine.call_one().get(timeout=30) == 1
    with pytest.raises(Exception, match="on purpose"):
        actor.explode.call_one().get(timeout=30)
    fine, raised = seen[-2:]
    assert (fine["messages"], fine["failures"], fine["current"]) == (1, 0, "")
    assert (raised["messages"], raised["failures"], raised["current"]) == (2, 1, "")
    assert raised["last_error"]["handler"] == "explode"
