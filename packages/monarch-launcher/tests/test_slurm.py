"""SlurmJob: the batch script it writes (plain unit tests), and its whole
life against Slurm: a stand-in (fakeslurm.py: real bash, real worker
processes on loopback "nodes") always, a real Slurm where ``sbatch`` is on
PATH."""

import contextlib
import os
import random
import shutil
import socket
import stat
import subprocess
import sys

import pytest
from launcher_actors import Probe

from monarch_launcher import JobError, SlurmJob, Unsupported, job_load
from monarch_launcher._procutil import LocalProcess
from monarch_launcher._slurm import slurm_worker_addresses

HERE = os.path.dirname(os.path.abspath(__file__))


def real_slurm() -> str | None:
    """Why the real-Slurm test cannot run here, or None when a cluster answers."""
    if shutil.which("sbatch") is None:
        return "no Slurm here: sbatch is not on PATH"
    try:
        done = subprocess.run(["sinfo", "-h"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"Slurm's commands are installed but sinfo fails: {error}"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"Slurm's commands are installed but no cluster answers ({last})"
    return None


NO_REAL_SLURM = real_slurm()


def free_port(count: int = 1) -> int:
    """The first of ``count`` consecutive free ports, below Linux's ephemeral
    range (32768 up): a port the kernel hands out could be taken by an
    outgoing connection before a worker binds it, as SlurmJob's default
    (22222) could not."""
    rng = random.Random()
    for _ in range(1000):
        first = rng.randrange(20000, 32000 - count)
        with contextlib.ExitStack() as held:
            try:
                for port in range(first, first + count):
                    s = held.enter_context(socket.socket())
                    s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return first
    raise RuntimeError("no free ports between 20000 and 32000")


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


# -- against the stand-in ------------------------------------------------------------------


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """fakeslurm.py's commands first on PATH, with two loopback nodes."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for command in ("sbatch", "squeue", "scontrol", "scancel", "srun"):
        path = bin_dir / command
        path.write_text(
            f'#!/bin/sh\nexec "{sys.executable}" "{HERE}/fakeslurm.py" {command} "$@"\n'
        )
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM_DIR", str(tmp_path / "slurm"))
    monkeypatch.setenv("FAKE_SLURM_NODES", "n0,n1")
    monkeypatch.setenv("FAKE_SLURM_ADDRS", "127.0.0.1,127.0.0.2")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def batch_process(tmp_path, job_id):
    import json

    data = json.loads((tmp_path / "slurm" / f"{job_id}.json").read_text())
    return LocalProcess(data["pid"], None)


def test_a_job_waits_for_its_allocation_attaches_to_every_node_and_is_cancelled(
    fake_slurm, monkeypatch
):
    monkeypatch.setenv("FAKE_SLURM_PENDING", "2")
    job = SlurmJob(
        {"trainers": 1, "dataloaders": 1},
        python_exe=sys.executable,
        monarch_port=free_port(),
        log_dir=str(fake_slurm / "logs"),
    )
    state = job.state()
    assert job.slurm_job_id is not None
    assert dict(state.trainers.extent.items()) == {"hosts": 1}
    assert job._hostnames == ["n0", "n1"]  # the allocation's nodes, in order
    probes = state.dataloaders.spawn_procs(per_host={"gpus": 2}).spawn("p", Probe)
    assert len(probes.pid.call().get(timeout=60)) == 2
    # the second mesh got the second node
    assert set(probes.env.call("SLURMD_NODENAME").get(timeout=30).values()) == {"n1"}
    secrets = probes.env.call("MONARCH_JOB_SECRET").get(timeout=30)
    assert set(secrets.values()) == {os.environ["MONARCH_JOB_SECRET"]}  # through sbatch's env
    assert job_load().slurm_job_id == job.slurm_job_id  # cached for the next run
    assert (
        SlurmJob(
            {"trainers": 1, "dataloaders": 1},
            python_exe=sys.executable,
            monarch_port=job._port,
            log_dir=str(fake_slurm / "logs"),
        ).can_run(job)
        is False
    )  # a spec cannot run a job; the running job can run the spec
    assert job.can_run(
        SlurmJob(
            {"trainers": 1, "dataloaders": 1},
            python_exe=sys.executable,
            monarch_port=job._port,
            log_dir=str(fake_slurm / "logs"),
        )
    )
    batch = batch_process(fake_slurm, job.slurm_job_id)
    job.kill()
    assert batch.wait_exit(30)
    assert not job.active


def test_nodes_sharing_a_machine_serve_on_consecutive_ports(fake_slurm, monkeypatch):
    monkeypatch.setenv("FAKE_SLURM_ADDRS", "127.0.0.1,127.0.0.1")  # like tools/slurm-cluster
    port = free_port(2)
    job = SlurmJob(
        {"hosts": 2}, python_exe=sys.executable, monarch_port=port, log_dir=str(fake_slurm)
    )
    hosts = job.state(cached_path=None).hosts
    assert job.worker_addresses(job._hostnames) == [
        f"tcp://127.0.0.1:{port}",
        f"tcp://127.0.0.1:{port + 1}",
    ]
    nodes = hosts.spawn_procs().spawn("p", Probe).env.call("SLURMD_NODENAME").get(timeout=60)
    assert {point["hosts"]: node for point, node in nodes.items()} == {0: "n0", 1: "n1"}
    job.kill()


def test_a_worker_outside_a_slurm_step_says_so():
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    done = subprocess.run(
        [sys.executable, "-m", "monarch_launcher", "worker", "--slurm-port", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 1 and "only in a Slurm job step" in done.stderr


def test_a_job_that_cannot_start_in_time_is_cancelled(fake_slurm, monkeypatch):
    monkeypatch.setenv("FAKE_SLURM_PENDING", "100000")
    job = SlurmJob(
        {"hosts": 1},
        python_exe=sys.executable,
        monarch_port=free_port(),
        job_start_timeout=1,
        log_dir=str(fake_slurm),
    )
    job.apply()
    job_id = job.slurm_job_id
    with pytest.raises(JobError, match=f"job {job_id} did not start within job_start_timeout=1"):
        job._state()
    assert batch_process(fake_slurm, job_id).wait_exit(30)  # cancelled


def test_a_job_that_failed_says_so_with_its_error_output(fake_slurm, monkeypatch):
    monkeypatch.setenv("FAKE_SLURM_STATE", "FAILED")
    job = SlurmJob(
        {"hosts": 1},
        python_exe="/no/such/python",
        monarch_port=free_port(),
        log_dir=str(fake_slurm),
    )
    job.apply()
    assert batch_process(fake_slurm, job.slurm_job_id).wait_exit(30)
    with pytest.raises(JobError, match=r"(?s)ended \(FAILED\).*/no/such/python"):
        job._state()
    assert not job.can_run(job)


def test_sbatch_refusing_the_job_is_reported(fake_slurm):
    job = SlurmJob({"hosts": 3}, python_exe=sys.executable, log_dir=str(fake_slurm))
    with pytest.raises(JobError, match=r"sbatch refused the job.*Requested node configuration"):
        job.apply()
    assert not job.active


def test_a_batch_run_executes_the_client_inside_the_allocation(fake_slurm):
    (fake_slurm / "client.py").write_text(
        "from monarch_launcher import SlurmJob\n"
        "from launcher_actors import Probe\n"
        "import sys\n"
        f"job = SlurmJob({{'hosts': 2}}, python_exe=sys.executable, monarch_port=PORT,\n"
        f"               log_dir={str(fake_slurm)!r})\n"
        "state = job.state()\n"
        "pids = state.hosts.spawn_procs().spawn('p', Probe).pid.call().get(timeout=60)\n"
        "print('client saw', len(pids), 'procs')\n"
        "state.hosts.shutdown().get(timeout=60)\n"
    )
    port = free_port()
    client = (fake_slurm / "client.py").read_text().replace("PORT", str(port))
    (fake_slurm / "client.py").write_text(client)
    job = SlurmJob(
        {"hosts": 2}, python_exe=sys.executable, monarch_port=port, log_dir=str(fake_slurm)
    )
    job.apply(client_script="client.py")
    assert batch_process(fake_slurm, job.slurm_job_id).wait_exit(120)
    (out,) = fake_slurm.glob(f"slurm_{job.slurm_job_id}_*.out")
    assert "client saw 2 procs" in out.read_text(), out.read_text() + "".join(
        p.read_text() for p in fake_slurm.glob("slurm_*.err")
    )


# -- against a real Slurm ------------------------------------------------------------------


@pytest.mark.skipif(NO_REAL_SLURM is not None, reason=str(NO_REAL_SLURM))
def test_a_real_slurm_job_runs_actors_on_every_node(tmp_path, monkeypatch):
    """Against a real Slurm (tools/slurm-cluster start gives one on this machine:
    nodes n0 and n1, both at 127.0.0.1, so their workers take consecutive ports)."""
    monkeypatch.chdir(tmp_path)
    nodes = int(
        subprocess.run(
            ["sinfo", "-h", "-o", "%D"], capture_output=True, text=True, timeout=30
        ).stdout.split()[0]
    )
    meshes = {"trainers": 1, "dataloaders": 1} if nodes >= 2 else {"trainers": 1}
    job = SlurmJob(
        meshes,
        python_exe=sys.executable,
        monarch_port=free_port(2),
        log_dir=str(tmp_path),
        exclusive=False,
        job_start_timeout=300,
        time_limit="00:10:00",
    )
    try:
        state = job.state(cached_path=None)
        seen = {}
        for name in meshes:
            probes = getattr(state, name).spawn_procs().spawn("p", Probe)
            seen[name] = set(probes.env.call("SLURMD_NODENAME").get(timeout=120).values())
        assert sorted(n for names in seen.values() for n in names) == sorted(job._hostnames)
    finally:
        job.kill()
