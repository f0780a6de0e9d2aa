"""Ping-pong, in the style of Monarch's tutorial: two meshes of actors that
hold references to each other and exchange messages. Runs unchanged on
Monarch (torchmonarch) and on this project."""

import asyncio

from monarch.actor import Actor, current_rank, endpoint, this_host

ROUNDS = 5


class PingPong(Actor):
    def __init__(self) -> None:
        self.name = "Ping" if current_rank().rank == 0 else "Pong"
        self.count = 0

    @endpoint
    async def send(self, other) -> None:
        # the receiver's side of the mesh answers; the reply is awaited
        await other.recv.call_one(self.name, self.count)

    @endpoint
    async def recv(self, sender: str, count: int) -> None:
        self.count += 1
        print(f"{self.name} got message {count} from {sender}", flush=True)

    @endpoint
    async def total(self) -> int:
        return self.count


procs = this_host().spawn_procs(per_host={"gpus": 2})
players = procs.spawn("players", PingPong)
ping = players.slice(gpus=0)
pong = players.slice(gpus=1)

for _ in range(ROUNDS):
    ping.send.call_one(pong).get()
    pong.send.call_one(ping).get()

totals = players.total.call().get()
assert totals.values() == [ROUNDS, ROUNDS], totals


async def main() -> list[int]:
    values = await players.total.call()
    return values.values()


assert asyncio.run(main()) == [ROUNDS, ROUNDS]
procs.stop().get()
print("ping-pong: ok")
