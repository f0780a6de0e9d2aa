"""Device meshes: moving tensors between meshes, ranks, renamed and sliced
meshes, and a process that dies mid-operation; real processes."""

import os
import threading
import time

import pytest
import torch

import monarch_actor
from monarch_actor import SupervisionError, this_host
from monarch_tensor import DeviceMesh, fetch_shard, remote, slice_mesh, to_mesh


@pytest.fixture(scope="module")
def procs():
    mesh = this_host().spawn_procs(per_host={"stage": 2, "gpus": 2})
    yield mesh
    mesh.stop().get(timeout=60)


def test_to_mesh_moves_each_shard_to_the_same_coordinates(procs):
    with procs.slice(stage=0).activate() as first:
        t = torch.rand(3) + first.rank("gpus")
    with procs.slice(stage=1).activate() as second:
        moved = t.to_mesh(second)
        again = moved * 2
    assert moved.mesh is second
    for g in range(2):
        source = fetch_shard(t, gpus=g).get(timeout=60)
        assert torch.allclose(fetch_shard(again, gpus=g).get(timeout=60), source * 2)
    with pytest.raises(TypeError, match="takes a DeviceMesh"):
        t.to_mesh("stage 1")


def test_slice_mesh_picks_the_shards_of_one_index(procs):
    with procs.activate() as whole:
        t = whole.rank(("stage", "gpus")) * 1.0
    with procs.slice(stage=1).activate() as second:
        [picked] = to_mesh(slice_mesh([t], stage=0), second)
    assert [fetch_shard(picked, gpus=g).get(timeout=60).item() for g in range(2)] == [0.0, 1.0]
    with pytest.raises(ValueError, match="slice_mesh"):
        t.to_mesh(second)  # second has no 'stage'
    with pytest.raises(KeyError, match="'hosts'"):
        t.slice_mesh(hosts=0)


def test_a_dimension_the_source_lacks_gets_the_same_shard_with_a_warning(procs):
    with procs.slice(stage=0, gpus=0).activate():
        t = torch.arange(3.0)
    with procs.slice(gpus=0).activate() as column:
        with pytest.warns(UserWarning, match="same shard"):
            copied = t.to_mesh(column)
    for s in range(2):
        assert fetch_shard(copied, stage=s).get(timeout=60).tolist() == [0.0, 1.0, 2.0]


def test_sizes_must_match(procs):
    with procs.slice(stage=0).activate():
        t = torch.ones(2)
    with pytest.raises(ValueError, match="'gpus' has 2 processes here and 1"):
        t.to_mesh(procs.slice(stage=1, gpus=slice(0, 1)))


def test_ranks_tables_and_rearranged_meshes(procs):
    with procs.activate() as mesh:
        assert isinstance(mesh, DeviceMesh)
        assert mesh.names == ("stage", "gpus") and mesh.sizes == {"stage": 2, "gpus": 2}
        flat = mesh.rank(("stage", "gpus"))
        stage = mesh.ranks["stage"]
        with pytest.raises(KeyError, match="'hosts'"):
            mesh.rank("hosts")
    assert [
        fetch_shard(flat, stage=s, gpus=g).get(timeout=60).item()
        for s in range(2)
        for g in range(2)
    ] == [0, 1, 2, 3]
    assert fetch_shard(stage, stage=1, gpus=0).get(timeout=60).item() == 1
    assert mesh.to_table().splitlines() == [
        "stage  gpus  process",
        "    0     0        0",
        "    0     1        1",
        "    1     0        2",
        "    1     1        3",
    ]
    assert mesh.slice(stage=1) is mesh.slice(stage=1)  # one device mesh per arrangement
    with procs.rename(gpus="devices").activate() as renamed:
        assert renamed.names == ("stage", "devices")
        d = renamed.rank("devices")
    assert fetch_shard(d, stage=0, devices=1).get(timeout=60).item() == 1
    with procs.flatten("all").activate() as flat_mesh:
        r = flat_mesh.rank("all")
    assert fetch_shard(r, all=3).get(timeout=60).item() == 3


def die_on_one(x):
    if x.sum().item() > 1:  # only the process whose shard says so
        os._exit(7)
    return x


def test_a_process_dying_mid_operation_fails_fetches_not_hangs(monkeypatch):
    faults = []
    reported = threading.Event()

    def hook(failure):
        faults.append(failure)
        reported.set()

    monkeypatch.setattr(monarch_actor, "unhandled_fault_hook", hook)
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        with procs.activate() as mesh:
            marker = mesh.rank("gpus") * 2.0
            out = remote(die_on_one, propagate=lambda x: x)(marker)
            later = out + 1
        started = time.monotonic()
        with pytest.raises(SupervisionError):
            fetch_shard(later, gpus=1).get(timeout=60)
        assert time.monotonic() - started < 30
        assert reported.wait(30)  # the owner (this script) hears of it once
        assert "7" in str(faults[0])
    finally:
        procs.stop().get(timeout=60)


def test_a_proc_mesh_is_its_device_mesh(procs):
    # as in Monarch's distributed_tensors.py: a proc mesh shows its table and
    # gives rank tensors without being activated first
    table = procs.to_table()
    assert table.splitlines()[0].split() == ["stage", "gpus", "process"]
    assert len(table.splitlines()) == 1 + 4
    gpus = procs.rank_tensor("gpus")
    both = procs.rank_tensor(("stage", "gpus"))
    ranks = procs.rank_tensors()
    assert set(ranks) == {"stage", "gpus"}
    for s in range(2):
        for g in range(2):
            assert fetch_shard(gpus, stage=s, gpus=g).get(timeout=60).item() == g
            assert fetch_shard(both, stage=s, gpus=g).get(timeout=60).item() == 2 * s + g
            assert fetch_shard(ranks["stage"], stage=s, gpus=g).get(timeout=60).item() == s
    with pytest.raises(KeyError, match="'hosts'"):
        procs.rank_tensor("hosts")
    # a slice is the device mesh of its processes
    assert procs.slice(stage=1).to_table().splitlines()[1].split() == ["0", "2"]
