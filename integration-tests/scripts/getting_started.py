"""The actor parts of Monarch's getting-started tutorial, in our own words:
a counter mesh, slicing, a trainer that finds its data loader by rank, an
inference engine answering out of order through an explicit response port,
and a channel. Runs unchanged on Monarch (torchmonarch) and on this project."""

import asyncio
import threading
import time

from monarch.actor import (
    Actor,
    ActorError,
    Channel,
    Port,
    ValueMesh,
    context,
    current_rank,
    endpoint,
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
trainer_procs.stop().get()

procs.stop().get()
print("getting started: ok")
