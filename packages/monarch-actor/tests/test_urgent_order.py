"""A failure handed to an actor's ``__supervise__`` runs before the actor's next
message, even when a backlog of endpoints that never await is queued.

The actors under test live in this process (``this_proc``), so the test can
watch the runtime hand work to them: each step waits for an event, never for time."""

import pytest
from actors import (
    BACKLOG,
    AsyncBacklogged,
    AsyncSupervising,
    SyncBacklogged,
    backlog_posted,
    supervise_posted,
)

from monarch_actor import this_host, this_proc
from monarch_actor._api.actor_host import ActorHost
from monarch_actor._core.wire import Key


@pytest.fixture
def watched(monkeypatch):
    """Sets the two events as the runtime hands work to the actors."""
    backlog_posted.clear()
    supervise_posted.clear()
    post, post_urgent = ActorHost.post, ActorHost.post_urgent
    busy = [0]

    def counting_post(self, header, frames):
        post(self, header, frames)
        if header.get(Key.METHOD) == "busy":
            busy[0] += 1
            if busy[0] == BACKLOG:
                backlog_posted.set()

    def noting_post_urgent(self, fn, *args):
        post_urgent(self, fn, *args)
        if getattr(fn, "__name__", "") == "_supervise":
            supervise_posted.set()

    monkeypatch.setattr(ActorHost, "post", counting_post)
    monkeypatch.setattr(ActorHost, "post_urgent", noting_post_urgent)


@pytest.fixture
def child_procs():
    """A proc for the failing child: a failure leaves its process closed to spawns."""
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    yield procs
    procs.stop().get(timeout=30)


@pytest.mark.parametrize("cls", [SyncBacklogged, AsyncBacklogged, AsyncSupervising])
def test_supervise_runs_before_a_backlog_of_endpoints_that_never_await(watched, child_procs, cls):
    actor = this_proc().spawn("backlogged", cls, child_procs)
    assert actor.seen.call_one().get(timeout=30) == []
    begun = actor.begin.call_one()
    actor.busy.broadcast(True)
    for _ in range(BACKLOG - 1):
        actor.busy.broadcast(False)
    begun.get(timeout=30)
    events = actor.seen.call_one().get(timeout=30)
    assert events == ["busy", "supervise"] + ["busy"] * (BACKLOG - 1)
    actor.stop().get(timeout=30)
