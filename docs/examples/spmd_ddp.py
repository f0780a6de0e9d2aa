"""DDP over monarch.spmd: run the torchrun-style script ddp_train.py on a mesh
of processes. SPMDActor gives each process torchrun's environment, then runs
the script there."""

from pathlib import Path

from monarch.actor import this_host
from monarch.spmd import SPMDActor

TRAIN_SCRIPT = str(Path(__file__).with_name("ddp_train.py"))

procs = this_host().spawn_procs(per_host={"gpus": 2})  # 2 ranks; on CPU, "gpus" is only a name
ranks = procs.spawn("spmd", SPMDActor)

# Rank 0's host serves the rendezvous: ask it for its address and a free port.
master_addr, master_port = ranks.slice(gpus=0).get_host_port.call_one(None).get()

# Every rank runs the script with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ... set.
finished = ranks.main.call(master_addr, master_port, [TRAIN_SCRIPT]).get()
assert all(finished.values())  # main returns True once a rank's script has run to its end

procs.stop().get()
print("spmd ddp: ok")
