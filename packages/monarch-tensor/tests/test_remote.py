"""Remote functions, rref, and distributed tensors as endpoint arguments, on
a mesh of 2 real processes."""

import os

import pytest
import torch

from monarch_actor import Actor, Channel, context, endpoint, send, this_host
from monarch_tensor import (
    RemoteTensorError,
    Tensor,
    call_on_shard_and_fetch,
    fetch_shard,
    remote,
)


@pytest.fixture(scope="module")
def procs():
    mesh = this_host().spawn_procs(per_host={"gpus": 2})
    yield mesh
    mesh.stop().get(timeout=60)


class Keeper(Actor):
    """Holds state per process; its endpoints see shards."""

    @endpoint(propagate=lambda x: x)
    def scale(self, x):
        return x * 10

    @endpoint(propagate=lambda x: (x.sum(), x))
    def parts(self, x):
        return x.sum(), x + 1

    @endpoint(propagate=lambda x: x)
    def broken(self, x):
        raise ValueError("no scaling today")

    @endpoint
    def plain(self, x):
        return x

    @endpoint
    def describe(self, x, tag):
        return type(x).__name__, x.tolist(), tag


class Gated(Actor):
    """Its messages wait while ``hold`` runs: until the test writes to this
    actor's FIFO (``<fifo>.<its rank>``)."""

    @endpoint
    def hold(self, fifo):
        with open(f"{fifo}.{context().actor_instance.rank.rank}") as gate:
            return gate.read()

    @endpoint
    def values(self, x):
        return x.tolist()


def double(x):
    return x * 2


def table_size():
    from monarch_tensor._table import TABLE

    return len(TABLE)


def stats(x):
    return x.mean(), x.max()


def bump(x):
    x.add_(1)


def all_sum(x, group):
    out = x.clone()
    torch.distributed.all_reduce(out, group=group)
    return out


def shards(t):
    return [fetch_shard(t, gpus=g).get(timeout=60) for g in range(2)]


def test_every_propagate_mode_gives_the_function_s_results(procs):
    with procs.activate():
        x = torch.rand(4)
        results = {
            "callable": remote(double, propagate=lambda x: x)(x),
            "cached": remote(double)(x),
            "mocked": remote(double, propagate="mocked")(x),
            "path": remote("torch.neg", propagate=lambda x: x)(x),
        }
        mean, top = remote(stats)(x)
        before = shards(x)
        assert remote(bump, propagate="inspect")(x) is None
    for name, result in results.items():
        assert isinstance(result, Tensor) and result.shape == (4,), name
    assert all(torch.equal(a + 1, b) for a, b in zip(before, shards(x), strict=True))
    for g, x_g in enumerate(before):
        assert torch.allclose(fetch_shard(results["cached"], gpus=g).get(), x_g * 2)
        assert torch.allclose(fetch_shard(results["mocked"], gpus=g).get(), x_g * 2)
        assert torch.allclose(fetch_shard(results["callable"], gpus=g).get(), x_g * 2)
        assert torch.allclose(fetch_shard(results["path"], gpus=g).get(), -x_g)
        assert torch.allclose(fetch_shard(mean, gpus=g).get(), x_g.mean())
        assert torch.allclose(fetch_shard(top, gpus=g).get(), x_g.max())


def test_cached_propagation_runs_once_per_argument_shape(procs):
    f = remote(double)
    with procs.activate():
        f(torch.ones(2))
        f(torch.zeros(2))
        f(torch.ones(3))
    assert len(f._cache) == 2


def test_the_endpoint_adverbs_return_values(procs):
    pid = remote(os.getpid)
    with procs.activate():
        pids = pid.call().get(timeout=60)
        assert len(set(pids.values())) == 2 and os.getpid() not in pids.values()
        assert pid.choose().get(timeout=60) in pids.values()
        assert sorted(f.get(timeout=60) for f in pid.stream()) == sorted(pids.values())
        with pytest.raises(ValueError, match="exactly 1"):
            pid.call_one()
        x = torch.ones(2)
        remote(bump, propagate="inspect").broadcast(x)
        assert shards(x)[1].tolist() == [2.0, 2.0]
    with procs.slice(gpus=1).activate():
        assert pid.call_one().get(timeout=60) == pids.item(gpus=1)
    with procs.activate():
        assert call_on_shard_and_fetch(pid, shard={"gpus": 1}).get(timeout=60) == pids.item(gpus=1)


def test_remote_needs_an_active_mesh_and_a_valid_propagate():
    f = remote(double)
    with pytest.raises(ValueError, match="requires an active proc_mesh"):
        f.call()
    with pytest.raises(TypeError, match="Incorrect arguments to monarch operation"):
        f.broadcast()
    with pytest.raises(ValueError, match="requires an active proc_mesh"):
        f(torch.ones(2))
    with pytest.raises(ValueError, match="propagate='sometimes'"):
        remote(double, propagate="sometimes")
    with pytest.raises(TypeError, match="takes a function"):
        remote(42)


def test_a_process_group_reaches_a_remote_function(procs):
    with procs.activate() as mesh:
        x = torch.rand(3)
        total = remote(all_sum, propagate=lambda x, group: x)(x, mesh.process_group("gpus"))
    a, b = shards(x)
    for got in shards(total):
        assert torch.allclose(got, a + b)


def test_rref_keeps_actor_results_on_the_processes(procs):
    keeper = procs.spawn("keeper", Keeper)
    with procs.activate():
        x = torch.rand(3)
        scaled = keeper.scale.rref(x)
        total, plus = keeper.parts.rref(x)
        again = torch.relu(scaled) + 1  # results feed further operations
        failed = keeper.broken.rref(x)
        described = keeper.describe.call(x, tag="t").get(timeout=60)
    for g, x_g in enumerate(shards(x)):
        assert torch.allclose(fetch_shard(scaled, gpus=g).get(), x_g * 10)
        assert torch.allclose(fetch_shard(again, gpus=g).get(), x_g * 10 + 1)
        assert torch.allclose(fetch_shard(total, gpus=g).get(), x_g.sum())
        assert torch.allclose(fetch_shard(plus, gpus=g).get(), x_g + 1)
        kind, values, tag = described.item(gpus=g)
        assert (kind, tag) == ("Tensor", "t")
        assert torch.allclose(torch.tensor(values), x_g)
    with pytest.raises(RemoteTensorError, match="no scaling today"):
        fetch_shard(failed).get(timeout=60)


def test_rref_outside_activation_uses_the_mesh_of_its_tensors(procs):
    keeper = procs.spawn("keeper3", Keeper)
    with procs.activate():
        x = torch.rand(3)
    out = torch.relu(keeper.scale.rref(x) - 5)  # as Monarch's getting-started tour does
    for g, x_g in enumerate(shards(x)):
        assert torch.allclose(fetch_shard(out, gpus=g).get(), torch.relu(x_g * 10 - 5))
    ones = keeper.scale.rref(torch.ones(2))  # no distributed tensor: the actors' processes
    assert torch.equal(fetch_shard(ones, gpus=1).get(), torch.full((2,), 10.0))


def test_send_runs_a_remote_function_and_its_replies_go_to_a_port(procs):
    port, receiver = Channel.open()
    with procs.activate():
        send(remote(os.getpid), args=(), kwargs={}, port=port)
    pids = {receiver.recv().get(timeout=60) for _ in range(2)}
    assert len(pids) == 2 and os.getpid() not in pids
    with pytest.raises(TypeError, match="send\\(\\) takes an endpoint"):
        send(os.getpid, args=(), kwargs={})


def test_rref_errors_say_what_to_do(procs):
    keeper = procs.spawn("keeper2", Keeper)
    with procs.activate():
        with pytest.raises(ValueError, match="propagate="):
            keeper.plain.rref(torch.ones(2))
    other = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        elsewhere = other.spawn("keeper", Keeper)
        with procs.activate():
            x = torch.ones(2)
            with pytest.raises(TypeError, match="WRONG_MESH"):
                elsewhere.scale.rref(x)
            with pytest.raises(TypeError, match="WRONG_MESH"):
                elsewhere.plain.call(x)
    finally:
        other.stop().get(timeout=60)


def _gates(tmp_path, ranks):
    fifo = tmp_path / "gate"
    for rank in ranks:
        os.mkfifo(f"{fifo}.{rank}")
    return str(fifo)


def _open(fifo, ranks):
    for rank in ranks:
        with open(f"{fifo}.{rank}", "w") as gate:
            gate.write("go")


def test_a_temporary_sent_to_an_endpoint_is_read_after_it_was_freed(procs, tmp_path):
    gated = procs.spawn("gated", Gated)
    fifo = _gates(tmp_path, range(2))
    held = gated.hold.call(fifo)
    with procs.activate():
        x = torch.rand(3)
    # x * 2 is freed once the call is sent; the actors read it only after the
    # gate opens, when the stream has run its drop (fetching y waits for that)
    got = gated.values.call(x * 2)
    with procs.activate():
        y = x + 1
    before = shards(y)
    _open(fifo, range(2))
    assert held.get(timeout=60).values() == ["go", "go"]
    values = got.get(timeout=60)
    for g, x_g in enumerate(shards(x)):
        assert torch.allclose(torch.tensor(values.item(gpus=g)), x_g * 2)
        assert torch.allclose(before[g], x_g + 1)


def test_a_shard_lent_to_a_slice_s_endpoint_stays_nowhere(procs, tmp_path):
    gated = procs.spawn("gated2", Gated)
    with procs.activate():
        x = torch.rand(3)
        sizes = [call_on_shard_and_fetch(remote(table_size), shard={"gpus": g}) for g in range(2)]
    before = [size.get(timeout=60) for size in sizes]
    one = gated.slice(gpus=1)
    fifo = _gates(tmp_path, [1])
    held = one.hold.call_one(fifo)
    got = one.values.call_one(x * 3)
    with procs.activate():
        shards(x + 1)
    _open(fifo, [1])
    assert held.get(timeout=60) == "go"
    assert torch.allclose(torch.tensor(got.get(timeout=60)), shards(x)[1] * 3)
    with procs.activate():
        sizes = [call_on_shard_and_fetch(remote(table_size), shard={"gpus": g}) for g in range(2)]
    # taken where it was read, and never lent on the process that has no reader
    assert [size.get(timeout=60) for size in sizes] == before


class Holder(Actor):
    """Keeps the tensor its constructor was given."""

    def __init__(self, state):
        self.state = state

    @endpoint
    def add(self, x):
        return type(self.state).__name__, (x + self.state).tolist()


def test_a_distributed_tensor_given_to_spawn_arrives_as_each_actor_s_shard(procs):
    with procs.activate():
        rank = procs.rank_tensor("gpus")
        holders = procs.spawn("holder", Holder, rank * 10)  # a temporary, freed at once
        answers = holders.add.call(torch.ones(())).get(timeout=60)
    assert [answer for _, answer in answers] == [("Tensor", 1.0), ("Tensor", 11.0)]
    other = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        with procs.activate():
            with pytest.raises(TypeError, match="WRONG_MESH"):
                other.spawn("holder", Holder, torch.ones(()))
    finally:
        other.stop().get(timeout=60)
