"""Monarch's ready-made remote functions and helpers over a real mesh:
``OpaqueRef``, ``RemoteProcessGroup``, ``builtins.log``/``builtins.random``,
``random``, ``timer``, ``gradient`` and ``world_mesh``."""

import logging

import pytest
import torch

from monarch_actor import this_host
from monarch_tensor import (
    DeviceMesh,
    OpaqueRef,
    RemoteProcessGroup,
    call_on_shard_and_fetch,
    fetch_shard,
    no_mesh,
    remote,
    world_mesh,
)
from monarch_tensor import random as mrandom
from monarch_tensor.builtins.log import LOGGER_NAME, log_remote, set_logging_level_remote
from monarch_tensor.builtins.random import (
    get_rng_state_remote,
    random_seed_remote,
    seed_remote,
    set_manual_seed_remote,
    set_rng_state_remote,
)
from monarch_tensor.gradient import GradientGenerator
from monarch_tensor.timer import ExecutionTimer


@pytest.fixture(scope="module")
def procs():
    mesh = this_host().spawn_procs(per_host={"gpus": 2})
    yield mesh
    mesh.stop().get(timeout=60)


def fetched(*tensors):
    values = fetch_shard(tuple(tensors)).result()
    with no_mesh.activate():
        return [v.clone() for v in values]


# -- OpaqueRef -------------------------------------------------------------------------


def make_linear():
    torch.manual_seed(0)
    return OpaqueRef(torch.nn.Linear(3, 2))


def apply_ref(ref, x):
    return ref.value(x)


def replace_weight(ref, value):
    ref.value.weight.data.fill_(value)


def live_refs():
    from monarch_tensor import _opaque

    return torch.tensor(len(list(_opaque._key_table.keys())))


make_linear_remote = remote(make_linear, propagate=lambda: OpaqueRef(None))
apply_remote = remote(apply_ref, propagate=lambda ref, x: torch.empty(x.shape[0], 2))
replace_remote = remote(replace_weight, propagate="inspect")
live_refs_remote = remote(live_refs, propagate=lambda: torch.zeros((), dtype=torch.long))


def test_opaque_ref_keeps_an_object_on_each_process(procs):
    with procs.activate():
        ref = make_linear_remote()
        assert isinstance(ref, OpaqueRef)
        replace_remote(ref, 0.5)
        out = apply_remote(ref, torch.ones(4, 3))
        (value,) = fetched(out)
    torch.manual_seed(0)
    expected = torch.nn.Linear(3, 2)
    with torch.no_grad():
        expected.weight.fill_(0.5)
        assert torch.allclose(value, expected(torch.ones(4, 3)))


def test_dropping_an_opaque_ref_frees_its_object(procs):
    with procs.activate():
        before = fetched(live_refs_remote())[0].tolist()
        ref = make_linear_remote()
        assert fetched(live_refs_remote())[0].tolist() == before + 1
        del ref
        assert fetched(live_refs_remote())[0].tolist() == before


def test_the_controller_cannot_hold_an_opaque_value():
    with pytest.raises(RuntimeError, match="inside a remote function"):
        OpaqueRef(42)


def test_an_opaque_ref_from_a_remote_function_is_not_readable_here(procs):
    with procs.activate():
        ref = make_linear_remote()
    with pytest.raises(RuntimeError, match="cannot read"):
        _ = ref.value


# -- RemoteProcessGroup -----------------------------------------------------------------


def group_sum(x, group):
    import torch.distributed as dist

    out = x.clone()
    dist.all_reduce(out, group=group)
    return out


def test_process_group_is_a_remote_process_group(procs):
    with procs.activate() as mesh:
        group = mesh.process_group("gpus")
        assert isinstance(group, RemoteProcessGroup)
        assert group.dims == ("gpus",) and group.device_mesh is mesh and group.size() == 2
        assert group == mesh.process_group(["gpus"])
        rank = mesh.rank("gpus").float() + 1
        total = remote(group_sum, propagate=lambda x, g: x)(rank, group)
        (value,) = fetched(total)
    assert value.item() == 3.0  # 1 + 2


def test_remote_process_group_checks_its_dimensions(procs):
    with procs.activate() as mesh:
        with pytest.raises(KeyError, match="hosts"):
            RemoteProcessGroup("hosts", mesh)


# -- builtins ---------------------------------------------------------------------------


def logger_state():
    logger = logging.getLogger(LOGGER_NAME)
    return logger.level, [r.getMessage() for r in getattr(logger, "seen", [])]


def capture_log():
    logger = logging.getLogger(LOGGER_NAME)

    class Keep(logging.Handler):
        def emit(self, record):
            logger.seen.append(record)

    logger.seen = []
    logger.addHandler(Keep())


def test_log_remote_logs_on_every_process(procs):
    with procs.activate():
        remote(capture_log, propagate="inspect")()
        set_logging_level_remote(logging.ERROR)
        log_remote("dropped %d", 1, level=logging.INFO)
        log_remote("kept %s %d", "text", 2, level=logging.ERROR)
        log_remote("shard %s", torch.ones(2), level=logging.CRITICAL)
        states = remote(logger_state).call().get(timeout=60)
    assert len(states) == 2
    for _, (level, messages) in states.items():
        assert level == logging.ERROR
        assert len(messages) == 2  # the INFO message was below the level set
        assert messages[0].endswith("kept text 2")
        assert messages[1].endswith("shard tensor([1., 1.])")


def test_manual_seed_and_rng_state(procs):
    with procs.activate():
        set_manual_seed_remote(1234)
        a = torch.rand(5)
        set_manual_seed_remote(1234)
        b = torch.rand(5)
        set_manual_seed_remote(1234, process_idx=1)
        c = torch.rand(5)
        state = get_rng_state_remote()
        d = torch.rand(5)
        set_rng_state_remote(state)
        e = torch.rand(5)
        seed_remote()
        f = torch.rand(5)
        random_seed_remote()
        g = torch.rand(5)
        a, b, c, d, e, f, g = fetched(a, b, c, d, e, f, g)
    torch.manual_seed(1234)
    assert torch.equal(a, torch.rand(5)) and torch.equal(a, b)
    assert not torch.equal(a, c)
    assert torch.equal(d, e)
    assert not torch.equal(f, g)


def test_random_state_round_trip(procs):
    with procs.activate() as mesh:
        saved = mrandom.get_state()
        assert isinstance(saved, mrandom.State)
        assert saved.cpu.dtype == torch.uint8 and saved.cpu.shape == torch.get_rng_state().shape
        seeded = mrandom.new_state(mesh.rank("gpus"))
        x = torch.rand(4)
        mrandom.set_state(seeded)
        y = torch.rand(4)
        mrandom.set_state(seeded)
        z = torch.rand(4)
        mrandom.make_deterministic()
        x, y, z = fetched(x, y, z)
        on_one = call_on_shard_and_fetch(
            remote(lambda: torch.are_deterministic_algorithms_enabled()), shard={"gpus": 1}
        ).get(timeout=60)
        remote(lambda: torch.use_deterministic_algorithms(False), propagate="inspect")()
    assert torch.equal(y, z) and not torch.equal(x, y)
    torch.manual_seed(0)  # rank 0 of gpus was seeded with 0
    assert torch.equal(y, torch.rand(4))
    assert on_one is True


# -- timer, gradient --------------------------------------------------------------------


def test_execution_timer_on_the_processes(procs):
    start = remote("monarch_tensor.timer.execution_timer_start", propagate="inspect")
    stop = remote("monarch_tensor.timer.execution_timer_stop", propagate="inspect")
    average = remote(
        "monarch_tensor.timer.get_execution_timer_average_ms",
        propagate=lambda name="default": torch.zeros((), dtype=torch.float64),
    )
    with procs.activate():
        for _ in range(3):
            start("mm", use_cpu=True)
            torch.ones(64, 64) @ torch.ones(64, 64)
            stop("mm", use_cpu=True)
        (mean,) = fetched(average("mm"))
        counts = remote("monarch_tensor.timer.get_execution_timer_summary").call().get(60)
    assert mean.dtype == torch.float64 and mean.item() > 0
    assert [summary["mm"]["count"] for _, summary in counts.items()] == [3, 3]


def test_execution_timer_here():
    ExecutionTimer.reset()
    with ExecutionTimer.time("block", use_cpu=True):
        torch.ones(8).sum()
    ExecutionTimer.start(use_cpu=True)
    ExecutionTimer.stop(use_cpu=True)
    summary = ExecutionTimer.summary()
    assert summary["block"]["count"] == 1 and summary["default"]["count"] == 1
    assert ExecutionTimer.get_latest_measurement("block") == summary["block"]["total_ms"]
    assert ExecutionTimer.get_latest_measurement("never") == 0.0
    with pytest.raises(RuntimeError, match="not started"):
        ExecutionTimer.stop("never", use_cpu=True)


def test_gradient_generator_matches_autograd():
    t = torch.rand(3, 3, requires_grad=True)
    w = torch.rand(3, 3, requires_grad=True)
    unused = torch.rand(2, requires_grad=True)
    loss = torch.relu(t @ w).sum()
    expected = torch.autograd.grad([loss], [w, t], retain_graph=True)
    grads = list(GradientGenerator([loss], [w, unused, t]))
    assert len(grads) == 3 and grads[1] is None
    assert torch.allclose(grads[0], expected[0]) and torch.allclose(grads[2], expected[1])
    seeded = list(GradientGenerator([t * 2], [t], [torch.ones(3, 3)]))
    assert torch.equal(seeded[0], torch.full((3, 3), 2.0))
    with pytest.raises(ValueError, match="grad_roots"):
        GradientGenerator([loss], [t], [None, None])


# -- world_mesh -------------------------------------------------------------------------


def test_world_mesh_over_this_host():
    mesh = world_mesh(None, this_host(), 2)
    assert isinstance(mesh, DeviceMesh)
    assert mesh.names == ("host", "gpu") and mesh.sizes == {"host": 1, "gpu": 2}
    with mesh.activate():
        (rank,) = fetched(mesh.rank("gpu"))
    assert rank.item() == 0
    mesh._procs.stop().get(timeout=60)


def test_world_mesh_checks_its_arguments():
    with pytest.raises(TypeError, match="supervisor"):
        world_mesh(object(), this_host(), 1)
    with pytest.raises(ValueError, match="gpu_per_host"):
        world_mesh(None, this_host(), 0)
    with pytest.raises(ValueError, match="at least one host"):
        world_mesh(None, [], 1)
