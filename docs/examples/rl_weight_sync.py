"""An RL loop: generators play with the current policy, a trainer learns from
their episodes, and the generators pull each new version of the weights
straight from the trainer's memory over an RDMABuffer."""

import torch
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from monarch.actor import Actor, current_rank, endpoint, this_host
from monarch.rdma import RDMABuffer

GENERATORS = 2
ITERATIONS = 8
EPISODES = 64  # per generator and iteration
CONTEXTS = ACTIONS = 4  # a contextual bandit: the reward is 1 for action (context + 1) % 4


def policy() -> nn.Module:
    return nn.Linear(CONTEXTS, ACTIONS)  # context (one-hot) -> action logits


class Trainer(Actor):
    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = policy()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.1)
        # One flat tensor holds the published weights. It is registered once;
        # each new version is copied into the same memory.
        self.published = parameters_to_vector(self.model.parameters()).detach().clone()
        self.buffer = RDMABuffer(self.published)
        self.version = 0

    @endpoint
    def weights(self) -> RDMABuffer:
        return self.buffer  # a small handle: the weights do not travel with it

    @endpoint
    def learn(self, episodes: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> float:
        contexts, actions, rewards = (torch.cat(part) for part in zip(*episodes, strict=True))
        logits = self.model(nn.functional.one_hot(contexts, CONTEXTS).float())
        log_prob = torch.distributions.Categorical(logits=logits).log_prob(actions)
        loss = -(log_prob * (rewards - rewards.mean())).mean()  # REINFORCE with a baseline
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.published.copy_(parameters_to_vector(self.model.parameters()))
        self.version += 1
        return rewards.mean().item()

    @endpoint
    def checksum(self) -> float:
        return self.published.sum().item()


class Generator(Actor):
    def __init__(self, weights: RDMABuffer) -> None:
        torch.manual_seed(1 + current_rank().rank)
        self.remote_weights = weights
        self.model = policy()
        self.local = torch.empty_like(parameters_to_vector(self.model.parameters()))

    @endpoint
    def sync(self) -> tuple[str, float]:
        self.remote_weights.read_into(self.local).get()  # one-sided: no code of the trainer runs
        vector_to_parameters(self.local, self.model.parameters())
        return self.remote_weights.backend, self.local.sum().item()

    @endpoint
    def play(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        contexts = torch.randint(CONTEXTS, (EPISODES,))
        with torch.no_grad():
            logits = self.model(nn.functional.one_hot(contexts, CONTEXTS).float())
        actions = torch.distributions.Categorical(logits=logits).sample()
        rewards = (actions == (contexts + 1) % ACTIONS).float()
        return contexts, actions, rewards


trainer_proc = this_host().spawn_procs()
trainer = trainer_proc.spawn("trainer", Trainer)
generator_procs = this_host().spawn_procs(per_host={"generators": GENERATORS})
generators = generator_procs.spawn("generators", Generator, trainer.weights.call_one().get())

rewards = []
for iteration in range(ITERATIONS):
    synced = generators.sync.call().get().values()  # every generator pulls the newest weights
    assert {checksum for _, checksum in synced} == {trainer.checksum.call_one().get()}
    episodes = generators.play.call().get().values()
    rewards.append(trainer.learn.call_one(list(episodes)).get())
    print(f"iteration {iteration}: mean reward {rewards[-1]:.2f}")

print("weights moved with the", synced[0][0], "backend")
assert rewards[-1] > rewards[0]  # the policy learned
generator_procs.stop().get()
trainer_proc.stop().get()
print("rl weight sync: ok")
