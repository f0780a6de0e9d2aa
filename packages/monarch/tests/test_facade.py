"""``monarch.actor`` exposes Monarch's names, and they are the runtime's own."""

import monarch
import monarch.actor
import monarch_actor

CORE_AND_COMMON = [
    "Actor", "endpoint", "this_host", "this_proc", "context", "Context", "current_rank",
    "current_size", "current_actor_name", "Future", "ValueMesh", "ProcMesh", "HostMesh",
    "Point", "Extent", "ActorError", "MeshFailure", "unhandled_fault_hook", "Channel",
    "Port", "PortReceiver", "send", "Accumulator", "concurrent_endpoint", "Endpoint",
    "enable_transport", "ChannelTransport", "get_or_spawn_controller", "as_endpoint",
    "shutdown_context", "attach_to_workers", "run_worker_loop_forever",
    "run_worker_loop_until_shutdown", "start_worker_loop_forever", "hosts_from_config",
]  # fmt: skip


def test_monarch_job_and_spmd_expose_monarchs_names():
    import monarch.job
    import monarch.spmd

    for name in ["JobTrait", "JobState", "LocalJob", "ProcessJob", "SlurmJob", "hosts_from_config",
                 "job_load", "job_loads", "DEFAULT_JOB_PATH", "exec_command"]:  # fmt: skip
        assert name in monarch.job.__all__ and hasattr(monarch.job, name), name
    assert monarch.job.DEFAULT_JOB_PATH == ".monarch/job_state.pkl"
    assert monarch.actor.hosts_from_config is monarch.job.hosts_from_config
    for name in ["SPMDActor", "setup_torch_elastic_env", "setup_torch_elastic_env_async"]:
        assert hasattr(monarch.spmd, name), name
    import monarch.job.spmd
    import monarch_launcher.spmd

    assert sorted(monarch.job.spmd.__all__) == ["SPMDJob", "StoreJob", "serve"]
    for name in monarch.job.spmd.__all__:
        assert getattr(monarch.job.spmd, name) is getattr(monarch_launcher.spmd, name)


def test_every_core_and_common_name_is_exported():
    missing = [name for name in CORE_AND_COMMON if not hasattr(monarch.actor, name)]
    assert missing == []
    assert set(CORE_AND_COMMON) <= set(monarch.actor.__all__)


def test_the_names_are_the_runtime_objects():
    assert monarch.actor.Actor is monarch_actor.Actor
    assert monarch.actor.Future is monarch_actor.Future
    assert monarch.Shape.__module__ == "monarch_mesh"


def test_a_script_runs_through_the_facade():
    from monarch.actor import Actor, endpoint, this_proc

    class Twice(Actor):
        @endpoint
        def twice(self, x: int) -> int:
            return 2 * x

    assert this_proc().spawn("twice", Twice).twice.call_one(21).get() == 42


def test_issue_22_names_are_monarchs_and_the_packages_own():
    import monarch.builtins.log
    import monarch.builtins.random
    import monarch.gradient
    import monarch.random
    import monarch.timer.execution_timer
    import monarch.timer.remote_execution_timer
    import monarch_tensor
    import monarch_tensor.builtins.log
    import monarch_tensor.gradient
    import monarch_tensor.random
    import monarch_tensor.timer

    assert monarch.actor.attach is monarch_actor.attach
    assert monarch.actor.default_bootstrap_cmd is monarch_actor.default_bootstrap_cmd
    for name in ["OpaqueRef", "RemoteProcessGroup", "world_mesh"]:
        assert getattr(monarch, name) is getattr(monarch_tensor, name), name
    assert monarch.ActorFuture is monarch_actor.Future
    assert monarch.builtins.__name__ == "monarch.builtins"
    assert monarch.timer.__name__ == "monarch.timer"
    assert monarch.builtins.log.log_remote is monarch_tensor.builtins.log.log_remote
    assert monarch.builtins.log.logger is monarch_tensor.builtins.log.logger
    assert monarch.builtins.random.set_manual_seed_remote is (
        monarch_tensor.builtins.random.set_manual_seed_remote
    )
    assert monarch.random.new_state is monarch_tensor.random.new_state
    assert monarch.gradient.GradientGenerator is monarch_tensor.gradient.GradientGenerator
    assert monarch.timer.ExecutionTimer is monarch_tensor.timer.ExecutionTimer
    assert (
        monarch.timer.remote_execution_timer.execution_timer_start
        is monarch_tensor.timer.execution_timer_start
    )
    assert {"OpaqueRef", "RemoteProcessGroup", "ActorFuture", "builtins", "timer",
            "world_mesh"} <= set(monarch.__all__)  # fmt: skip
    assert {"attach", "default_bootstrap_cmd"} <= set(monarch.actor.__all__)


def test_monarch_builtins_and_timer_load_on_first_use():
    import subprocess
    import sys

    code = (
        "import monarch, sys; assert 'monarch.builtins' not in sys.modules; "
        "print(monarch.builtins.random.seed_remote, monarch.builtins.log.log_remote, "
        "monarch.timer.ExecutionTimer.__name__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "<remote _seed>" in done.stdout and "ExecutionTimer" in done.stdout
