import asyncio
import concurrent.futures
import pickle
import threading
from typing import Any

import pytest
from actors import Asyncy, Caller, Counter, Probe, Replier

from monarch_actor import (
    Accumulator,
    Actor,
    ActorError,
    Channel,
    Future,
    ValueMesh,
    endpoint,
    send,
    this_proc,
)
from monarch_mesh import Shape, Slice


def test_the_counter_example(procs):
    counters = procs.spawn("counters", Counter, 0)
    counters.incr.broadcast()
    counters.slice(gpus=slice(0, 2)).incr.broadcast()
    vm = counters.get.call().get()
    assert vm.values() == [2, 2, 1, 1]
    assert counters.slice(gpus=3).get.call_one().get() == 1
    assert str(vm.extent) == "{gpus: 4}"


def test_each_proc_is_its_own_process_with_torch_distributed_environment(procs):
    probes = procs.spawn("probes", Probe)
    seen = probes.where.call().get().values()
    assert len({s["pid"] for s in seen}) == 4
    for rank, s in enumerate(seen):
        assert s["rank"] == {"gpus": rank}
        assert s["env"]["RANK"] == str(rank) and s["env"]["WORLD_SIZE"] == "4"
        assert s["env"]["LOCAL_RANK"] == str(rank) and s["env"]["LOCAL_WORLD_SIZE"] == "4"
        assert s["env"]["MASTER_PORT"] == seen[0]["env"]["MASTER_PORT"]
        assert s["thread"] == "monarch-actor-driver"


def test_message_rank_is_relative_to_the_sliced_mesh(procs):
    probes = procs.spawn("probes", Probe)
    part = probes.slice(gpus=slice(1, 4, 2))
    seen = part.where.call().get()
    assert [s["message_rank"] for s in seen.values()] == [{"gpus": 0}, {"gpus": 1}]
    assert [s["rank"] for s in seen.values()] == [{"gpus": 1}, {"gpus": 3}]
    assert [s["size"] for s in seen.values()] == [{"gpus": 2}, {"gpus": 2}]
    single = probes.slice(gpus=2).where.call_one().get()
    assert single["message_rank"] == {} and single["rank"] == {"gpus": 2}


def test_a_slice_of_a_slice(procs):
    counters = procs.spawn("counters", Counter, 7)
    part = counters.slice(gpus=slice(1, None)).slice(gpus=slice(1, None))
    assert len(part) == 2
    assert part.get.call().get().values() == [7, 7]


def test_mistakes_raise_where_they_are_made(procs):
    counters = procs.spawn("counters", Counter, 0)
    with pytest.raises(ValueError, match="call_one requires exactly 1 actor, but mesh has 4"):
        counters.get.call_one()
    with pytest.raises(TypeError):
        counters.add.call(1, 2, 3)
    with pytest.raises(TypeError):
        counters.add.call(c=1)
    with pytest.raises(AttributeError, match="no endpoint 'nothing'"):
        counters.nothing  # noqa: B018
    with pytest.raises(RuntimeError, match="not annotated as an endpoint"):
        counters.helper()
    with pytest.raises(IndexError):
        counters.slice(gpus=4)
    with pytest.raises(TypeError, match="dimension labeled 'hosts'"):
        counters.slice(hosts=0)
    with pytest.raises(RuntimeError, match=r"pickle|Lock") as unpicklable:  # as in Monarch
        counters.add.call(threading.Lock())
    assert isinstance(unpicklable.value, TypeError)  # an EncodeError
    with pytest.raises(ValueError, match="not an Actor"):
        procs.spawn("x", dict)


def test_an_endpoint_error_reaches_the_caller_and_the_actor_lives_on(procs):
    counters = procs.spawn("counters", Counter, 3)
    one = counters.slice(gpus=1)
    with pytest.raises(ActorError) as caught:
        one.boom.call_one("bad thing").get()
    error = caught.value
    assert isinstance(error.exception, ValueError) and str(error.exception) == "bad thing"
    assert error.message == "Actor call counters.boom failed."
    assert "Traceback of where the remote call failed" in error.exception_formatted
    assert "raise ValueError(text)" in error.exception_formatted
    assert repr(error) == "ActorError(ValueError('bad thing'), 'Actor call counters.boom failed.')"
    assert one.get.call_one().get() == 3
    with pytest.raises(ActorError):
        counters.boom.call("all").get()


def test_an_unpicklable_result_is_a_clear_error(procs):
    probe = procs.spawn("probes", Probe).slice(gpus=0)
    with pytest.raises(ActorError, match="cannot be sent"):
        probe.unpicklable.call_one().get()
    assert probe.echo.call_one(5).get() == 5


def test_choose_and_accumulate(procs):
    probes = procs.spawn("probes", Probe)
    assert probes.echo.choose(9).get() == 9
    counters = procs.spawn("counters", Counter, 2)
    total = Accumulator(counters.get, 0, lambda acc, x: acc + x).accumulate().get()
    assert total == 8


def test_stream_yields_in_completion_order(procs, tmp_path):
    probes = procs.spawn("probes", Probe)
    # rank 0 is held busy until the others have answered, so its answer comes last
    gate = tmp_path / "gate"
    busy = probes.slice(gpus=0).hold.call_one(str(gate))
    stream = probes.where.stream()
    order = [next(stream).get(timeout=10) for _ in range(3)]
    assert not busy.done()
    gate.touch()
    order.append(next(stream).get(timeout=10))
    assert [o["rank"]["gpus"] for o in order][-1] == 0
    assert sorted(o["rank"]["gpus"] for o in order) == [0, 1, 2, 3]
    assert busy.get(timeout=10) is True


def test_async_actors_run_on_their_own_loop(procs):
    asyncy = procs.spawn("asyncy", Asyncy)
    assert set(asyncy.where.call().get().values()) == {"monarch-actor-event-loop"}


def test_mixing_sync_and_async_endpoints_is_refused(procs):
    class Mixed(Actor):
        @endpoint
        def a(self) -> None: ...

        @endpoint
        async def b(self) -> None: ...

    with pytest.raises(ValueError, match="mixes both async and sync endpoints"):
        procs.spawn("mixed", Mixed)


@pytest.mark.parametrize("hook", ["__cleanup__", "__supervise__", "_handle_undeliverable_message"])
def test_a_sync_actor_with_an_async_hook_is_refused_in_monarchs_words(procs, hook):
    class SyncWithAsyncHook(Actor):
        @endpoint
        def ping(self) -> int:
            return 1

    async def hook_body(self, *args):
        return None

    setattr(SyncWithAsyncHook, hook, hook_body)
    with pytest.raises(ValueError, match=f"is a sync actor .* but has an async {hook}"):
        procs.spawn("mismatched", SyncWithAsyncHook)


def test_meshes_travel_as_references(procs):
    counters = procs.spawn("counters", Counter, 11)
    callers = procs.spawn("callers", Caller)
    assert callers.ask.call(counters).get().values() == [11] * 4
    asyncy = procs.spawn("asyncy", Asyncy).slice(gpus=0)
    assert asyncy.call_other.call_one(counters.slice(gpus=2)).get() == 11


def test_procs_call_back_into_the_controller(procs):
    local = this_proc().spawn("local", Counter, 42)
    callers = procs.spawn("callers", Caller)
    assert callers.ask_one.call(local).get().values() == [42] * 4
    port, receiver = Channel.open()
    callers.tell.broadcast(port, 1)
    assert sorted(receiver.recv().get(timeout=10) for _ in range(4)) == [10] * 4


def test_explicit_response_ports(procs):
    replier = procs.spawn("replier", Replier)
    assert replier.slice(gpus=0).later.call_one(1).get(timeout=10) == 2
    assert replier.later.call(5).get(timeout=10).values() == [6] * 4
    with pytest.raises(KeyError, match="nope"):
        replier.slice(gpus=1).refuse.call_one().get(timeout=10)


def test_send_with_a_port(procs):
    counters = procs.spawn("counters", Counter, 1)
    port, receiver = Channel.open_ranked()
    send(counters.add, (1,), {"b": 2}, port=port)
    assert sorted(receiver.recv().get(timeout=10) for _ in range(4)) == [
        (0, 3),
        (1, 3),
        (2, 3),
        (3, 3),
    ]


def test_a_blocking_endpoint_does_not_stall_its_process(procs, tmp_path):
    probes = procs.spawn("probes", Probe).slice(gpus=0)
    others = procs.spawn("others", Counter, 5).slice(gpus=0)
    gate = tmp_path / "gate"
    slow = probes.hold.call_one(str(gate))
    assert others.get.call_one().get(timeout=10) == 5
    assert not slow.done()  # answered while the other actor is still held: nothing stalled
    gate.touch()
    assert slow.get(timeout=10) is True


def test_sync_get_and_await_inside_endpoints(procs):
    counters = procs.spawn("counters", Counter, 4)
    callers = procs.spawn("callers", Caller).slice(gpus=3)
    assert callers.ask.call_one(counters).get(timeout=10) == 4


def test_future_api():
    with pytest.raises(TypeError, match="cannot be constructed directly"):
        Future()
    local = this_proc().spawn("probe", Probe)
    slow = local.sleep.call_one(0.3)
    with pytest.raises(TimeoutError):
        slow.get(timeout=0.01)
    assert slow.get() == 0.3 and slow.get() == 0.3
    with pytest.raises(ValueError):
        slow.get(timeout=-1)
    with pytest.raises(RuntimeError, match="requires a running asyncio event loop"):
        slow.as_asyncio()
    with pytest.raises(ValueError, match="no active event loop"):
        slow.__await__()

    async def main():
        value = await local.echo.call_one("x")
        again = await local.echo.call_one("y").as_asyncio()
        return value, again

    assert asyncio.run(main()) == ("x", "y")
    failed = this_proc().spawn("counter", Counter, 0).boom.call_one("e")
    assert isinstance(failed.exception(), ActorError)
    with pytest.raises(ActorError):
        failed.get()


def test_value_mesh():
    shape = Shape(["hosts", "gpus"], Slice.new_row_major([2, 3]))
    vm = ValueMesh(shape, list(range(6)))
    assert vm.values() == [0, 1, 2, 3, 4, 5]
    assert vm.item(hosts=1, gpus=2) == 5
    assert [dict(p) for p, _ in vm][:2] == [{"hosts": 0, "gpus": 0}, {"hosts": 0, "gpus": 1}]
    assert vm.slice(hosts=1).values() == [3, 4, 5]
    assert vm.slice(gpus=slice(0, 3, 2)).values() == [0, 2, 3, 5]
    assert (
        repr(ValueMesh(Shape(["gpus"], Slice.new_row_major([1])), [6]))
        == "ValueMesh({gpus: 1}):\n  (({'gpus': 0/1}, 6),)"
    )
    assert pickle.loads(pickle.dumps(vm)).values() == vm.values()
    with pytest.raises(KeyError):
        vm.item(hosts=1)
    with pytest.raises(ValueError, match="expected 6 ranks, but contains 1 ranks"):
        ValueMesh(shape, [1])
    assert ValueMesh[int] is ValueMesh and isinstance(vm, ValueMesh[int])  # as in Monarch


def test_actor_mesh_stop_runs_cleanup(procs):
    class Cleaner(Actor):
        @endpoint
        def ping(self) -> int:
            return 1

        def __cleanup__(self, exc):
            print("cleaned", exc)

    cleaners = procs.spawn("cleaners", Cleaner)
    assert cleaners.ping.call().get().values() == [1] * 4
    cleaners.stop().get(timeout=10)
    assert cleaners.stop().get(timeout=10) is None  # again: no error, as in Monarch
    with pytest.raises(Exception, match=r"stopped|no actor"):
        cleaners.ping.call().get(timeout=15)


def test_get_or_spawn_controller_is_one_actor_for_everyone(procs):
    from actors import Registry, Visitor

    from monarch_actor import get_or_spawn_controller

    registry = get_or_spawn_controller("registry", Registry, "from-script").get()
    again = get_or_spawn_controller("registry", Registry, "ignored").get()
    assert registry.visit.call_one(-1).get() == [-1]
    assert again.visit.call_one(-2).get() == [-1, -2]
    counts = sorted(procs.spawn("visitors", Visitor).visit.call().get().values())
    assert counts == [3, 4, 5, 6]
    with pytest.raises(ValueError, match="exists with class Registry"):
        get_or_spawn_controller("registry", Counter, 0).get()


def test_get_or_spawn_controller_spawns_once_when_asked_at_once(procs):
    """Threads of the script and the procs' actors asking for a new
    controller at the same moment all get the one actor (a notebook's
    ``debug_controller()`` raced a proc's ``breakpoint()`` this way, and
    each side waited on a controller of its own)."""
    from actors import Registry, Visitor

    from monarch_actor import get_or_spawn_controller

    asking = 8
    barrier = threading.Barrier(asking)

    def ask(who: int) -> Any:
        barrier.wait()
        return get_or_spawn_controller("raced", Registry, "at-once").get(timeout=30)

    visitors = procs.spawn("raced_visitors", Visitor, "raced")
    from_procs = visitors.visit.call()  # the procs ask meanwhile
    with concurrent.futures.ThreadPoolExecutor(asking) as pool:
        meshes = list(pool.map(ask, range(asking)))
    counts = sorted(from_procs.get(timeout=60).values())
    seen = [mesh.visit.call_one(100 + who).get(timeout=30) for who, mesh in enumerate(meshes)]
    assert len(seen[-1]) == len(counts) + asking  # one actor saw every visit
    assert counts == [1, 2, 3, 4]
    visitors.stop().get(timeout=30)


def test_as_endpoint_reaches_a_plain_method(procs):
    from monarch_actor import as_endpoint

    counters = procs.spawn("counters", Counter, 0)
    assert as_endpoint(counters.helper).call().get().values() == [1, 1, 1, 1]
    with pytest.raises(ValueError, match="as_endpoint"):
        as_endpoint(counters.get)


def test_lifecycle_events_are_reported():
    from monarch_actor import extension

    events = []
    extension.subscribe(events.append)
    try:
        local = this_proc().spawn("watched", Counter, 0)
        local.get.call_one().get()
        local.stop().get(timeout=10)
    finally:
        extension.unsubscribe(events.append)
    kinds = [type(e).__name__ for e in events if getattr(e, "mesh", "").startswith("watched")]
    assert kinds == ["ActorStarted", "ActorStopped"]


def test_get_inside_an_async_endpoint_works(procs):
    class Blocking(Actor):
        @endpoint
        async def ask(self, counters) -> int:
            return counters.get.call_one().get()  # warns, but the answer still arrives

    counters = procs.spawn("counters", Counter, 8).slice(gpus=0)
    assert procs.spawn("blocking", Blocking).slice(gpus=1).ask.call_one(counters).get(10) == 8


def test_get_in_a_running_loop_warns_except_from_top_level_code_as_a_notebook_runs_it():
    """Jupyter runs a cell's plain code inside the kernel's event loop: a
    `.get()` there is the cell's own blocking call, not async code that
    should await, so it does not warn; inside a function it still does."""
    import warnings

    local = this_proc().spawn("loopy", Probe)

    async def kernel() -> None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cell = compile("value = local.sleep.call_one(0.05).get()", "<cell>", "exec")
            namespace = {"local": local}
            exec(cell, namespace)  # a cell's top level, as IPython runs it
            assert namespace["value"] == 0.05
            assert not [w for w in caught if "active event loop" in str(w.message)]

            def helper() -> float:
                return local.sleep.call_one(0.05).get()

            assert helper() == 0.05
            assert [w for w in caught if "active event loop" in str(w.message)]

    asyncio.run(kernel())


def test_returns_future_starts_the_body_only_when_waited_for():
    from monarch_actor import returns_future

    started = []

    @returns_future
    async def work(x: int) -> int:
        started.append(x)
        await asyncio.sleep(0.01)
        return 2 * x

    later = work(1)
    assert started == [] and isinstance(later, Future)
    assert later.get() == 2 and later.get() == 2 and started == [1]

    async def main():
        return await work(5)

    assert asyncio.run(main()) == 10

    @returns_future
    async def slow() -> None:
        await asyncio.sleep(5)

    with pytest.raises(TimeoutError, match=r"did not arrive within 0\.05 s"):
        slow().get(timeout=0.05)

    @returns_future
    async def gives_up() -> None:
        raise TimeoutError("the operation's own deadline passed")

    with pytest.raises(TimeoutError, match="operation's own deadline"):  # not mistaken for ours
        gives_up().get(timeout=5)
    with pytest.raises(TypeError, match="async def"):
        returns_future(lambda: None)


def test_messages_from_one_sender_arrive_in_send_order_whichever_way_they_leave(procs):
    """Broadcasts leave with the loop's batch, calls from the caller's own
    thread: one sender's messages still arrive in the order it sent them."""
    from actors import Journal, Scribe

    journal = procs.spawn("journal", Journal).slice(gpus=1)
    pending = []
    for n in range(600):
        if n % 3 == 0:
            journal.note.broadcast(n)
        elif n % 3 == 1:
            pending.append(journal.note.call_one(n))
        else:
            journal.note.call(n)
    assert journal.notes.call_one().get(timeout=30) == list(range(600))
    assert [p.get(timeout=30) for p in pending] == list(range(1, 600, 3))

    other = procs.spawn("other", Journal).slice(gpus=2)
    scribe = procs.spawn("scribe", Scribe).slice(gpus=0)  # an actor's thread sends too
    scribe.write.call_one(other, 0, 300).get(timeout=60)
    assert other.notes.call_one().get(timeout=30) == list(range(300))


class Spawner(Actor):
    @endpoint
    def spawned_by(self) -> object:
        from monarch_actor import context

        return context().actor_instance.creator

    @endpoint
    def spawn_one(self) -> object:
        from monarch_actor import this_proc

        child = this_proc().spawn("child", Spawner)
        return child.spawned_by.call_one().get(), repr(child.spawned_by.call_one().get())


def test_creator_is_the_spawning_instance_as_in_monarch(procs):
    from monarch_actor import context

    assert context().actor_instance.creator is None  # the root client
    spawners = procs.spawn("spawner", Spawner)
    creator = spawners.slice(gpus=1).spawned_by.call_one().get()
    assert (creator.name, creator.class_name, creator.creator, repr(creator)) == (
        "root",
        None,
        None,
        "<root>",
    )
    inner, text = spawners.slice(gpus=2).spawn_one.call_one().get()
    assert (inner.name, inner.class_name.rpartition(".")[2], inner.creator.name) == (
        "spawner",
        "Spawner",
        "root",
    )
    assert text.startswith("<root>.<") and text.endswith(".Spawner spawner{'gpus': 2/4}>"), text


def test_stopping_an_actor_stuck_in_init_resolves_after_the_stop_timeout(procs):
    from actors import StuckInInit

    from monarch_actor import Channel
    from monarch_config import get_global_config

    assert get_global_config()["stop_actor_timeout"] == "10s"  # Monarch's key and default
    send, receive = Channel[int].open()
    stuck = procs.slice(gpus=0).spawn("stuck", StuckInInit, send)
    assert receive.recv().get(timeout=30) > 0  # __init__ runs, and will not return
    stuck.stop().get(timeout=30)  # the actor is stopped without its thread
    with pytest.raises(Exception, match="stopped"):
        stuck.unreachable.call_one().get(timeout=15)
