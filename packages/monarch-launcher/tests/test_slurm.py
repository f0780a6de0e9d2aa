"""SlurmJob: the batch script it writes (plain unit tests), and its whole
life against a real Slurm where one answers (``tools/slurm-cluster start``
makes one on this machine, as CI does: nodes n0 and n1, both at 127.0.0.1,
so their workers take consecutive ports)."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
from launcher_actors import Probe, parent_of
from slurm_cluster import NO_REAL_SLURM, cluster_nodes, free_port

from monarch_launcher import JobError, SlurmJob, Unsupported, job_load
from monarch_launcher._procutil import LocalProcess
from monarch_launcher._slurm import slurm_worker_addresses

HERE = os.path.dirname(os.path.abspath(__file__))


# -- the batch script ---------------------------------------------------------------------


def directives(script: str) -> list[str]:
    return [
        line.removeprefix("#SBATCH ") for line in script.splitlines() if line.startswith("#SBATCH")
    ]


def test_one_allocation_for_all_meshes_with_one_worker_per_node(tmp_path):
    job = SlurmJob({"trainers": 3, "dataloaders": 1}, log_dir=str(tmp_path), job_name="train")
    script = job.batch_script(unique_name="train_7")
    assert script.startswith("#!/bin/bash\n")
    assert directives(script) == [
        "--job-name=train_7",
        "--nodes=4",
        "--ntasks-per-node=1",
        f"--output={tmp_path}/slurm_%j_train_7.out",
        f"--error={tmp_path}/slurm_%j_train_7.err",
        "--exclusive",
    ]
    (srun,) = [line for line in script.splitlines() if line.startswith("srun ")]
    assert "--nodes=4 --ntasks=4 --ntasks-per-node=1" in srun
    assert srun.endswith("python -m monarch_launcher worker --slurm-port 22222")
    assert job.num_nodes == 4


def test_each_node_serves_at_its_address_and_nodes_sharing_one_take_the_next_ports():
    nodes = ["a", "b", "c", "d"]
    addrs = {"a": "10.0.0.1", "b": "10.0.0.2", "c": "10.0.0.1", "d": "fe80::1"}
    assert slurm_worker_addresses(nodes, addrs, 22222) == [
        "tcp://10.0.0.1:22222",
        "tcp://10.0.0.2:22222",
        "tcp://10.0.0.1:22223",
        "tcp://[fe80::1]:22222",
    ]
    assert slurm_worker_addresses(["x"], {}, 1) == ["tcp://x:1"]  # unknown: by name


def test_every_option_becomes_a_directive(tmp_path):
    job = SlurmJob(
        {"hosts": 2},
        python_exe="/opt/venv/bin/python",
        slurm_args=["--constraint=h100", "--mail-type=END", "ignored-not-an-option"],
        monarch_port=26600,
        ntasks_per_node=8,
        time_limit="01:30:00",
        partition="gpu",
        log_dir=str(tmp_path),
        exclusive=False,
        gpus_per_node=8,
        cpus_per_task=12,
        mem="512G",
        account="research",
        qos="high",
        bind_to="0.0.0.0",
    )
    script = job.batch_script(unique_name="j")
    assert set(directives(script)) >= {
        "--nodes=2",
        "--ntasks-per-node=8",
        "--time=01:30:00",
        "--gpus-per-node=8",
        "--cpus-per-task=12",
        "--mem=512G",
        "--partition=gpu",
        "--account=research",
        "--qos=high",
        "--constraint=h100",
        "--mail-type=END",
    }
    assert "--exclusive" not in directives(script)
    assert "ignored-not-an-option" not in script
    (srun,) = [line for line in script.splitlines() if line.startswith("srun ")]
    assert "--gpus-per-node=8" in srun and "/opt/venv/bin/python -m monarch_launcher" in srun
    assert srun.endswith("--slurm-port 26600 --slurm-bind 0.0.0.0")


def test_a_client_script_runs_beside_the_workers_in_the_allocation(tmp_path):
    script = SlurmJob({"hosts": 2}, log_dir=str(tmp_path)).batch_script("train.py --lr 3")
    lines = script.splitlines()
    (srun,) = [line for line in lines if line.startswith("srun ")]
    assert srun.endswith(" &")  # the workers run in the background...
    assert "MONARCH_BATCH_JOB=1 python train.py --lr 3" in lines  # ...while the client runs
    assert any(line.startswith("trap ") for line in lines)  # and end when it does
    other = SlurmJob({"hosts": 1}).batch_script("./run.sh x")
    assert "MONARCH_BATCH_JOB=1 ./run.sh x" in other


def test_the_script_is_valid_bash(tmp_path):
    script = SlurmJob({"a": 1, "b": 2}, bind_to="0.0.0.0").batch_script("c.py")
    path = tmp_path / "job.sh"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0


@pytest.mark.parametrize(
    ("kwargs", "error", "says"),
    [
        ({"meshes": {}}, ValueError, "dict of mesh name"),
        ({"meshes": {"a": -1}}, ValueError, "positive number"),
        ({"meshes": {"a": 1}, "monarch_port": 0}, ValueError, "TCP port"),
        ({"meshes": {"a": 1}, "slurm_args": "--x"}, TypeError, "list of options"),
        ({"meshes": {"a": 1}, "slurm_args": ["--export=NONE"]}, ValueError, "MONARCH_JOB_SECRET"),
        ({"meshes": {"a": 1}, "out_of_cluster": True}, Unsupported, "reaches the nodes"),
        ({"meshes": {"a": 1}, "attach_to": "tcp://x:1"}, Unsupported, "directly"),
    ],
)
def test_bad_specs_say_what_is_wrong(kwargs, error, says):
    with pytest.raises(error, match=says):
        SlurmJob(**kwargs)


def test_exports_that_keep_the_secret_are_fine():
    SlurmJob({"a": 1}, slurm_args=["--export=ALL,FOO=1"])
    SlurmJob({"a": 1}, slurm_args=["--export=MONARCH_JOB_SECRET,PATH"])


def test_add_mesh_and_specs_that_can_share_a_job():
    job = SlurmJob({"a": 1})
    job.add_mesh("b", 2)
    assert job.num_nodes == 3
    with pytest.raises(Unsupported, match="exclusive=False"):
        job.share_node(1, 1, "p")
    assert not job.can_run(SlurmJob({"a": 1, "b": 2}))  # not applied: nothing to reuse


def test_without_slurm_apply_says_where_to_run(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JobError, match=r"'sbatch'.*not on PATH.*login node"):
        SlurmJob({"a": 1}, log_dir=str(tmp_path)).apply()


# -- against a real Slurm ------------------------------------------------------------------

needs_slurm = pytest.mark.skipif(NO_REAL_SLURM is not None, reason=str(NO_REAL_SLURM))


def queued_state(job_id: str) -> str | None:
    """The job's state as squeue reports it, or None once it has left the queue."""
    done = subprocess.run(
        ["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, timeout=30
    )
    return done.stdout.strip() or None


def wait_left_queue(job_id: str, timeout: float = 60) -> str | None:
    """Poll (bounded) until the job is neither pending nor running; its last state."""
    deadline = time.monotonic() + timeout
    state = queued_state(job_id)
    while (
        state in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING") and time.monotonic() < deadline
    ):
        time.sleep(0.2)  # squeue is the only way to learn a state change; bounded above
        state = queued_state(job_id)
    return state


GONE = (None, "CANCELLED", "COMPLETED", "FAILED")  # what squeue shows of a job that ended


@pytest.fixture
def slurm_dir(tmp_path, monkeypatch):
    """A folder to run in (the job cache goes to .monarch/ there); every job
    the test leaves queued is cancelled afterwards."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
    jobs: list[SlurmJob] = []
    yield tmp_path, jobs.append
    for job in jobs:
        if job.slurm_job_id is not None:
            subprocess.run(["scancel", job.slurm_job_id], capture_output=True, timeout=30)


def job_for(meshes, folder, **kwargs) -> SlurmJob:
    kwargs.setdefault("monarch_port", free_port(2))
    kwargs.setdefault("job_start_timeout", 300)
    kwargs.setdefault("python_exe", sys.executable)
    return SlurmJob(
        meshes,
        log_dir=str(folder),
        exclusive=False,
        time_limit="00:10:00",
        **kwargs,
    )


def two_meshes() -> dict[str, int]:
    return {"trainers": 1, "dataloaders": 1} if cluster_nodes() >= 2 else {"trainers": 1}


def processes(state, meshes) -> dict[str, list[LocalProcess]]:
    """Spawn a Probe on every host; each mesh's procs and the workers that forked them."""
    found = {}
    for name in meshes:
        pids = getattr(state, name).spawn_procs().spawn("p", Probe).pid.call().get(timeout=120)
        procs = [LocalProcess.of(pid) for _, pid in pids.items()]
        workers = [LocalProcess.of(parent_of(parent_of(p.pid))) for p in procs]
        for worker in workers:
            with open(f"/proc/{worker.pid}/cmdline") as f:
                assert "monarch_launcher\0worker\0--slurm-port" in f.read()
        found[name] = procs + workers
    return found


def monarch(folder, *args) -> subprocess.CompletedProcess:
    """The monarch command, run in ``folder`` (a process of its own)."""
    return subprocess.run(
        [sys.executable, "-m", "monarch_launcher", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )


@needs_slurm
def test_a_real_slurm_job_runs_actors_on_every_node_and_kill_ends_it(slurm_dir):
    folder, track = slurm_dir
    meshes = two_meshes()
    job = job_for(meshes, folder)
    track(job)
    state = job.state()
    seen = {}
    for name in meshes:
        probes = getattr(state, name).spawn_procs(per_host={"gpus": 2}).spawn("p", Probe)
        assert len(probes.pid.call().get(timeout=120)) == 2
        seen[name] = set(probes.env.call("SLURMD_NODENAME").get(timeout=60).values())
        secrets = set(probes.env.call("MONARCH_JOB_SECRET").get(timeout=60).values())
        assert secrets == {os.environ["MONARCH_JOB_SECRET"]}  # through sbatch's environment
    assert sorted(n for names in seen.values() for n in names) == sorted(job._hostnames)
    everything = processes(state, meshes)
    # a second SlurmJob of the same spec reattaches to the job through the cache
    again = job_for(meshes, folder, monarch_port=job._port)
    assert job_load().slurm_job_id == job.slurm_job_id
    assert again.can_run(job) is False  # a spec cannot run a job...
    assert job.can_run(again)  # ...the running job can run the spec
    other = again.state()
    reattached = processes(other, meshes)
    assert (again.slurm_job_id, again.apply_id) == (job.slurm_job_id, job.apply_id)
    for name, count in meshes.items():  # the same workers forked the new procs
        assert [w.pid for w in reattached[name][-count:]] == [
            w.pid for w in everything[name][-count:]
        ]
        getattr(other, name).stop().get(timeout=60)  # done with these procs
        assert all(p.wait_exit(30) for p in reattached[name][:-count])
    job_id = job.slurm_job_id
    job.kill()
    assert not job.active
    assert wait_left_queue(job_id) in GONE  # the allocation is released...
    for found in everything.values():
        assert all(p.wait_exit(30) for p in found)  # ...and its processes are gone
    assert not job_load().can_run(again)  # the cache knows the job ended


@needs_slurm
def test_a_second_controller_process_reattaches_and_monarch_kill_ends_the_job(slurm_dir, failures):
    folder, track = slurm_dir
    meshes = two_meshes()
    job = job_for(meshes, folder)
    track(job)
    mine = processes(job.state(), meshes)
    (folder / "second.py").write_text(
        "import json, sys\n"
        "from launcher_actors import Probe, parent_of\n"
        "from monarch_launcher import SlurmJob\n"
        f"job = SlurmJob({meshes!r}, python_exe=sys.executable, log_dir={str(folder)!r},\n"
        f"               exclusive=False, time_limit='00:10:00', monarch_port={job._port},\n"
        "               job_start_timeout=300)\n"
        "state = job.state()\n"
        "workers = {}\n"
        f"for name in {list(meshes)!r}:\n"
        "    pids = getattr(state, name).spawn_procs().spawn('p', Probe).pid.call().get(60)\n"
        "    workers[name] = sorted(parent_of(parent_of(p)) for _, p in pids.items())\n"
        "print(json.dumps([job.slurm_job_id, job.apply_id, workers]))\n"
    )
    done = subprocess.run(
        [sys.executable, "second.py"], cwd=folder, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    job_id, apply_id, workers = json.loads(done.stdout)
    assert (job_id, apply_id) == (job.slurm_job_id, job.apply_id)  # no second allocation
    for name, count in meshes.items():
        assert workers[name] == sorted(w.pid for w in mine[name][-count:])
    assert queued_state(job_id) == "RUNNING"  # the second controller's exit left it running
    status = monarch(folder, "job", "status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert f"Slurm job {job_id}: RUNNING on " in status.stdout
    done = monarch(folder, "kill")  # from yet another process: scancel
    assert done.returncode == 0 and "killed" in done.stdout, done.stderr
    assert wait_left_queue(job_id) in GONE
    for found in mine.values():
        assert all(p.wait_exit(30) for p in found)
    assert failures.wait(30)  # heard here too, with how it ended: scancel's SIGTERM reaches
    # the procs and their worker at once, so either a proc's own death or its host's comes first
    report = failures[0].report()
    assert "was lost" in report or "killed by SIGTERM" in report, report
    assert monarch(folder, "job", "status").returncode == 1  # the cache is gone


@needs_slurm
def test_a_worker_that_dies_is_reported_lost_within_10_seconds(slurm_dir, failures):
    folder, track = slurm_dir
    if cluster_nodes() < 2:
        pytest.skip("needs a Slurm cluster of 2 nodes")
    job = job_for({"trainers": 1, "dataloaders": 1}, folder)
    track(job)
    state = job.state(cached_path=None)
    victim = processes(state, {"dataloaders": 1})["dataloaders"]
    worker = victim[-1]
    os.kill(worker.pid, signal.SIGKILL)
    killed = time.monotonic()
    assert failures.wait(10), "the controller did not report the lost host within 10 s"
    assert time.monotonic() - killed < 10
    report = failures[0].report()
    assert "was lost" in report and f"127.0.0.1:{job._port + 1}" in report  # n1's worker
    assert all(p.wait_exit(30) for p in victim)
    # srun ends the other worker too (--kill-on-bad-exit): the allocation is not leaked
    assert wait_left_queue(job.slurm_job_id) in GONE
    assert not job.can_run(job)


@needs_slurm
def test_a_held_job_is_cancelled_when_it_cannot_start_in_time(slurm_dir):
    folder, track = slurm_dir
    job = job_for({"hosts": 1}, folder, job_start_timeout=2, slurm_args=["--hold"])
    track(job)
    job.apply()
    job_id = job.slurm_job_id
    with pytest.raises(JobError) as caught:
        job._state()
    message = str(caught.value)
    assert f"job {job_id} did not start within job_start_timeout=2" in message
    assert "PENDING" in message and "JobHeld" in message  # Slurm's own reason
    assert "cancelled" in message
    assert wait_left_queue(job_id) in (None, "CANCELLED")


@needs_slurm
def test_more_nodes_than_the_partition_has_fail_at_once(slurm_dir):
    folder, track = slurm_dir
    nodes = cluster_nodes()
    job = job_for({"hosts": nodes + 1}, folder, job_start_timeout=None)  # would wait forever
    track(job)
    job.apply()  # Slurm queues it (PartitionNodeLimit)
    job_id = job.slurm_job_id
    with pytest.raises(JobError) as caught:
        job._state()
    message = str(caught.value)
    assert f"job {job_id} asks for {nodes + 1} nodes, but partition 'debug' has {nodes}" in message
    assert "PartitionNodeLimit" in message or "PartitionConfig" in message  # Slurm's reason
    assert "was cancelled" in message
    assert wait_left_queue(job_id) in (None, "CANCELLED")


@needs_slurm
def test_a_partition_that_does_not_exist_is_refused(slurm_dir):
    folder, track = slurm_dir
    job = job_for({"hosts": 1}, folder, partition="no_such_partition")
    track(job)
    with pytest.raises(JobError) as caught:
        job.apply()
    message = str(caught.value)
    assert "sbatch refused the job (exit status 1)" in message
    assert "Invalid partition name specified" in message  # Slurm's own words
    assert job.slurm_job_id is None and not job.active


@needs_slurm
def test_a_job_whose_workers_cannot_start_says_why(slurm_dir):
    folder, track = slurm_dir
    job = job_for({"hosts": 1}, folder, python_exe="/no/such/python")
    track(job)
    job.apply()
    with pytest.raises(JobError) as caught:
        job._state()
    message = str(caught.value)
    assert f"Slurm job {job.slurm_job_id} ended (FAILED" in message  # as scontrol tells
    assert "before its workers answered" in message and "/no/such/python" in message
    assert not job.can_run(job)


@needs_slurm
def test_a_worker_that_fails_after_the_job_runs_ends_the_wait_at_once(slurm_dir):
    folder, track = slurm_dir
    if cluster_nodes() < 2:
        pytest.skip("needs a Slurm cluster of 2 nodes")
    job = job_for({"trainers": 1, "dataloaders": 1}, folder)
    track(job)
    with socket.socket() as taken:  # n1's worker cannot bind its port; nothing listens there
        taken.bind(("127.0.0.1", job._port + 1))
        started = time.monotonic()
        with pytest.raises(JobError) as caught:
            job.state(cached_path=None)
        waited = time.monotonic() - started
    message = str(caught.value)
    assert f"Slurm job {job.slurm_job_id} ended (FAILED" in message
    assert "before its workers answered" in message
    assert f"port {job._port + 1} is already taken" in message  # the worker's own words
    assert waited < 30  # not MONARCH_ATTACH_TIMEOUT (60 s)


@needs_slurm
def test_workers_the_controller_cannot_reach_are_an_error_and_the_job_is_cancelled(
    slurm_dir, monkeypatch
):
    folder, track = slurm_dir
    monkeypatch.setenv("MONARCH_ATTACH_TIMEOUT", "3")
    job = job_for({"hosts": 1}, folder, bind_to="127.0.0.2")  # serves where nobody dials
    track(job)
    with pytest.raises(JobError) as caught:
        job.state(cached_path=None)
    message = str(caught.value)
    job_id = re.search(r"Slurm job (\d+)", message).group(1)
    # the node's address is whatever the cluster calls it (127.0.0.1, or a host name)
    dialed = re.search(rf"for mesh 'hosts' \(at tcp://([^:\s]+):{job._port}\)", message)
    assert dialed is not None, message
    assert "could not be reached" in message and "MONARCH_ATTACH_TIMEOUT" in message
    assert "The job was cancelled" in message
    node = dialed.group(1)
    assert f"worker serving at tcp://{node}:{job._port}@tcp://127.0.0.2" in message  # its log
    assert wait_left_queue(job_id) in (None, "CANCELLED")


@needs_slurm
def test_a_batch_run_executes_the_client_inside_the_allocation(slurm_dir):
    folder, track = slurm_dir
    port = free_port(2)
    (folder / "client.py").write_text(
        "from monarch_launcher import SlurmJob\n"
        "from launcher_actors import Probe\n"
        "import os, sys\n"
        f"job = SlurmJob({{'hosts': 1}}, python_exe=sys.executable, monarch_port={port},\n"
        f"               log_dir={str(folder)!r}, exclusive=False, time_limit='00:10:00',\n"
        "               job_start_timeout=300)\n"
        "state = job.state()\n"
        "pids = state.hosts.spawn_procs(per_host={'gpus': 2}).spawn('p', Probe).pid.call()\n"
        "print('client saw', len(pids.get(timeout=60)), 'procs in job', job.slurm_job_id,\n"
        "      'as', os.environ['MONARCH_BATCH_JOB'], flush=True)\n"
        "state.hosts.shutdown().get(timeout=60)\n"
    )
    job = job_for({"hosts": 1}, folder, monarch_port=port)
    track(job)
    job.apply(client_script="client.py")
    assert wait_left_queue(job.slurm_job_id, timeout=180) in (None, "COMPLETED")
    (out,) = folder.glob(f"slurm_{job.slurm_job_id}_*.out")
    errors = "".join(p.read_text() for p in folder.glob("slurm_*.err"))
    said = f"client saw 2 procs in job {job.slurm_job_id} as 1"
    assert said in out.read_text(), out.read_text() + errors
