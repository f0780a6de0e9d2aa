"""Monarch's getting-started tutorial to its end, in our own words: a
counter mesh, slicing, a trainer that finds its data loader by rank, an
inference engine answering out of order through an explicit response port,
a channel, many hosts, and distributed tensors (activation, fetch_shard, a
shard as an endpoint argument, rref, remote functions, send to a port).
Runs unchanged on Monarch (torchmonarch) and on this project."""

import asyncio
import os
import threading
import time

import torch

from monarch import fetch_shard, remote
from monarch.actor import (
    Actor,
    ActorError,
    Channel,
    Port,
    ValueMesh,
    context,
    current_rank,
    endpoint,
    send,
    this_host,
    this_proc,
)
from monarch.job import hosts_from_config  # Monarch 0.7.0 has it here (monarch.actor: ours only)


class Counter(Actor):
    def __init__(self, initial_value: int) -> None:
        self.value = initial_value

    @endpoint
    def incr(self) -> None:
        self.value += 1

    @endpoint
    def get_value(self) -> int:
        return self.value


local = this_proc().spawn("local_counter", Counter, 10)
local.incr.call_one().get()
assert local.get_value.call_one().get() == 11

procs = this_host().spawn_procs(per_host={"gpus": 4})
counters = procs.spawn("counters", Counter, 0)
counters.incr.broadcast()
counters.slice(gpus=slice(2, 4)).incr.broadcast()
values = counters.get_value.call().get()
assert isinstance(values, ValueMesh)
assert values.values() == [1, 1, 2, 2], values
assert counters.slice(gpus=2).get_value.call_one().get() == 2
print(values)


class DataLoader(Actor):
    def __init__(self) -> None:
        self.step = 0

    @endpoint
    def next_batch(self) -> tuple[int, int]:
        self.step += 1
        return (context().actor_instance.rank["gpus"], self.step)


class Trainer(Actor):
    def __init__(self, loaders) -> None:
        # each trainer keeps the loader of the same rank
        self.loader = loaders.slice(**context().actor_instance.rank)

    @endpoint
    def train_step(self) -> int:
        rank, step = self.loader.next_batch.call_one().get()
        assert rank == current_rank()["gpus"]
        return step


loaders = procs.spawn("loaders", DataLoader)
trainers = procs.spawn("trainers", Trainer, loaders)
for expected in (1, 2, 3):
    assert trainers.train_step.call().get().values() == [expected] * 4


class InferenceEngine(Actor):
    """Answers each request from a worker thread, out of order."""

    @endpoint(explicit_response_port=True)
    def infer(self, port: Port, prompt: str, delay: float) -> None:
        def work() -> None:
            time.sleep(delay)
            port.send(prompt.upper())

        threading.Thread(target=work, daemon=True).start()


engine = procs.slice(gpus=0).spawn("engine", InferenceEngine)
slow = engine.infer.call_one("slow", 0.5)
fast = engine.infer.call_one("fast", 0.0)
assert fast.get() == "FAST"  # answered while the slow request still waits
assert slow.get() == "SLOW"


class Failing(Actor):
    @endpoint
    def fail(self) -> None:
        raise ValueError("expected failure")

    @endpoint
    def fine(self) -> str:
        return "still here"


failing = procs.slice(gpus=1).spawn("failing", Failing)
try:
    failing.fail.call_one().get()
    caught = None
except ActorError as error:
    caught = error.exception
assert isinstance(caught, ValueError), caught
assert failing.fine.call_one().get() == "still here"


class Reporter(Actor):
    @endpoint
    def report(self, port: Port) -> None:
        port.send(context().actor_instance.rank["gpus"])


port, receiver = Channel.open()
procs.spawn("reporters", Reporter).report.broadcast(port)
assert sorted(receiver.recv().get() for _ in range(4)) == [0, 1, 2, 3]

# Multiple hosts: with MONARCH_HOSTS unset, two worker processes on this machine
hosts = hosts_from_config("MONARCH_HOSTS")
assert dict(zip(hosts.extent.labels, hosts.extent.sizes, strict=True)) == {"hosts": 2}


class HostTrainer(Actor):
    @endpoint
    def step(self) -> str:
        return f"Trainer {context().message_rank} taking a step."


trainer_procs = hosts.spawn_procs(per_host={"gpus": 4})
steps = trainer_procs.spawn("trainer", HostTrainer).step.call().get()
assert len(list(steps.values())) == 8 and all("taking a step" in s for s in steps.values())
asyncio.run(trainer_procs.logging_option(stream_to_client=True, aggregate_window_sec=3))

# Distributed tensors: torch on every process of the mesh, driven from here
with trainer_procs.activate():
    t = torch.rand(3, 4)  # each process draws its own
first, second = fetch_shard(t, hosts=0, gpus=0).get(), fetch_shard(t, hosts=0, gpus=1).get()
assert first.shape == (3, 4) and not torch.equal(first, second)

with trainer_procs.activate():
    gram = t @ t.T
assert torch.allclose(fetch_shard(gram, hosts=0, gpus=0).get(), first @ first.T)


class ShardTrainer(Actor):
    @endpoint
    def step(self, row: torch.Tensor) -> tuple[int, ...]:
        return tuple(row.shape)  # the shard of this process


shard_trainers = trainer_procs.spawn("shard_trainers", ShardTrainer)
assert set(shard_trainers.step.call(gram[0]).get().values()) == {(3,)}


class Linear(Actor):
    def __init__(self) -> None:
        self.w = torch.ones(4, 2)

    @endpoint(propagate=lambda x: torch.empty(x.shape[0], 2))
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w


linear = trainer_procs.spawn("linear", Linear)
out = torch.relu(linear.forward.rref(t))  # a distributed tensor, made by the actors
assert torch.allclose(fetch_shard(out, hosts=0, gpus=0).get(), torch.relu(first @ torch.ones(4, 2)))


@remote
def process_id() -> int:
    return os.getpid()


with trainer_procs.activate():
    pids = process_id.call().get()
assert len(set(pids.values())) == 8

answers, replies = Channel.open()
with trainer_procs.activate():
    send(process_id, args=(), kwargs={}, port=answers)
assert {replies.recv().get() for _ in range(8)} == set(pids.values())

trainer_procs.stop().get()

procs.stop().get()
print("getting started: ok")
