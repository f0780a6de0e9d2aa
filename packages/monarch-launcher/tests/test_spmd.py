"""A torchrun-style DDP script (gloo) runs unchanged on 2 hosts x 2 procs,
each host behind a worker of its own, and trains to the same loss as one
process on the whole batch."""

import os
import signal
import socket
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from monarch_actor import attach_to_workers, this_host  # noqa: E402
from monarch_launcher.spmd import SPMDActor, setup_torch_elastic_env  # noqa: E402
from monarch_transport import job_secret  # noqa: E402

TRAIN = textwrap.dedent(
    """
    import os, sys
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 4, generator=g), torch.randn(16, 1, generator=g)
    shard = slice(rank * 16 // world, (rank + 1) * 16 // world)
    for _ in range(5):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x[shard]), y[shard])
        loss.backward()
        opt.step()
    full = torch.nn.functional.mse_loss(model(x), y).item()
    if rank == 0:
        with open(sys.argv[1], "w") as f:
            f.write(repr(full))
    dist.destroy_process_group()
    """
)


def single_process_loss() -> float:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 4, generator=g), torch.randn(16, 1, generator=g)
    for _ in range(5):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return torch.nn.functional.mse_loss(model(x), y).item()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


WORKER = "from monarch_actor import run_worker_loop_forever as run; import sys; "
WORKER += "run(address=sys.argv[1], ca='trust_all_connections')"


def test_ddp_script_runs_unchanged_across_two_hosts(tmp_path):
    job_secret()
    script, out = tmp_path / "train.py", tmp_path / "loss.txt"
    script.write_text(TRAIN)
    addresses = [f"tcp://127.0.0.1:{free_port()}" for _ in range(2)]
    env = {**os.environ, "MONARCH_PRELOAD": "torch"}
    workers = [
        subprocess.Popen([sys.executable, "-c", WORKER, a], start_new_session=True, env=env)
        for a in addresses
    ]
    try:
        hosts = attach_to_workers(workers=addresses, ca="trust_all_connections")
        procs = hosts.spawn_procs(per_host={"gpus": 2})
        spmd = procs.spawn("spmd", SPMDActor)
        addr, port = spmd.slice(hosts=0, gpus=0).get_host_port.call_one(None).get(timeout=60)
        done = spmd.main.call(addr, port, [str(script), str(out)]).get(timeout=240)
        assert all(ok for _, ok in done.items())
        assert float(out.read_text()) == pytest.approx(single_process_loss(), rel=1e-5)
        hosts.shutdown().get(timeout=60)
    finally:
        for w in workers:
            if w.poll() is None:
                os.killpg(w.pid, signal.SIGKILL)
            w.wait(10)


def test_setup_torch_elastic_env_sets_torchruns_variables():
    procs = this_host().spawn_procs(per_host={"hosts": 2, "gpus": 2})
    setup_torch_elastic_env(procs, master_addr="127.0.0.1", master_port=29511)
    from monarch_actor import Actor, endpoint

    class Read(Actor):
        @endpoint
        def env(self) -> list[str]:
            names = ["RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"]
            return [os.environ[n] for n in [*names, "MASTER_PORT", "ROLE_NAME"]]

    seen = procs.spawn("read", Read).env.call().get(timeout=60)
    for point, env in seen.items():
        rank = point["hosts"] * 2 + point["gpus"]
        assert env == [
            str(rank),
            str(point["gpus"]),
            str(point["hosts"]),
            "4",
            "2",
            "29511",
            "rank",
        ]
    procs.stop().get(timeout=30)
