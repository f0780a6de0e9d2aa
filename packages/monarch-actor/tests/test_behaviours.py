"""Behaviours users hit: quiet exits, only the user's own error, refused
spawns after a failed ``__init__``, errors that say where a process died,
and actor classes from modules that only the controller's ``sys.path``
reaches."""

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

import monarch_actor
from monarch_actor import Actor, SupervisionError, current_rank, endpoint, this_host

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")


def run_python(code: str, cwd: str | None = None, *args: str) -> subprocess.CompletedProcess[str]:
    """A fresh script, as a user runs one (no pytest, no PYTHONPATH of ours)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, *(["-c", code] if code else []), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


def test_a_script_with_async_actors_ends_quietly():
    done = run_python(
        textwrap.dedent(
            """
            from monarch_actor import Actor, endpoint, this_host, this_proc

            class Echo(Actor):
                @endpoint
                async def echo(self, x: int) -> int:
                    return x

            procs = this_host().spawn_procs(per_host={"gpus": 2})
            print(sum(procs.spawn("remote", Echo).echo.call(1).get().values()))
            print(this_proc().spawn("local", Echo).echo.call_one(2).get())
            """
        )
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "2"]
    assert done.stderr == ""


def test_a_refused_spawn_shows_only_the_users_error():
    done = run_python(
        textwrap.dedent(
            """
            from monarch_actor import Actor, endpoint, this_host

            class Clash(Actor):
                @endpoint
                def stop(self) -> None:  # collides with ActorMesh.stop
                    pass

            starting = this_host().spawn_procs(per_host={"gpus": 2})
            also_starting = this_host().spawn_procs(per_host={"gpus": 2})
            starting.spawn("clash", Clash)
            """
        )
    )
    assert done.returncode == 1
    assert "collides with an endpoint name: 'stop'" in done.stderr
    for noise in ("Unhandled monarch error", "SIGTERM", "KeyboardInterrupt", "exited with"):
        assert noise not in done.stderr, done.stderr


class BadOnRankZero(Actor):
    def __init__(self) -> None:
        if current_rank()["gpus"] == 0:
            raise ValueError("rank 0 cannot start")


class Fine(Actor):
    @endpoint
    def ping(self) -> str:
        return "pong"


def test_a_process_whose_actor_failed_to_start_refuses_new_spawns(failures):
    procs = this_host().spawn_procs(per_host={"gpus": 3})
    try:
        bad = procs.spawn("bad", BadOnRankZero)
        with pytest.raises(monarch_actor.ActorError, match="rank 0 cannot start"):
            bad.initialized.get(timeout=30)
        refused = procs.spawn("fine", Fine)  # as in Monarch: the handle's first use raises
        expected = (
            r"error spawning actor mesh: statuses: Failed\(Cannot spawn new actors on mesh "
            r"with supervision events\)=0\.\.1;Running=1\.\.3"
        )
        with pytest.raises(RuntimeError, match=expected):
            refused.ping.call().get(timeout=30)
        with pytest.raises(RuntimeError, match=expected):
            refused.initialized.get(timeout=30)
        with pytest.raises(RuntimeError, match=expected):
            refused.ping.broadcast()
        healthy = procs.slice(gpus=slice(1, 3)).spawn("fine", Fine)
        assert healthy.ping.call().get(timeout=30).values() == ["pong", "pong"]
    finally:
        procs.stop().get(timeout=30)
    assert len(failures) == 1 and "rank 0 cannot start" in failures[0].report()


class Exits(Actor):
    @endpoint
    def exit(self, code: int) -> None:
        os._exit(code)

    @endpoint
    def pid(self) -> int:
        return os.getpid()


def test_the_error_of_a_dead_process_names_the_mesh_rank_host_and_pid(failures):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        mesh = procs.spawn("exits", Exits)
        pid = mesh.slice(gpus=1).pid.call_one().get(timeout=30)
        with pytest.raises(SupervisionError) as caught:
            mesh.slice(gpus=1).exit.call_one(3).get(timeout=30)
        text = str(caught.value)
        assert text.startswith("Endpoint call exits.exit() failed, The actor <root>.<")
        assert "Exits exits{'gpus': 1/2}> and all its descendants have failed:\n" in text
        assert "exited with non-zero code 3" in text
        assert f"pid {pid}" in text
        assert f"host {os.uname().nodename}" in text
    finally:
        procs.stop().get(timeout=30)
    assert failures


def test_a_bootstrap_that_raises_says_why(failures):
    done = run_python(
        textwrap.dedent(
            """
            from monarch_actor import this_host
            import monarch_actor
            monarch_actor.unhandled_fault_hook = lambda failure: None

            def setup():
                raise OSError("the GPU driver is missing")

            procs = this_host().spawn_procs(per_host={"gpus": 1}, bootstrap=setup)
            try:
                procs.initialized.get(timeout=60)
            except monarch_actor.ActorError as error:
                print("ERROR:", error)
            """
        )
    )
    assert done.returncode == 0, done.stderr
    assert "ERROR: Actor call setup.setup failed." in done.stdout
    assert "OSError: the GPU driver is missing" in done.stdout  # its traceback, in the error
    assert "in setup" in done.stdout


def test_actor_classes_from_a_module_no_sys_path_entry_reaches(tmp_path):
    (tmp_path / "far_away.py").write_text(
        textwrap.dedent(
            """
            import os
            from monarch_actor import Actor, endpoint

            class FarAway(Actor):
                @endpoint
                def where(self) -> str:
                    return f"far away in {os.getpid()}"
            """
        )
    )
    spec = importlib.util.spec_from_file_location("far_away_module", tmp_path / "far_away.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["far_away_module"] = module
    spec.loader.exec_module(module)
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        answer = procs.spawn("far", module.FarAway).where.call_one().get(timeout=30)
        assert answer.startswith("far away in ") and answer != f"far away in {os.getpid()}"
    finally:
        procs.stop().get(timeout=30)
        del sys.modules["far_away_module"]


def test_a_scripts_sibling_module_is_importable_in_procs(tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "workers.py").write_text(
        textwrap.dedent(
            """
            from monarch_actor import Actor, endpoint

            class Worker(Actor):
                @endpoint
                def double(self, x: int) -> int:
                    return 2 * x
            """
        )
    )
    (folder / "train.py").write_text(
        textwrap.dedent(
            """
            from monarch_actor import this_host
            from workers import Worker

            procs = this_host().spawn_procs(per_host={"gpus": 2})
            print(procs.spawn("w", Worker).double.call(21).get().values())
            """
        )
    )
    done = run_python("", str(tmp_path), str(folder / "train.py"))  # run from elsewhere
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[42, 42]"
