"""Actors the tests spawn on workers' procs (imported by name there)."""

import os

from monarch_actor import Actor, endpoint


class Probe(Actor):
    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def env(self, name: str) -> str | None:
        return os.environ.get(name)


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])
