"""``HostMesh`` as Monarch 0.7.0 has it: processes launched by a bootstrap
command or another Python interpreter, owned meshes against references
(slices, unpickled copies), teardown futures that start when first looked
at, and a mesh that refuses use once shut down."""

import os
import stat
import subprocess
import sys

import cloudpickle
import pytest
from actors import Victim
from script_runner import run_script
from test_hosts import WORKER, free_port

from monarch_actor import (
    Actor,
    BootstrapCommand,
    attach_to_workers,
    default_bootstrap_cmd,
    endpoint,
    this_host,
)
from monarch_transport import job_secret


class Launched(Actor):
    @endpoint
    def env(self, name: str) -> str | None:
        return os.environ.get(name)

    @endpoint
    def argv(self) -> list[str]:
        with open(f"/proc/{os.getpid()}/cmdline", "rb") as f:
            return [part.decode() for part in f.read().split(b"\0") if part]

    @endpoint
    def spawn_inner(self) -> "Launched":
        return this_host().spawn_procs(per_host={"procs": 1}).spawn("inner", Launched)


def test_host_mesh_flags():
    assert this_host().stream_logs is False
    assert this_host().is_fake_in_process is False


def test_proc_bind_of_the_wrong_length_names_both_counts():
    with pytest.raises(ValueError, match=r"proc_bind length \(1\) must equal procs_per_host \(4\)"):
        this_host().spawn_procs(per_host={"gpus": 4}, proc_bind=[{"cpus": "0"}])


def test_a_bootstrap_command_launches_each_process():
    started = []  # the proc meshes, stopped at the end
    os.environ["MONARCH_TEST_INHERITED"] = "yes"
    os.environ["MONARCH_TEST_REMOVED"] = "yes"
    try:
        base = default_bootstrap_cmd().with_env({"MONARCH_TEST_REMOVED": None})

        def per_rank(point) -> BootstrapCommand:
            return base.with_env({"CUDA_VISIBLE_DEVICES": str(point["gpus"])})

        procs = this_host().spawn_procs(per_host={"gpus": 2}, bootstrap_command=per_rank)
        started.append(procs)
        launched = procs.spawn("launched", Launched)
        devices = launched.env.call("CUDA_VISIBLE_DEVICES").get(timeout=60)
        assert sorted(devices.values()) == ["0", "1"]
        one = launched.slice(gpus=0)
        assert one.env.call_one("MONARCH_TEST_INHERITED").get(timeout=30) == "yes"
        assert one.env.call_one("MONARCH_TEST_REMOVED").get(timeout=30) is None
        # the command itself runs, then becomes the process
        argv = one.argv.call_one().get(timeout=30)
        assert argv[: len(base.argv())] == base.argv() and "--proc" in argv
        # a command that inherits nothing still gets the runtime's own variables
        bare = BootstrapCommand(sys.executable, None, base.args, {"ONLY": "1"}, inherit_env=False)
        started.append(this_host().spawn_procs(bootstrap_command=bare))
        alone = started[-1].spawn("alone", Launched)
        assert alone.env.call_one("ONLY").get(timeout=60) == "1"
        assert alone.env.call_one("MONARCH_TEST_INHERITED").get(timeout=30) == "yes"  # MONARCH_*
        assert alone.env.call_one("PATH").get(timeout=30) is None
        # the host's default is untouched: a later spawn is forked as before
        started.append(this_host().spawn_procs())
        plain = started[-1].spawn("plain", Launched)
        assert plain.env.call_one("CUDA_VISIBLE_DEVICES").get(timeout=30) != "0"
        assert "--proc" not in plain.argv.call_one().get(timeout=30)
    finally:
        del os.environ["MONARCH_TEST_INHERITED"], os.environ["MONARCH_TEST_REMOVED"]
        for mesh in started:
            mesh.stop().get(timeout=30)


def test_a_bootstrap_command_that_fails_fails_the_mesh(failures):
    broken = BootstrapCommand("/nonexistent/python", None, ["-m", "x"])
    procs = this_host().spawn_procs(bootstrap_command=broken)
    with pytest.raises(RuntimeError, match="could not be executed"):
        procs.initialized.get(timeout=60)
    assert failures  # a process that never started is a failure its owner hears of
    with pytest.raises(TypeError, match="BootstrapCommand"):
        this_host().spawn_procs(bootstrap_command=["python"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not a BootstrapCommand"):
        this_host().spawn_procs(bootstrap_command=lambda point: "python")  # type: ignore[arg-type,return-value]


def test_with_python_executable_launches_every_process_through_it(tmp_path):
    wrapper = tmp_path / "python_wrapper"
    wrapper.write_text(f'#!/bin/sh\nexport WRAPPER_PID=$$\nexec {sys.executable} "$@"\n')
    wrapper.chmod(stat.S_IRWXU)
    host = this_host()
    wrapped = host.with_python_executable(str(wrapper))
    assert wrapped is not host
    outer, direct = wrapped.spawn_procs(per_host={"procs": 1}), host.spawn_procs()
    try:
        launched = outer.spawn("launched", Launched)
        first = launched.env.call_one("WRAPPER_PID").get(timeout=60)
        assert first
        # a process spawned from one of them, through this_host(), is launched the same way
        # (stopped with it: its process's host agent ends when that process does)
        inner = launched.spawn_inner.call_one().get(timeout=60)
        second = inner.env.call_one("WRAPPER_PID").get(timeout=60)
        assert second and second != first
        plain = direct.spawn("plain", Launched)
        assert plain.env.call_one("WRAPPER_PID").get(timeout=30) is None
    finally:
        outer.stop().get(timeout=30)
        direct.stop().get(timeout=30)


def test_teardown_starts_when_looked_at_and_a_shut_down_mesh_refuses_use():
    # in a script of its own: shutdown() stops every mesh of the process
    script = run_script(
        """
        import asyncio, cloudpickle
        host = this_host()
        dropped = host.shutdown()
        del dropped  # never looked at: nothing is shut down
        procs = host.spawn_procs(per_host={"gpus": 2})
        print(len(procs.spawn("pids", Pid).pid.call().get(timeout=30)), flush=True)
        copy = cloudpickle.loads(cloudpickle.dumps(host))
        meshes = ((copy, "copy", ("stop", "shutdown")), (host.slice(), "same", ("stop",)))
        for mesh, what, verbs in meshes:
            for verb in verbs:
                try:
                    getattr(mesh, verb)().get(timeout=30)
                    print(what, verb, "ok", flush=True)
                except RuntimeError as e:
                    print(what, verb, e, flush=True)
        print(copy.spawn_procs().spawn("p", Pid).pid.call_one().get(timeout=30) > 0, flush=True)

        async def main():
            async with host as hm:
                await hm.spawn_procs().spawn("p", Pid).pid.call_one()
            for attempt in (lambda: hm.spawn_procs(), lambda: hm.initialized):
                try:
                    attempt()
                except RuntimeError as e:
                    print(e, flush=True)
            try:
                await hm.shutdown()
            except RuntimeError as e:
                print(e, flush=True)

        asyncio.run(main())
        """
    )
    out, err = script.communicate(timeout=120)
    assert script.returncode == 0, err
    lines = out.strip().splitlines()
    reference = "that is a reference instead of owned"
    assert lines[0] == "2"
    assert lines[1] == f"copy stop cannot stop `HostMesh` {reference}"
    assert lines[2] == f"copy shutdown cannot shut down `HostMesh` {reference}"
    assert lines[3] == "same stop ok"  # a slice of all of it is the mesh itself
    assert lines[4] == "True"
    assert lines[5:] == ["HostMesh has already been shut down"] * 3


def test_a_workers_host_mesh_pickles_and_launches_commands_there():
    job_secret()
    address = f"tcp://127.0.0.1:{free_port()}"
    env = {**os.environ, "MONARCH_TEST_HOST_ONLY": "host", "MONARCH_TEST_SHARED": "host"}
    os.environ["MONARCH_TEST_SHARED"] = "controller"
    worker = subprocess.Popen([sys.executable, "-c", WORKER, address], env=env)
    try:
        hosts = attach_to_workers(workers=[address], ca="trust_all_connections")
        dropped = hosts.shutdown()
        del dropped
        command = default_bootstrap_cmd().with_env({"MONARCH_TEST_SET": "command"})
        probe = hosts.spawn_procs(bootstrap_command=command).spawn("probe", Launched)
        # the host's environment, not the controller's, under the command's variables
        assert probe.env.call_one("MONARCH_TEST_SHARED").get(timeout=60) == "host"
        assert probe.env.call_one("MONARCH_TEST_HOST_ONLY").get(timeout=30) == "host"
        assert probe.env.call_one("MONARCH_TEST_SET").get(timeout=30) == "command"
        copy = cloudpickle.loads(cloudpickle.dumps(hosts))
        again = copy.spawn_procs().spawn("again", Victim)
        assert again.pid.call_one().get(timeout=60) > 0
        with pytest.raises(RuntimeError, match="reference instead of owned"):
            copy.shutdown().get(timeout=30)
        with pytest.raises(RuntimeError, match="reference instead of owned"):
            hosts.slice(hosts=0).stop().get(timeout=30)
        assert hosts.shutdown().get(timeout=60) is None
        assert worker.wait(30) == 0
        with pytest.raises(RuntimeError, match="already been shut down"):
            hosts.shutdown().get(timeout=30)
        with pytest.raises(RuntimeError, match="already been shut down"):
            cloudpickle.dumps(hosts)
    finally:
        del os.environ["MONARCH_TEST_SHARED"]
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)


def test_nested_async_with_shuts_down_once():
    script = run_script(
        """
        import asyncio

        async def main():
            host = this_host()
            async with host:
                async with host:
                    await host.spawn_procs().spawn("p", Pid).pid.call_one()
            print("done", flush=True)

        asyncio.run(main())
        """
    )
    out, err = script.communicate(timeout=120)
    assert script.returncode == 0, err
    assert out.strip() == "done"
