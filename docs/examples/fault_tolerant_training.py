"""Fault-tolerant training: a trainer actor owns a mesh of workers. When an
endpoint raises, the trainer retries the step. When a worker's process dies,
the trainer starts new workers and goes on from its last checkpoint.
__supervise__ tells Monarch the trainer handled the failure, so it does not
reach your script."""

import os

from monarch.actor import (
    Actor,
    ActorError,
    MeshFailure,
    SupervisionError,
    current_rank,
    endpoint,
    this_host,
)

STEPS = 8
CHECKPOINT_EVERY = 3
WORKERS = 2
TARGET = 3.0  # the model is one number, w; training moves it towards TARGET
FLAKY_STEP = 2  # first try of this step: worker 0 raises
CRASH_STEP = 5  # first generation of workers: worker 1's process dies here


class Worker(Actor):
    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.rank = current_rank().rank
        self.tries: dict[int, int] = {}

    @endpoint
    def gradient(self, step: int, w: float) -> float:
        self.tries[step] = self.tries.get(step, 0) + 1
        if step == FLAKY_STEP and self.rank == 0 and self.tries[step] == 1:
            raise OSError("could not read the batch")  # a transient error: retry
        if step == CRASH_STEP and self.rank == 1 and self.generation == 0:
            os._exit(1)  # stands in for a segfault, an out-of-memory kill, a lost node
        return 2 * (w - TARGET) * (1 + self.rank) / WORKERS  # each rank's share


class Trainer(Actor):
    def __init__(self) -> None:
        self.w = 0.0
        self.step = 0
        self.checkpoint = (0, 0.0)  # (step, w) saved every CHECKPOINT_EVERY steps
        self.generation = 0
        self.events: list[str] = []
        self._start_workers()

    def _start_workers(self) -> None:
        # spawned by this actor: the trainer owns these meshes and hears of their failures
        self.procs = this_host().spawn_procs(per_host={"workers": WORKERS}, name="workers")
        self.workers = self.procs.spawn("worker", Worker, self.generation)

    def __supervise__(self, failure: MeshFailure) -> bool:
        self.events.append(f"__supervise__: workers {failure.crashed_ranks} failed")
        return True  # handled here: the failure does not climb to the script

    @endpoint
    def train(self) -> float:
        while self.step < STEPS:
            try:
                grads = self.workers.gradient.call(self.step, self.w).get()
            except SupervisionError:  # a worker's process died: restart from the checkpoint
                self.events.append(f"step {self.step}: a worker died; back to the checkpoint")
                self.procs.stop().get()
                self.generation += 1
                self._start_workers()
                self.step, self.w = self.checkpoint
                continue
            except ActorError as error:  # the endpoint raised; the worker lives on
                self.events.append(f"step {self.step}: {error.exception!r}; retrying")
                continue
            self.w -= 0.1 * sum(grads.values())
            self.step += 1
            if self.step % CHECKPOINT_EVERY == 0:
                self.checkpoint = (self.step, self.w)
        return self.w

    @endpoint
    def report(self) -> list[str]:
        return self.events


trainer_proc = this_host().spawn_procs(name="trainer")
trainer = trainer_proc.spawn("trainer", Trainer)
w = trainer.train.call_one().get()

for event in trainer.report.call_one().get():
    print(event)
print(f"w after {STEPS} steps: {w:.4f}")

# The failures cost time, not correctness: the same result as a run without them.
expected = 0.0
for _ in range(STEPS):
    expected -= 0.1 * 2 * (expected - TARGET) * (1 + 2) / WORKERS
assert abs(w - expected) < 1e-9, (w, expected)
trainer_proc.stop().get()
print("fault-tolerant training: ok")
