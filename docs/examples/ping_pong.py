"""Ping-pong: two actors that hold references to each other and trade messages."""

from monarch.actor import Actor, endpoint, this_host

ROUNDS = 3


class Player(Actor):
    def __init__(self, name: str) -> None:
        self.name = name
        self.received = 0

    @endpoint
    def meet(self, other: "Player") -> None:
        # `other` is a reference to an actor in another process, not a copy
        self.other = other

    @endpoint
    def hit(self, ball: int) -> str:
        self.received += 1
        return f"{self.name} got ball {ball}"

    @endpoint
    def rally(self, rounds: int) -> list[str]:
        # an actor calls another actor the same way the script does
        return [self.other.hit.call_one(ball).get() for ball in range(rounds)]


procs = this_host().spawn_procs(per_host={"procs": 2})  # two processes on this machine
ping = procs.slice(procs=0).spawn("ping", Player, "ping")  # one actor in the first
pong = procs.slice(procs=1).spawn("pong", Player, "pong")  # one in the second

ping.meet.call_one(pong).get()
pong.meet.call_one(ping).get()

for line in ping.rally.call_one(ROUNDS).get():
    print(line)  # pong got ball 0, 1, 2
for line in pong.rally.call_one(ROUNDS).get():
    print(line)  # ping got ball 0, 1, 2

assert ping.rally.call_one(1).get() == ["pong got ball 0"]
procs.stop().get()
print("ping-pong: ok")
