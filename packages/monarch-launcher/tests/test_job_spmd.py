"""``monarch.job.spmd``: ``serve`` turns a torchrun command or a (duck-typed)
TorchX AppDef into an ``SPMDJob`` whose workers are real processes;
``run_spmd`` runs a gloo DDP script on every rank with torchrun's
environment. ``StoreJob.from_store`` publishes a real worker through a store
and rank 0 drives it as a job."""

import json
import os
import sys
import textwrap
from dataclasses import dataclass, field

import pytest
from slurm_cluster import NO_REAL_SLURM, cluster_nodes, free_port

from monarch_launcher import JobError, Unsupported
from monarch_launcher.spmd import SPMDJob, StoreJob, serve

TRAIN = textwrap.dedent(
    """
    import json, os, sys
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    names = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
             "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "EXTRA"]
    seen = {n: os.environ.get(n) for n in names}
    seen["sum"] = t.item()
    seen["argv"] = sys.argv[1:]
    seen["master"] = bool(os.environ["MASTER_ADDR"]) and int(os.environ["MASTER_PORT"]) > 0
    out = os.path.join(sys.argv[1], f"rank{dist.get_rank()}.json")
    with open(out, "w") as f:
        json.dump(seen, f)
    dist.destroy_process_group()
    """
)


@dataclass
class Role:
    """Shaped like torchx.specs.Role."""

    name: str
    image: str
    entrypoint: str
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    num_replicas: int = 1


@dataclass
class AppDef:
    """Shaped like torchx.specs.AppDef."""

    name: str
    roles: list[Role] = field(default_factory=list)


def read_ranks(folder, world):
    return [json.loads((folder / f"rank{r}.json").read_text()) for r in range(world)]


@pytest.fixture
def torch_env(in_tmp, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv("MONARCH_PRELOAD", "torch")
    return in_tmp


def test_serve_command_runs_ddp_allreduce_on_every_rank(torch_env):
    script = torch_env / "train.py"
    script.write_text(TRAIN)
    job = serve(
        ["torchrun", "--nproc-per-node=2", "--standalone", str(script), str(torch_env)],
        scheduler="local_cwd",
    )
    try:
        assert isinstance(job, SPMDJob) and job.active
        job.run_spmd()
        ranks = read_ranks(torch_env, 2)
        for r, seen in enumerate(ranks):
            assert seen["sum"] == 3.0
            assert seen["argv"] == [str(torch_env)]
            assert seen["master"]
            assert [seen[n] for n in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")] == [
                str(r),
                str(r),
                "2",
                "2",
            ]
            assert (seen["GROUP_RANK"], seen["GROUP_WORLD_SIZE"], seen["ROLE_NAME"]) == (
                "0",
                "1",
                "rank",
            )
        assert job.state(cached_path=None).workers.extent.labels == ["hosts"]
    finally:
        job.kill()
    assert not job.active


def test_serve_appdef_two_hosts_wrapper_entrypoint_and_env(torch_env):
    (torch_env / "train_mod.py").write_text(TRAIN)
    app = AppDef(
        name="ddp",
        roles=[
            Role(
                name="trainer",
                image="",
                entrypoint="workspace/entrypoint.sh",  # a wrapper: the command is in args
                args=["torchrun", "--nnodes=2", "--nproc_per_node", "2", "-m", "train_mod"],
                env={"EXTRA": "yes"},
                num_replicas=2,
            )
        ],
    )
    app.roles[0].args.append(str(torch_env))
    job = serve(app, scheduler="local_cwd")
    try:
        job.run_spmd()
        ranks = read_ranks(torch_env, 4)
        for r, seen in enumerate(ranks):
            assert seen["sum"] == 10.0
            assert seen["EXTRA"] == "yes"
            assert (seen["RANK"], seen["LOCAL_RANK"], seen["GROUP_RANK"]) == (
                str(r),
                str(r % 2),
                str(r // 2),
            )
            assert (seen["WORLD_SIZE"], seen["GROUP_WORLD_SIZE"]) == ("4", "2")
    finally:
        job.kill()


@pytest.mark.skipif(NO_REAL_SLURM is not None, reason=str(NO_REAL_SLURM))
def test_serve_on_slurm_runs_ddp_on_every_node(torch_env):
    nodes = min(2, cluster_nodes())
    script = torch_env / "train.py"
    script.write_text(TRAIN)
    command = ["torchrun", f"--nnodes={nodes}", "--nproc-per-node=2", str(script), str(torch_env)]
    app = AppDef("ddp", [Role("trainer", "", command[0], command[1:], num_replicas=nodes)])
    job = serve(
        app,
        scheduler="slurm",
        scheduler_cfg={
            "time": "00:10:00",
            "exclusive": False,
            "job_dir": str(torch_env),
            # the nodes of a one-machine cluster share its address: their workers take
            # consecutive ports
            "monarch_port": free_port(nodes),
            "python_exe": sys.executable,
        },
    )
    try:
        job.run_spmd()
        ranks = read_ranks(torch_env, 2 * nodes)
        assert {seen["sum"] for seen in ranks} == {float(sum(range(1, 2 * nodes + 1)))}
        assert [seen["GROUP_RANK"] for seen in ranks] == [str(r // 2) for r in range(2 * nodes)]
        assert {seen["WORLD_SIZE"] for seen in ranks} == {str(2 * nodes)}
        slurm_id = job.state(cached_path=None).workers  # the job is Slurm's, and alive
        assert slurm_id.extent.labels == ["hosts"]
    finally:
        job.kill()
    assert not job.active


def test_a_failing_script_raises_and_the_job_still_runs(torch_env):
    script = torch_env / "fail.py"
    script.write_text("raise RuntimeError('boom from the script')\n")
    job = serve(["python", str(script)], scheduler="local_cwd")
    try:
        with pytest.raises(Exception, match="boom from the script"):
            job.run_spmd()
        ok = torch_env / "ok.py"
        ok.write_text("open('ran.txt', 'w').write('yes')\n")
        job._original_roles = [{"entrypoint": "python", "args": [str(ok)]}]
        job.run_spmd()
        assert (torch_env / "ran.txt").read_text() == "yes"
    finally:
        job.kill()


@pytest.mark.parametrize(
    ("command", "error", "match"),
    [
        ([], ValueError, "empty"),
        (["torchrun", "--nnodes=2", "train.py"], ValueError, "one host only"),
        (["bash", "train.sh"], ValueError, "should start with torchrun"),
        (["torchrun", "--nproc-per-node=2"], ValueError, "names no training script"),
        (["torchrun", "--no-python", "./a.out"], Unsupported, "--no-python"),
        (["torchrun", "--nproc-per-node=0", "t.py"], ValueError, "at least 1"),
        ("torchrun train.py", TypeError, "AppDef"),
    ],
)
def test_bad_commands_are_refused_before_anything_starts(in_tmp, command, error, match):
    with pytest.raises(error, match=match):
        serve(command, scheduler="local_cwd")


def test_only_torchruns_own_nnodes_counts(in_tmp):
    # --nnodes after the script is the script's argument, not torchrun's
    with pytest.raises(Unsupported, match="internal to Meta"):
        serve(["torchrun", "--nnodes=1:1", "train.py", "--nnodes=4"], scheduler="mast_conda")
    with pytest.raises(ValueError, match="one host only"):
        serve(["python", "-m", "torch.distributed.run", "--nnodes", "3", "t.py"])


def test_bad_appdefs_and_schedulers(in_tmp):
    role = Role(name="a", image="", entrypoint="torchrun", args=["t.py"])
    with pytest.raises(ValueError, match="no roles"):
        serve(AppDef(name="x"), scheduler="local_cwd")
    with pytest.raises(ValueError, match="2 roles"):
        serve(AppDef(name="x", roles=[role, role]), scheduler="local_cwd")
    with pytest.raises(ValueError, match="num_replicas"):
        serve(
            AppDef(name="x", roles=[Role("a", "", "torchrun", ["t.py"], num_replicas=0)]),
            scheduler="local_cwd",
        )
    with pytest.raises(Unsupported, match="internal to Meta"):
        serve(["torchrun", "t.py"])  # Monarch's default scheduler, mast_conda
    with pytest.raises(Unsupported, match="local_cwd"):
        serve(["torchrun", "t.py"], scheduler="aws_batch")
    with pytest.raises(ValueError, match="unknown slurm option 'color'"):
        serve(["torchrun", "t.py"], scheduler="slurm", scheduler_cfg={"color": "red"})
    with pytest.warns(UserWarning, match="not a number"):
        with pytest.raises(Unsupported):
            serve(["torchrun", "--nproc-per-node=gpu", "t.py"], scheduler="kubernetes")


def test_spmd_job_made_directly():
    job = SPMDJob(handle="slurm://x/1", scheduler="slurm")
    with pytest.raises(JobError, match="not made by serve"):
        job.state(cached_path=None)
    assert not job.can_run(job)


class MemoryStore:
    """The part of torch.distributed.Store that from_store uses."""

    def __init__(self):
        self.values = {}

    def set(self, key, value):
        self.values[key] = value.encode() if isinstance(value, str) else value

    def get(self, key):
        return self.values[key]


def test_store_job_topology_errors(monkeypatch):
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(RuntimeError, match="RANK"):
        StoreJob.from_store(MemoryStore())
    kw = {"rank": 0, "local_rank": 0, "world_size": 3, "local_world_size": 2}
    with pytest.raises(ValueError, match="divisible"):
        StoreJob.from_store(MemoryStore(), **kw)
    kw["world_size"] = 2
    with pytest.raises(ValueError, match="unsupported transport"):
        StoreJob.from_store(MemoryStore(), transport="bogus", **kw)
    with pytest.raises(ValueError, match="monarch_port must be an explicit"):
        StoreJob.from_store(MemoryStore(), transport="tcp", **kw)
    # a rank that is neither rank 0 nor the first of its host starts nothing
    store = MemoryStore()
    assert (
        StoreJob.from_store(store, rank=3, local_rank=1, world_size=4, local_world_size=2) is None
    )
    assert store.values == {}


def test_store_job_across_hosts_needs_a_shared_secret(monkeypatch):
    monkeypatch.delenv("MONARCH_JOB_SECRET", raising=False)
    monkeypatch.delenv("MONARCH_JOB_SECRET_FILE", raising=False)
    with pytest.raises(JobError, match="one job secret"):
        StoreJob.from_store(MemoryStore(), rank=0, local_rank=0, world_size=4, local_world_size=2)
    # a rank that starts nothing needs none
    assert (
        StoreJob.from_store(MemoryStore(), rank=3, local_rank=1, world_size=4, local_world_size=2)
        is None
    )


def test_store_job_attaches_to_the_worker_it_published():
    from launcher_actors import Probe

    store = MemoryStore()
    job = StoreJob.from_store(
        store, name="trainers", rank=0, local_rank=0, world_size=2, local_world_size=2
    )
    assert isinstance(job, StoreJob)
    assert list(store.values) == ["monarch/spmd/workers/0"]
    assert store.values["monarch/spmd/workers/0"].startswith(b"ipc://")
    hosts = job.state().trainers
    assert hosts.extent.labels == ["hosts"] and hosts.extent.sizes == [1]
    procs = hosts.spawn_procs(per_host={"gpus": 2})
    pids = procs.spawn("probe", Probe).pid.call().get(timeout=60)
    assert len({pid for _, pid in pids.items()} - {os.getpid()}) == 2
    procs.stop().get(timeout=30)
    job.kill()
    assert not job.active
