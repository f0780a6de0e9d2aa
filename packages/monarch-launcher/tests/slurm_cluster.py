"""What the launcher's tests know of the real Slurm cluster they may find
(``tools/slurm-cluster start`` makes one on this machine, as CI does: nodes
n0 and n1, both at 127.0.0.1, so their workers take consecutive ports).
A name of its own: the whole workspace's tests run in one session."""

from __future__ import annotations

import contextlib
import random
import shutil
import socket
import subprocess


def real_slurm() -> str | None:
    """Why the real-Slurm tests cannot run here, or None when a cluster answers."""
    if shutil.which("sbatch") is None:
        return "no Slurm here: sbatch is not on PATH"
    try:
        done = subprocess.run(["sinfo", "-h"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"Slurm's commands are installed but sinfo fails: {error}"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"Slurm's commands are installed but no cluster answers ({last})"
    return None


NO_REAL_SLURM = real_slurm()


def cluster_nodes() -> int:
    """How many nodes the cluster has."""
    done = subprocess.run(["sinfo", "-h", "-o", "%D"], capture_output=True, text=True, timeout=30)
    return sum(int(n) for n in done.stdout.split())


def free_port(count: int = 1) -> int:
    """The first of ``count`` consecutive free ports, below Linux's ephemeral
    range (32768 up): a port the kernel hands out could be taken by an
    outgoing connection before a worker binds it, as SlurmJob's default
    (22222) could not."""
    rng = random.Random()
    for _ in range(1000):
        first = rng.randrange(20000, 32000 - count)
        with contextlib.ExitStack() as held:
            try:
                for port in range(first, first + count):
                    s = held.enter_context(socket.socket())
                    s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return first
    raise RuntimeError("no free ports between 20000 and 32000")
