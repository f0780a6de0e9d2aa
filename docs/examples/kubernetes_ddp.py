"""DDP on Kubernetes. The controller (this script) runs in a pod, finds the
worker pods that kubernetes/workers.yaml made, and trains a model with torch
DDP on them: one process per GPU, or per pod on CPU-only nodes. The actor's
code travels with the message: the worker image needs no copy of this file."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from monarch.actor import Actor, current_rank, endpoint
from monarch.job.kubernetes import KubeConfig, KubernetesJob
from monarch.spmd import setup_torch_elastic_env

NAMESPACE = os.environ.get("POD_NAMESPACE", "monarch-ddp")  # the controller pod's namespace
HOSTS = int(os.environ.get("DDP_HOSTS", "2"))  # the worker StatefulSet's replicas
PROCS_PER_HOST = int(os.environ.get("DDP_PROCS_PER_HOST", "1"))  # GPUs per worker pod
STEPS = 5


class DDPTrainer(Actor):
    @endpoint
    def train(self, steps: int) -> list[float]:
        # setup_torch_elastic_env set RANK, WORLD_SIZE, MASTER_ADDR, ... in this process.
        # A process along "gpus" sees only its own GPU, as cuda:0.
        device = "cuda" if torch.cuda.is_available() else "cpu"
        dist.init_process_group("nccl" if device == "cuda" else "gloo")
        torch.manual_seed(current_rank().rank)  # every rank its own data
        model = DistributedDataParallel(nn.Linear(8, 1).to(device))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for _ in range(steps):
            inputs = torch.randn(16, 8, device=device)
            loss = (model(inputs) - inputs.sum(dim=1, keepdim=True)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()  # gradients averaged over every rank, across pods
            optimizer.step()
            losses.append(loss.item())
        dist.destroy_process_group()
        return losses


# In a pod: the pod's service account. Elsewhere: the kubeconfig file $KUBECONFIG names.
kubeconfig = KubeConfig.from_path(os.environ["KUBECONFIG"]) if "KUBECONFIG" in os.environ else None
job = KubernetesJob(NAMESPACE, timeout=600, kubeconfig=kubeconfig)
# Attach to pods that already run workers: those labelled
# app.kubernetes.io/name=monarch-worker and monarch.pytorch.org/mesh-name=trainers.
job.add_mesh("trainers", HOSTS)
hosts = job.state(cached_path=None).trainers  # waits until HOSTS pods are Ready
print(f"found {hosts.extent} in namespace {NAMESPACE}")

procs = hosts.spawn_procs(per_host={"gpus": PROCS_PER_HOST})
setup_torch_elastic_env(procs)  # torchrun's variables; rank 0's pod serves the rendezvous
trainers = procs.spawn("ddp", DDPTrainer)
losses = trainers.train.call(STEPS).get()
for point, ranks_losses in losses.items():
    print(f"rank {point.rank}: loss {ranks_losses[0]:.3f} -> {ranks_losses[-1]:.3f}")
procs.stop().get()
print("kubernetes ddp: ok")
