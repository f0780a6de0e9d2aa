"""Distributed tensors on real processes: a mesh of 2 x 2 processes on this
host, shared by the module's tests (each test makes its own tensors)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from monarch_actor import this_host
from monarch_tensor import (
    RemoteTensorError,
    Tensor,
    fetch_shard,
    get_active_mesh,
    inspect,
    no_mesh,
    reduce,
)

POINTS = [{"hosts": h, "gpus": g} for h in range(2) for g in range(2)]


@pytest.fixture(scope="module")
def procs():
    mesh = this_host().spawn_procs(per_host={"hosts": 2, "gpus": 2})
    yield mesh
    mesh.stop().get(timeout=60)


def shards(t):
    return [fetch_shard(t, **point).get(timeout=60) for point in POINTS]


def test_operations_make_distributed_tensors_with_known_metadata(procs):
    with procs.activate():
        t = torch.rand(3, 4)
        u = (t * 2 + 1).sum(0)
        assert isinstance(t, Tensor) and isinstance(u, Tensor)
        assert u.shape == (4,) and u.dtype == torch.float32  # no round trip
        assert "monarch.Tensor(mesh=<DeviceMesh(names(('hosts', 'gpus'))" in repr(t)
        assert get_active_mesh().names == ("hosts", "gpus")
    got_t, got_u = shards(t), shards(u)
    for local_t, local_u in zip(got_t, got_u, strict=True):
        assert torch.allclose(local_u, (local_t * 2 + 1).sum(0))
    assert not torch.equal(got_t[0], got_t[1])  # each process has its own random shard
    with pytest.raises(ValueError, match="no device mesh is active"):
        get_active_mesh()


def test_a_shape_error_is_raised_here_at_the_line_that_caused_it(procs):
    with procs.activate():
        a = torch.ones(3, 4)
        with pytest.raises(RuntimeError, match=r"same reduction dim|size mismatch|shapes"):
            a @ torch.ones(3, 3)
        with pytest.raises(RuntimeError, match="fetch_shard"):
            a.sum().item()


def test_no_mesh_runs_torch_locally_inside_an_active_block(procs):
    with procs.activate():
        with no_mesh.activate():
            local = torch.ones(2)
        remote = torch.ones(2)
    assert type(local) is torch.Tensor
    assert isinstance(remote, Tensor)


def test_a_local_tensor_s_values_are_read_here_inside_an_active_block(procs):
    local = torch.arange(3.0)  # made outside: a plain tensor, as a fetched shard is
    with procs.activate():
        assert local.tolist() == [0.0, 1.0, 2.0]
        one = fetch_shard(torch.ones(()), hosts=0, gpus=0).get(timeout=60)
        assert (one.item(), float(one), int(one), bool(one)) == (1.0, 1.0, 1, True)
        mixed = torch.ones(3) + local  # a local tensor in an operation: on the mesh
        assert isinstance(mixed, Tensor)
        with pytest.raises(RuntimeError, match="fetch_shard"):
            mixed.sum().item()  # a distributed tensor's values are not here
    assert fetch_shard(mixed, hosts=1, gpus=1).get(timeout=60).tolist() == [1.0, 2.0, 3.0]


OPS = {
    "add": lambda x: x + 3,
    "mul": lambda x: x * x,
    "sub": lambda x: 1 - x,
    "relu": torch.relu,
    "neg": lambda x: -x,
    "square": lambda x: x.pow(2),
    "cumsum": lambda x: x.cumsum(0),
}


@settings(max_examples=15, deadline=None)
@given(
    values=st.lists(st.floats(-100, 100, allow_nan=False), min_size=1, max_size=6),
    op=st.sampled_from(sorted(OPS)),
)
def test_element_wise_operations_equal_local_torch_on_the_fetched_inputs(procs, values, op):
    with procs.activate():
        x = torch.tensor(values) + torch.rand(len(values))
        y = OPS[op](x)
    for point in POINTS[::3]:
        local_x, local_y = fetch_shard((x, y), **point).get(timeout=60)
        assert torch.allclose(local_y, OPS[op](local_x))


def test_in_place_operations_and_views_act_on_the_shards(procs):
    with procs.activate():
        t = torch.zeros(4)
        view = t[1:3]
        view.add_(5)
        t[0] = 7
    assert inspect(t, hosts=1, gpus=1).tolist() == [7.0, 5.0, 5.0, 0.0]


def test_fetching_needs_every_dimension_and_no_other(procs):
    with procs.activate():
        t = torch.ones(2)
    with pytest.raises(ValueError, match="Missing key 'gpus'"):
        fetch_shard(t, hosts=0)
    with pytest.raises(KeyError, match="'gpu'"):
        fetch_shard(t, hosts=0, gpus=0, gpu=1)
    got = fetch_shard({"a": [t, 3]}).get(timeout=60)
    assert got["a"][0].tolist() == [1.0, 1.0] and got["a"][1] == 3


def test_a_failure_on_the_processes_surfaces_on_fetch_and_the_mesh_keeps_working(procs):
    with procs.activate():
        t = torch.ones(4)
        bad = t[torch.tensor([7])]  # the index is out of range: only the processes see it
        worse = bad * 2  # depends on it: poisoned too
        fine = t + 1
    with pytest.raises(RemoteTensorError, match=r"(?s)__getitem__.*test_tensors.py.*index 7"):
        fetch_shard(worse, hosts=1, gpus=0).get(timeout=60)
    assert fetch_shard(fine).get(timeout=60).tolist() == [2.0] * 4


def test_a_dropped_tensor_cannot_be_used(procs):
    with procs.activate():
        t = torch.ones(2)
        t.drop()
        assert t.dropped
        with pytest.raises(TypeError, match="after drop"):
            torch.add(t, 1)
        with pytest.raises(TypeError, match="after drop"):
            t + 1


def test_tensors_of_two_meshes_do_not_mix(procs):
    other = procs.slice(hosts=0)
    with procs.activate():
        a = torch.ones(2)
    with other.activate():
        b = torch.ones(2)
        with pytest.raises(TypeError, match="Incorrect arguments to monarch operation"):
            torch.add(a, b)
        with pytest.raises(TypeError, match="WRONG_MESH"):
            a + b


def test_an_activated_slice_computes_on_its_processes_only(procs):
    row = procs.slice(hosts=1)
    with row.activate():
        t = torch.full((2,), 3.0)
        assert get_active_mesh().names == ("gpus",)
    assert fetch_shard(t, gpus=1).get(timeout=60).tolist() == [3.0, 3.0]


DIMS = st.sampled_from([("hosts",), ("gpus",), ("hosts", "gpus"), ()])


@settings(max_examples=12, deadline=None)
@given(dims=DIMS, reduction=st.sampled_from(["sum", "avg", "max", "min", "product"]))
def test_reduce_equals_the_reduction_of_the_fetched_shards(procs, dims, reduction):
    with procs.activate():
        t = torch.rand(4) + 0.5
        r = t.reduce(dims, reduction)
    inputs = shards(t)
    reduced = shards(r)
    names = dims or ("hosts", "gpus")
    for point, got in zip(POINTS, reduced, strict=True):
        group = [
            inputs[i]
            for i, other in enumerate(POINTS)
            if all(other[d] == point[d] for d in ("hosts", "gpus") if d not in names)
        ]
        stacked = torch.stack(group)
        expected = {
            "sum": stacked.sum(0),
            "avg": stacked.mean(0),
            "max": stacked.max(0).values,
            "min": stacked.min(0).values,
            "product": stacked.prod(0),
        }[reduction]
        assert torch.allclose(got, expected, rtol=1e-5), (point, dims, reduction)


@settings(max_examples=6, deadline=None)
@given(dim=st.sampled_from(["hosts", "gpus"]), scatter=st.booleans())
def test_stack_gathers_and_scatter_splits(procs, dim, scatter):
    with procs.activate():
        t = torch.rand(2, 3)
        stacked = t.reduce(dim, "stack", scatter=scatter)
        summed = t.reduce(dim, "sum", scatter=True)
    assert stacked.shape == ((2, 3) if scatter else (2, 2, 3))
    assert summed.shape == (1, 3)
    inputs = shards(t)
    for index, point in enumerate(POINTS):
        peers = [
            inputs[i]
            for i, p in enumerate(POINTS)
            if all(p[d] == point[d] for d in ("hosts", "gpus") if d != dim)
        ]
        me = point[dim]
        got = fetch_shard((stacked, summed), **point).get(timeout=60)
        if scatter:  # all-to-all: row j of peer j's input... row me of every peer's
            assert torch.allclose(got[0], torch.stack([peer[me] for peer in peers]))
        else:
            assert torch.allclose(got[0], torch.stack(peers))
        assert torch.allclose(got[1], torch.stack(peers).sum(0)[me : me + 1])
        del index


def test_reduce_arguments_are_checked_here(procs):
    with procs.activate():
        t = torch.ones(3)
        with pytest.raises(ValueError, match="twice"):
            t.reduce(("gpus", "gpus"))
        with pytest.raises(KeyError, match="'nope'"):
            t.reduce("nope")
        with pytest.raises(ValueError, match="unknown reduction"):
            t.reduce("gpus", "median")
        with pytest.raises(ValueError, match="exactly one dimension"):
            t.reduce(("hosts", "gpus"), "stack")
        with pytest.raises(ValueError, match="does not divide"):
            t.reduce("gpus", scatter=True)
        with pytest.raises(ValueError, match="changes the shape"):
            t.reduce_("gpus", "stack")
        both = reduce({"x": t, "n": 1}, "gpus")
    assert both["n"] == 1
    assert fetch_shard(both["x"]).get(timeout=60).tolist() == [2.0, 2.0, 2.0]


def test_reduce_in_place_changes_the_tensor(procs):
    with procs.activate():
        t = torch.ones(2)
        same = t.reduce_(("hosts", "gpus"), "sum")
        assert same is t
    assert fetch_shard(t, hosts=1, gpus=1).get(timeout=60).tolist() == [4.0, 4.0]


def test_numpy_is_a_dependency():
    """torch warns "Failed to initialize NumPy" on import where numpy is
    missing, and a plain `pip install monarch-tensor` does not bring it
    otherwise: the package declares it."""
    import importlib.metadata
    import re

    requires = importlib.metadata.requires("monarch-tensor") or []
    names = {
        re.split(r"[ ;<>=!~\[]", r, maxsplit=1)[0].lower() for r in requires if "extra" not in r
    }
    assert {"torch", "numpy"} <= names, requires
