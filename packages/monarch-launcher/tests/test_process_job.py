"""ProcessJob and hosts_from_config with real worker processes on this
machine: attach, spawn procs on the workers, call actors, cache the job for
a later script, kill it. Every wait is on a process or a future, never a sleep."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from launcher_actors import Probe, parent_of

from monarch_actor.testing import gone
from monarch_launcher import (
    DEFAULT_JOB_PATH,
    JobError,
    ProcessJob,
    WorkerAddressError,
    exec_command,
    hosts_from_config,
    job_file,
    job_load,
    job_loads,
)
from monarch_launcher._procutil import LocalProcess

HERE = os.path.dirname(os.path.abspath(__file__))


def extent(mesh):
    return dict(mesh.extent.items())


def script(tmp_path, body):
    """Run ``body`` as a script of its own (a separate controller) in tmp_path."""
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(body))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_host_is_a_worker_process_and_kill_ends_them_all(in_tmp):
    job = ProcessJob({"trainers": 2, "dataloaders": 1}, env={"FROM_THE_JOB": "yes"})
    state = job.state(cached_path=None)
    assert extent(state.trainers) == {"hosts": 2}
    assert extent(state.dataloaders) == {"hosts": 1}
    assert state.trainers.initialized.get(timeout=60) is True
    procs = state.trainers.spawn_procs(per_host={"gpus": 2})
    assert extent(procs) == {"hosts": 2, "gpus": 2}
    probes = procs.spawn("probe", Probe)
    pids = probes.pid.call().get(timeout=60)
    workers = job.workers
    for point, pid in pids.items():  # each host's procs were forked by its worker
        assert parent_of(parent_of(pid)) == workers[f"trainers_{point['hosts']}"].pid
    assert set(probes.env.call("FROM_THE_JOB").get(timeout=30).values()) == {"yes"}
    everything = [*workers.values(), *(LocalProcess.of(p) for _, p in pids.items())]
    job.kill()
    assert all(p.wait_exit(30) for p in everything)
    assert not job.active and job.workers == {}


def test_kill_from_elsewhere_ends_workers_and_their_procs(in_tmp, failures):
    job = ProcessJob({"hosts": 1})
    job.apply()
    hosts = job._state().hosts  # attached here, but the kill comes from a copy of the job
    pid = hosts.spawn_procs().spawn("probe", Probe).pid.call_one().get(timeout=60)
    procs = [*job.workers.values(), LocalProcess.of(pid)]
    job_loads(job.dumps()).kill()  # as `monarch job kill` does, from another process
    assert all(p.wait_exit(30) for p in procs)
    assert failures.wait(30)  # the controller heard that the host was lost
    assert "was lost" in failures[0].report()


def test_a_later_script_reuses_the_cached_job(in_tmp):
    body = """
        from monarch_launcher import ProcessJob
        from launcher_actors import Probe
        job = ProcessJob({"trainers": 2})
        state = job.state()
        state.trainers.spawn_procs().spawn("p", Probe).pid.call().get(timeout=60)
        print(job.apply_id)
    """
    first = script(in_tmp, body)
    cached = job_load()
    workers = list(cached.workers.values())
    assert all(w.alive() for w in workers)  # they outlive the script that started them
    assert script(in_tmp, body) == first  # the same allocation...
    assert job_load().workers == cached.workers  # ...served by the same processes
    cached.kill()
    assert all(w.wait_exit(30) for w in workers)


def test_a_cached_job_for_another_spec_is_ended(in_tmp):
    old = ProcessJob({"trainers": 1})
    old.apply()
    old.dump(".monarch/job_state.pkl")
    workers = list(old.workers.values())
    new = ProcessJob({"trainers": 2})
    assert extent(new.state().trainers) == {"hosts": 2}
    assert all(w.wait_exit(30) for w in workers)
    assert job_load().apply_id == new.apply_id
    new.kill()


def test_a_job_whose_workers_died_says_so(in_tmp):
    job = ProcessJob({"trainers": 1}, transport="tcp")
    job.apply()
    (worker,) = job.workers.values()
    assert worker.address.startswith("tcp://127.0.0.1:")
    os.kill(worker.pid, signal.SIGKILL)
    assert worker.wait_exit(30)
    assert not job.can_run(ProcessJob({"trainers": 1}, transport="tcp"))
    with pytest.raises(JobError, match=r"(?s)worker processes are gone.*trainers_0.*kill"):
        job._state()
    job.kill()


def test_a_job_needs_sensible_meshes():
    with pytest.raises(ValueError, match="dict of mesh name"):
        ProcessJob({})
    with pytest.raises(ValueError, match="positive number of hosts"):
        ProcessJob({"trainers": 0})
    with pytest.raises(ValueError, match="Python identifier"):
        ProcessJob({"my trainers": 1})
    with pytest.raises(ValueError, match="'ipc' or 'tcp'"):
        ProcessJob({"t": 1}, transport="udp")


def test_a_cached_job_with_another_secret_is_refused_clearly(in_tmp):
    job = ProcessJob({"trainers": 1})
    job.apply()
    job.dump("job.pkl")
    try:
        out = script(
            in_tmp,
            """
            import os
            os.environ["MONARCH_JOB_SECRET"] = "ab" * 32
            from monarch_launcher import job_load, JobError
            try:
                job_load("job.pkl").state()
            except JobError as error:
                print(error)
        """,
        )
        assert "another job secret" in out and "monarch job kill" in out
    finally:
        job.kill()


def test_the_monarch_command_applies_reports_and_kills_a_job(in_tmp):
    (in_tmp / "specs.py").write_text(
        "from monarch_launcher import ProcessJob\ntrainers = ProcessJob({'trainers': 2})\n"
    )

    def monarch(*args):
        return subprocess.run(
            [sys.executable, "-m", "monarch_launcher", *args],
            cwd=in_tmp,
            capture_output=True,
            text=True,
            timeout=120,
        )

    done = monarch("job", "apply", "specs.trainers")
    assert done.returncode == 0, done.stderr
    assert "applied ProcessJob({'trainers': 2})" in done.stdout
    job = job_load()
    workers = list(job.workers.values())
    assert len(workers) == 2 and all(w.alive() for w in workers)
    again = monarch("job", "apply", "specs.trainers")
    assert "runs already" in again.stdout and job_load().workers == job.workers
    status = monarch("job", "status")
    assert status.returncode == 0 and "running" in status.stdout and "trainers_1" in status.stdout
    # a script attaches to the job the command applied
    out = script(
        in_tmp,
        """
        from monarch_launcher import ProcessJob
        from launcher_actors import Probe
        state = ProcessJob({'trainers': 2}).state()
        print(len(state.trainers.spawn_procs().spawn("p", Probe).pid.call().get(timeout=60)))
    """,
    )
    assert out.strip() == "2"
    assert job_load().workers == job.workers
    done = monarch("kill")
    assert done.returncode == 0 and "killed" in done.stdout
    assert all(w.wait_exit(30) for w in workers)
    assert not os.path.exists(job_file(DEFAULT_JOB_PATH))
    assert monarch("job", "status").returncode == 1


def test_status_reports_a_job_whose_workers_are_gone(in_tmp):
    job = ProcessJob({"trainers": 1})
    job.apply()
    job.dump(".monarch/job_state.pkl")
    (worker,) = job.workers.values()
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait_exit(30)
    done = subprocess.run(
        [sys.executable, "-m", "monarch_launcher", "job", "status"],
        capture_output=True,
        text=True,
        cwd=in_tmp,
        timeout=60,
    )
    assert done.returncode == 3 and "gone" in done.stdout
    job.kill()


def test_hosts_from_config_starts_two_local_workers_that_end_with_the_script(in_tmp):
    out = script(
        in_tmp,
        """
        import json, os
        os.environ.pop("MONARCH_HOSTS", None)
        from monarch_launcher import hosts_from_config
        from launcher_actors import Probe, parent_of
        hosts = hosts_from_config("MONARCH_HOSTS")
        procs = hosts.spawn_procs(per_host={"gpus": 2})
        pids = procs.spawn("p", Probe).pid.call().get(timeout=60)
        servers = sorted({parent_of(pid) for _, pid in pids.items()})
        workers = sorted({parent_of(server) for server in servers})
        def cmdline(pid):
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return f.read().decode()
        forked = [cmdline(server) == cmdline(parent_of(server)) for server in servers]
        print(json.dumps({"extent": dict(procs.extent.items()), "workers": workers,
                          "forked": forked}))
    """,
    )
    seen = json.loads(out)
    assert seen["extent"] == {"hosts": 2, "gpus": 2}
    assert len(seen["workers"]) == 2
    # a worker that watches its script's end runs one thread: its fork server is itself, forked
    assert seen["forked"] == [True, True]
    for pid in seen["workers"]:  # the script ended: so did its workers
        assert LocalProcess(pid, None).wait_exit(30)


def test_local_workers_end_when_their_script_is_killed(in_tmp):
    """Killed, the script runs no exit handler: its workers see their lifeline
    (a pipe it held) close, and end with their fork servers and procs."""
    path = in_tmp / "killed.py"
    path.write_text(
        textwrap.dedent(
            """
            import os, signal
            os.environ.pop("MONARCH_HOSTS", None)
            from monarch_launcher import hosts_from_config
            from launcher_actors import Probe, parent_of
            hosts = hosts_from_config("MONARCH_HOSTS")
            pids = [p for _, p in hosts.spawn_procs().spawn("p", Probe).pid.call().get(60).items()]
            servers = [parent_of(pid) for pid in pids]
            print(*pids, *servers, *(parent_of(server) for server in servers), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")])}
    script = subprocess.Popen(
        [sys.executable, str(path)], cwd=in_tmp, env=env, stdout=subprocess.PIPE, text=True
    )
    with script:
        # the line only: the workers hold the output open until they end
        everyone = [int(pid) for pid in script.stdout.readline().split()]
        assert script.wait(60) == -signal.SIGKILL
    assert len(everyone) == 6  # two procs, two fork servers, two workers
    assert gone(everyone, timeout=30) == []


def test_hosts_from_config_attaches_to_the_listed_workers(in_tmp, monkeypatch):
    job = ProcessJob({"w": 2}, transport="tcp")  # two workers to list
    job.apply()
    try:
        addresses = [w.address for w in job.workers.values()]
        from monarch_launcher._secret import adopt_secret

        adopt_secret(job._secret, "the test's workers")
        monkeypatch.setenv("MY_HOSTS", f" {addresses[0]},\n{addresses[1]} ")
        hosts = hosts_from_config("MY_HOSTS")
        assert extent(hosts) == {"hosts": 2}
        pids = hosts.spawn_procs().spawn("p", Probe).pid.call().get(timeout=60)
        assert {parent_of(parent_of(p)) for _, p in pids.items()} == {
            w.pid for w in job.workers.values()
        }
        (in_tmp / "hosts.txt").write_text(f"# the workers\n{addresses[1]}\n")
        monkeypatch.setenv("MY_HOSTS", str(in_tmp / "hosts.txt"))
        one = hosts_from_config("MY_HOSTS")
        assert extent(one) == {"hosts": 1}
        assert one.spawn_procs().spawn("p", Probe).pid.call_one().get(timeout=60) > 0
        hosts.stop().get(timeout=30)  # these meshes are not the job's: stop their procs
        one.stop().get(timeout=30)
    finally:
        job.kill()


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("node1:22", "neither worker addresses nor an existing file"),
        ("http://node1:22", "not a worker address"),
        (" ", None),
    ],
)
def test_hosts_from_config_refuses_what_is_not_a_worker_list(monkeypatch, value, says):
    monkeypatch.setenv("BAD_HOSTS", value)
    if says is None:
        return  # blank means unset: covered by the local-workers test
    with pytest.raises(WorkerAddressError, match=says):
        hosts_from_config("BAD_HOSTS")


def test_exec_command_runs_on_every_host_and_returns_the_worst_status(in_tmp):
    job = ProcessJob({"hosts": 2})
    state = job.state(cached_path=None)
    try:
        code = exec_command(state.hosts, ["sh", "-c", "exit $MONARCH_RANK_HOSTS"])
        assert code.get(timeout=60) == 1
        one = exec_command(state.hosts, ["sh", "-c", "exit $MONARCH_RANK_HOSTS"], rank=0)
        assert one.get(timeout=60) == 0
        out = in_tmp / "out" / "$SUBDIR"
        done = exec_command(
            state.hosts,
            ["sh", "-c", "echo $GREETING $MONARCH_SIZE_HOSTS"],
            env={"GREETING": "hi"},
            output_dir=str(out),
        )
        assert done.get(timeout=60) == 0
        for i in range(2):
            assert (in_tmp / "out" / f"hosts_{i}" / "stdout.txt").read_text() == "hi 2\n"
    finally:
        job.kill()
