"""Processes along a ``gpus``/``gpu`` dimension each get their own GPU, as
Monarch's tensor engine places its workers. The host's GPUs are what
``CUDA_VISIBLE_DEVICES`` names (else its /dev/nvidiaN nodes), so these tests
place processes on GPUs that need not exist: each process's environment is
the placement."""

from __future__ import annotations

import pytest
from actors import Victim

import monarch_config
from monarch_actor import this_host
from monarch_actor._procs.gpus import host_gpus, place_on_gpus

PLACED = ["CUDA_VISIBLE_DEVICES", "NCCL_HOSTID", "MONARCH_HOST_GPUS", "LOCAL_RANK"]


def placement(procs) -> dict[int, list[str | None]]:
    """Each process's placement variables, by its rank."""
    envs = procs.spawn("placed", Victim).env.call(PLACED).get(timeout=60)
    ranks = {}
    for point, env in envs.items():
        ranks[point.rank] = env
    return ranks


def test_distributed_tensors_eight_processes_land_on_eight_gpus(monkeypatch):
    # Monarch's distributed_tensors.py: this_host().spawn_procs({"gpu": 8})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", ",".join(map(str, range(8))))
    procs = this_host().spawn_procs({"gpu": 8}, name="trainers")
    try:
        placed = placement(procs)
        assert [placed[rank][0] for rank in range(8)] == [str(rank) for rank in range(8)]
        assert {placed[rank][1] for rank in range(8)} == {"trainers_host_0"}  # one host
        assert {placed[rank][2] for rank in range(8)} == {"8"}
        assert [placed[rank][3] for rank in range(8)] == [str(rank) for rank in range(8)]
    finally:
        procs.stop().get(timeout=60)


def test_the_gpu_index_maps_through_the_hosts_visible_devices_and_other_dimensions(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6,2")
    procs = this_host().spawn_procs({"gpus": 2, "streams": 2})
    try:
        placed = placement(procs)
        assert [placed[rank][0] for rank in range(4)] == ["6", "6", "2", "2"]
    finally:
        procs.stop().get(timeout=60)


def test_more_gpu_processes_than_gpus_is_refused_naming_mesh_host_counts_and_fixes(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(ValueError) as refused:
        this_host().spawn_procs({"gpus": 4}, name="too_many")
    message = str(refused.value)
    assert "'too_many'" in message and "2 GPUs (0, 1)" in message
    assert "4 processes were asked along 'gpus'" in message
    assert "share_gpus=True" in message and "MONARCH_SHARE_GPUS=1" in message


def test_shared_gpus_take_several_processes_each_round_robin(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with monarch_config.configured(share_gpus=True):
        procs = this_host().spawn_procs({"gpus": 3})
    try:
        assert [placement(procs)[rank][0] for rank in range(3)] == ["0", "1", "0"]
    finally:
        procs.stop().get(timeout=60)


def test_a_host_without_gpus_places_nothing(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    procs = this_host().spawn_procs({"gpus": 3})
    try:
        for env in placement(procs).values():
            assert env[1:3] == [None, None]  # no GPU of their own: as the host is
    finally:
        procs.stop().get(timeout=60)


def test_a_dimension_not_named_for_gpus_places_nothing():
    assert place_on_gpus(
        {"procs": 2}, ["0", "1"], share=False, mesh="m", host="h", host_index=0
    ) == [
        {},
        {},
    ]


@pytest.mark.parametrize(
    ("visible", "gpus"),
    [("0,1,2", ["0", "1", "2"]), (" 3 , 1", ["3", "1"]), ("", []), ("-1", []), ("2,-1,3", ["2"])],
)
def test_the_hosts_gpus_are_what_cuda_visible_devices_names(monkeypatch, visible, gpus):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert host_gpus() == gpus
