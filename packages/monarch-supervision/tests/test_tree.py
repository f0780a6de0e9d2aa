"""The supervision tree's decisions, with fake processes and owners."""

import pickle

import pytest
from fakes import ROOT, World
from hypothesis import given
from hypothesis import strategies as st

from monarch_supervision import (
    MeshFailure,
    OwnershipError,
    SupervisionTree,
    escalation_reason,
    root_cause,
    run_fault_hook,
)


class Recorder:
    def __init__(self, supervise=None):
        self.roots, self.failed, self.supervise = [], [], supervise

    def to_actor(self, delivery):
        if self.supervise is None:
            return False
        self.supervise(delivery)
        return True

    def to_root(self, failure):
        self.roots.append(failure)

    def fail_actor(self, owner, reason, cause):
        self.failed.append((owner, reason, cause))


def test_a_mesh_has_exactly_one_owner():
    tree = SupervisionTree(Recorder())
    tree.adopt("w-1", "trainer-1", 2)
    tree.adopt("w-1", "trainer-1", 2)  # the same owner again is no change
    with pytest.raises(OwnershipError, match="owned by trainer-1"):
        tree.adopt("w-1", ROOT, 2)
    assert tree.owner_of("w-1") == "trainer-1"
    assert tree.owned_by("trainer-1") == ["w-1"]
    assert tree.owned_by(ROOT) == []


def test_each_failed_rank_is_delivered_once():
    routes = Recorder()
    tree = SupervisionTree(routes)
    tree.adopt("w-1", ROOT, 4)
    assert tree.fail("w-1", [1], "a", "boom") is not None
    assert tree.fail("w-1", [1], "a", "boom again") is None
    assert tree.fail("w-1", [1, 3], "a", "later") is not None
    assert [f.crashed_ranks for f in routes.roots] == [[1], [3]]
    assert tree.failed_ranks("w-1") == [1, 3]


@given(st.lists(st.lists(st.integers(0, 7), min_size=1, max_size=4), max_size=20))
def test_deliveries_partition_the_failed_ranks(reports):
    routes = Recorder()
    tree = SupervisionTree(routes)
    tree.adopt("m", ROOT, 8)
    for ranks in reports:
        tree.fail("m", ranks, "a", "x")
    delivered = [rank for failure in routes.roots for rank in failure.crashed_ranks]
    assert sorted(delivered) == sorted({r for ranks in reports for r in ranks})
    assert len(delivered) == len(set(delivered))


def test_failures_of_a_mesh_spawned_elsewhere_go_to_the_named_owner_once():
    routes = Recorder()
    tree = SupervisionTree(routes)
    assert tree.fail("other-1", [0], "a", "x", owner=ROOT) is not None
    assert tree.fail("other-1", [0], "a", "x", owner=ROOT) is None
    assert len(routes.roots) == 1


def test_a_stopped_mesh_reports_nothing_and_says_why_calls_fail():
    routes = Recorder()
    tree = SupervisionTree(routes)
    tree.adopt("w-1", ROOT, 2)
    assert tree.dead("w-1", [0, 1]) is None
    tree.stopped("w-1", "stopped by client")
    assert tree.fail("w-1", [0], "a", "exited") is None
    assert routes.roots == []
    assert tree.dead("w-1", [0]) == "stopped: stopped by client"
    assert tree.owned_by(ROOT) == []


def test_a_failed_rank_makes_calls_to_it_fail_but_not_calls_to_the_others():
    tree = SupervisionTree(Recorder())
    tree.adopt("w-1", ROOT, 4)
    tree.fail("w-1", [2], "a", "the process exited with code 3")
    assert tree.dead("w-1", [0, 1, 2, 3]) == "failed: the process exited with code 3"
    assert tree.dead("w-1", [0, 1, 3]) is None


@pytest.mark.parametrize(
    ("outcome", "error", "handled"),
    [
        (True, None, True),
        ("yes", None, True),
        (False, None, False),
        (None, None, False),
        (None, ValueError("oops"), False),
    ],
)
def test_handled_means_a_truthy_return(outcome, error, handled):
    routes = Recorder(supervise=lambda delivery: None)
    tree = SupervisionTree(routes)
    tree.adopt("w-1", "boss-1", 1)
    delivery = tree.fail("w-1", [0], "a", "boom")
    tree.supervised(delivery, outcome, error)
    assert (routes.failed == []) is handled
    if not handled:
        owner, reason, cause = routes.failed[0]
        assert owner == "boss-1" and cause is delivery.failure
        assert ("oops" in reason) is (error is not None)
        assert "did not handle a supervision event from its child" in reason or error


def test_an_owner_without_supervise_fails_at_once():
    routes = Recorder()
    tree = SupervisionTree(routes)
    tree.adopt("w-1", "boss-1", 1)
    tree.fail("w-1", [0], "a", "boom")
    assert routes.failed[0][0] == "boss-1"


def test_escalation_climbs_level_by_level_until_handled():
    world = World()
    p1, p2, p3 = (world.controller.__class__(world, f"p{i}") for i in (1, 2, 3))
    (top,) = world.spawn(world.controller, ROOT, "top", [p1], supervise=lambda f: True)
    (mid,) = world.spawn(p1, top.key, "mid", [p2], supervise=lambda f: False)
    leaves = world.spawn(p2, mid.key, "leaf", [p3, p3])
    world.crash(leaves[1])
    world.run()
    assert world.log == ["mid[0].__supervise__(leaf)", "mid[0] fails", "top[0].__supervise__(mid)"]
    assert world.hooked == []


def test_an_unhandled_failure_reaches_the_hook_with_its_whole_chain():
    world = World()
    p1, p2 = (world.controller.__class__(world, f"p{i}") for i in (1, 2))
    (boss,) = world.spawn(world.controller, ROOT, "boss", [p1])  # no __supervise__
    (worker,) = world.spawn(p1, boss.key, "worker", [p2])
    world.crash(worker, "ValueError: bad batch")
    world.run()
    assert world.log == ["boss[0] fails", "hook(boss)"]
    (failure,) = world.hooked
    assert [f.mesh_name for f in failure.chain] == ["boss", "worker"]
    assert "bad batch" in failure.report()
    assert "did not handle a supervision event from its child" in failure.reason


def test_a_supervisor_that_raises_escalates_with_its_error():
    world = World()
    p1, p2 = (world.controller.__class__(world, f"p{i}") for i in (1, 2))

    def broken(failure):
        raise RuntimeError("supervisor bug")

    (boss,) = world.spawn(world.controller, ROOT, "boss", [p1], supervise=broken)
    (worker,) = world.spawn(p1, boss.key, "worker", [p2])
    world.crash(worker)
    world.run()
    (failure,) = world.hooked
    assert "supervisor bug" in failure.reason and failure.cause.mesh_name == "worker"


def test_two_ranks_failing_reach_a_supervisor_once_each():
    world = World()
    p1, p2 = (world.controller.__class__(world, f"p{i}") for i in (1, 2))
    seen = []
    (boss,) = world.spawn(world.controller, ROOT, "boss", [p1], supervise=seen.append)
    boss.supervise = lambda f: seen.append(f) or True
    workers = world.spawn(p1, boss.key, "worker", [p2, p2, p2])
    for actor in (workers[0], workers[2], workers[0]):
        world.crash(actor)
    world.run()
    assert sorted(f.crashed_ranks[0] for f in seen) == [0, 2]


def test_the_fault_hook_handles_by_returning_and_not_by_raising():
    failure = MeshFailure("m", [0], "a", "x")
    assert run_fault_hook(lambda f: None, failure) is True
    assert run_fault_hook(lambda f: 1 / 0, failure) is False

    def leave(f):
        raise SystemExit(1)

    assert run_fault_hook(leave, failure) is False


def test_a_mesh_failure_prints_readably_and_pickles_with_its_chain():
    child = MeshFailure("w-abc", [1], "<root>.<W w{'gpus': 1/2}>", "Traceback ...\nValueError: x")
    parent = MeshFailure("boss-1", [0], "<root>.<B boss>", escalation_reason(child), child)
    assert str(child).startswith("MeshFailure(mesh_name=w-abc, crashed_ranks=[1], event=")
    assert child.report().startswith("The actor <root>.<W w{'gpus': 1/2}> and all its")
    assert "  ValueError: x" in child.report()  # the reason is indented under the headline
    assert parent.report() == child.report()  # as Monarch's: the actor that failed first
    assert pickle.loads(pickle.dumps(parent)) == parent
    assert parent.chain == [parent, child]
    assert parent.mesh == ()


def test_the_root_cause_of_an_escalation_is_the_first_failure_left_unhandled():
    child = MeshFailure("w-abc", [1], "<root>.<W w>", "actor explicitly aborted due to: x")
    parent = MeshFailure("boss-1", [0], "<root>.<B boss>", escalation_reason(child), child)
    top = MeshFailure("top-1", [0], "<root>.<T top>", escalation_reason(parent), parent)
    assert root_cause(top) is child
    assert root_cause(child) is child
    # an owner whose __supervise__ raised: its own error is the news
    raised = MeshFailure(
        "boss-2", [0], "<root>.<B boss>", escalation_reason(child, ValueError("oops")), child
    )
    assert root_cause(raised) is raised
    above = MeshFailure("top-2", [0], "<root>.<T top>", escalation_reason(raised), raised)
    assert root_cause(above) is raised
