"""The internal import paths Monarch's own examples and tests use for public
objects (``monarch._src...``, ``monarch._rust_bindings...``) give the same
objects as the public modules."""

import importlib

import pytest

import monarch
import monarch.actor
import monarch.config
import monarch.job
import monarch.job.kubernetes
import monarch.job.spmd

# (internal module, name, public module): each import as Monarch's examples and tests write it
PATHS = [
    ("monarch._src.job.process", "ProcessJob", monarch.job),
    ("monarch._src.job.job", "JobState", monarch.job),
    ("monarch._src.job.job", "JobTrait", monarch.job),
    ("monarch._src.job.job", "LocalJob", monarch.job),
    ("monarch._src.job.job", "MeshAdminConfig", monarch.job),
    ("monarch._src.job.job", "TelemetryConfig", monarch.job),
    ("monarch._src.job.job", "exec_command", monarch.job),
    ("monarch._src.job.job", "job_load", monarch.job),
    ("monarch._src.job.job", "job_loads", monarch.job),
    ("monarch._src.job.slurm", "SlurmJob", monarch.job),
    ("monarch._src.job.port_forward", "PortForwarder", monarch.job),
    ("monarch._src.job.kubernetes", "KubernetesJob", monarch.job.kubernetes),
    ("monarch._src.job.kubernetes", "ImageSpec", monarch.job.kubernetes),
    ("monarch._src.job.kubernetes", "KubeConfig", monarch.job.kubernetes),
    ("monarch._src.job.spmd", "SPMDJob", monarch.job.spmd),
    ("monarch._src.job.spmd", "StoreJob", monarch.job.spmd),
    ("monarch._src.job.spmd", "serve", monarch.job.spmd),
    ("monarch._src.actor.host_mesh", "this_host", monarch.actor),
    ("monarch._src.actor.host_mesh", "this_proc", monarch.actor),
    ("monarch._src.actor.host_mesh", "HostMesh", monarch.actor),
    ("monarch._src.actor.host_mesh", "default_bootstrap_cmd", monarch.actor),
    ("monarch._src.actor.actor_mesh", "context", monarch.actor),
    ("monarch._src.actor.actor_mesh", "Actor", monarch.actor),
    ("monarch._src.actor.actor_mesh", "ActorError", monarch.actor),
    ("monarch._src.actor.actor_mesh", "Channel", monarch.actor),
    ("monarch._src.actor.actor_mesh", "Context", monarch.actor),
    ("monarch._src.actor.actor_mesh", "Port", monarch.actor),
    ("monarch._src.actor.actor_mesh", "PortReceiver", monarch.actor),
    ("monarch._src.actor.actor_mesh", "ValueMesh", monarch.actor),
    ("monarch._src.actor.actor_mesh", "current_rank", monarch.actor),
    ("monarch._src.actor.bootstrap", "attach_to_workers", monarch.actor),
    ("monarch._src.actor.concurrent", "concurrent_endpoint", monarch.actor),
    ("monarch._src.actor.endpoint", "endpoint", monarch.actor),
    ("monarch._src.actor.future", "Future", monarch.actor),
    ("monarch._src.actor.proc_mesh", "ProcMesh", monarch.actor),
    ("monarch._src.actor.proc_mesh", "get_or_spawn_controller", monarch.actor),
    ("monarch._src.actor.shape", "NDSlice", monarch),
    ("monarch._src.actor.shape", "Shape", monarch),
    ("monarch._src.actor.shape", "Slice", monarch),
    ("monarch._src.actor.supervision", "unhandled_fault_hook", monarch.actor),
    ("monarch._src.actor.telemetry", "traced", monarch.actor),
    ("monarch._src.actor.debugger.debug_controller", "debug_controller", monarch.actor),
    ("monarch._rust_bindings.monarch_hyperactor.supervision", "SupervisionError", monarch.actor),
    ("monarch._rust_bindings.monarch_hyperactor.supervision", "MeshFailure", monarch.actor),
    ("monarch._rust_bindings.monarch_hyperactor.shape", "Shape", monarch),
    ("monarch._rust_bindings.monarch_hyperactor.shape", "Slice", monarch),
    ("monarch._rust_bindings.monarch_hyperactor.shape", "Extent", monarch.actor),
    ("monarch._rust_bindings.monarch_hyperactor.shape", "Point", monarch.actor),
    ("monarch._rust_bindings.monarch_hyperactor.selection", "Selection", monarch),
    ("monarch._rust_bindings.monarch_hyperactor.channel", "ChannelTransport", monarch.actor),
    ("monarch._rust_bindings.monarch_hyperactor.config", "Encoding", monarch.config),
    ("monarch._rust_bindings.monarch_hyperactor.proc", "ProcId", monarch.actor),
    ("monarch._rust_bindings.monarch_hyperactor.proc", "Uid", monarch.actor),
    ("monarch._rust_bindings.monarch_hyperactor.value_mesh", "ValueMesh", monarch.actor),
]


@pytest.mark.parametrize(("module", "name", "public"), PATHS, ids=[f"{m}.{n}" for m, n, _ in PATHS])
def test_monarch_internal_path_gives_the_public_object(module, name, public) -> None:
    shim = importlib.import_module(module)
    assert getattr(shim, name) is getattr(public, name)
    assert name in shim.__all__
    assert shim.__doc__ and "Monarch compatibility" in shim.__doc__


def test_every_shim_reexports_only_public_objects() -> None:
    publics = {
        id(getattr(m, n))
        for m in (
            monarch.actor,
            monarch.job,
            monarch.job.kubernetes,
            monarch.job.spmd,
            monarch.config,
        )
        for n in m.__all__
    }
    publics |= {
        id(getattr(monarch, n)) for n in ("Extent", "NDSlice", "Shape", "Slice", "Selection")
    }
    for module in {m for m, _, _ in PATHS}:
        shim = importlib.import_module(module)
        for name in shim.__all__:
            assert id(getattr(shim, name)) in publics, f"{module}.{name} is not a public object"
