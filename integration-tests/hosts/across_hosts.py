"""A controller in its own network namespace drives procs on three others:
spawning, torchrun's environment, slicing by host, broadcasts, procs calling
procs on other hosts, and 64 MiB moved between hosts by RDMA.
Usage: across_hosts.py WORKER_ADDRESS...  Prints "across hosts: ok"."""

import sys

import torch

from monarch.actor import Actor, attach_to_workers, current_rank, endpoint
from monarch.rdma import RDMABuffer


class Peer(Actor):
    def __init__(self) -> None:
        self.pokes = 0
        self.data = torch.full((64 << 20,), current_rank().rank, dtype=torch.uint8)

    @endpoint
    def env(self) -> dict[str, str]:
        import os

        names = ["RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "MASTER_ADDR"]
        return {name: os.environ[name] for name in names}

    @endpoint
    def poke(self) -> None:
        self.pokes += 1

    @endpoint
    def count(self) -> int:
        return self.pokes

    @endpoint
    def ask(self, other: "Peer") -> int:
        return other.count.call_one().get()

    @endpoint
    def buffer(self) -> RDMABuffer:
        return RDMABuffer(self.data)

    @endpoint
    def fetch(self, buffer: RDMABuffer) -> list[int]:
        into = torch.zeros(64 << 20, dtype=torch.uint8)
        buffer.read_into(into).get()
        return sorted(set(into[:: 1 << 16].tolist()))


def main(workers: list[str]) -> None:
    hosts = attach_to_workers(workers=workers, ca="trust_all_connections")
    assert hosts.initialized.get(timeout=60)
    procs = hosts.spawn_procs(per_host={"gpus": 2})
    peers = procs.spawn("peers", Peer)
    envs = peers.env.call().get(timeout=60)
    master = {env["MASTER_ADDR"] for _, env in envs.items()}
    assert master == {workers[0].split("//")[1].split(":")[0]}, master
    for point, env in envs.items():
        assert env["GROUP_RANK"] == str(point["hosts"]) and env["WORLD_SIZE"] == "6", env

    for _ in range(50):
        peers.poke.broadcast()
    assert list(peers.count.call().get(timeout=60).values()) == [50] * 6
    # a proc on host 0 asks a proc on host 2
    assert peers.slice(hosts=0, gpus=0).ask.call_one(peers.slice(hosts=2, gpus=1)).get() == 50
    # only the sliced host gets the new procs
    lone = hosts.slice(hosts=1).spawn_procs(per_host={"gpus": 1}).spawn("lone", Peer)
    assert lone.env.call_one().get(timeout=60)["GROUP_RANK"] == "0"

    buffer = peers.slice(hosts=2, gpus=1).buffer.call_one().get(timeout=60)
    seen = peers.slice(hosts=0, gpus=0).fetch.call_one(buffer).get(timeout=120)
    assert seen == [5], seen  # rank 5's bytes, read on host 0

    hosts.shutdown().get(timeout=60)
    print("across hosts: ok")


if __name__ == "__main__":
    main(sys.argv[1:])
