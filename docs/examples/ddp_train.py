"""A plain torchrun-style DDP training script: nothing in it knows about Monarch.

Run it with `torchrun --nproc-per-node=2 ddp_train.py`, or from spmd_ddp.py.
"""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

STEPS = 5


def main() -> None:
    dist.init_process_group("gloo")  # reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    rank = dist.get_rank()
    torch.manual_seed(rank)  # each rank starts from different weights...
    model = DistributedDataParallel(nn.Linear(8, 1))  # ...and DDP copies rank 0's to all
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(STEPS):
        inputs = torch.randn(16, 8)  # each rank trains on its own data
        loss = (model(inputs) - inputs.sum(dim=1, keepdim=True)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()  # DDP averages the gradients of all ranks here
        optimizer.step()
        if rank == 0:
            print(f"step {step}: loss {loss.item():.3f}", flush=True)

    # The ranks saw different data, yet their weights are the same
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.empty_like(weights) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, weights)
    assert all(torch.equal(gathered[0], other) for other in gathered)
    print(
        f"rank {rank} of {os.environ['WORLD_SIZE']} (local rank {os.environ['LOCAL_RANK']}): "
        "weights agree",
        flush=True,
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
