"""A Slurm batch job: ask Slurm for nodes, run one actor per node, gather what
they computed, and give the nodes back.

Run it on a login node of your cluster (where sbatch works):

    python slurm_job.py --nodes 2 --partition debug
"""

import argparse
import os
import socket
import sys

from monarch.actor import Actor, current_rank, endpoint
from monarch.job import SlurmJob

parser = argparse.ArgumentParser()
parser.add_argument("--nodes", type=int, default=2)
parser.add_argument("--partition", default=None, help="Slurm partition (default: the cluster's)")
parser.add_argument("--port", type=int, default=22222, help="port of the worker on each node")
parser.add_argument("--python", default=sys.executable, help="Python on the nodes, with monarch")
args = parser.parse_args()


class Counter(Actor):
    """Counts the primes in its share of the numbers below `limit`."""

    @endpoint
    def where(self) -> str:
        return f"{os.environ.get('SLURMD_NODENAME')} ({socket.gethostname()}, pid {os.getpid()})"

    @endpoint
    def count_primes(self, limit: int) -> int:
        point = current_rank()
        share = range(point.rank, limit, point.extent.nelements)  # every n-th number
        return sum(1 for n in share if n > 1 and all(n % d for d in range(2, int(n**0.5) + 1)))


job = SlurmJob(
    {"workers": args.nodes},  # one mesh of this many nodes, in one allocation
    python_exe=args.python,
    partition=args.partition,
    monarch_port=args.port,
    time_limit="00:10:00",
    exclusive=False,  # share the nodes with other jobs: fine for a small example
    job_start_timeout=300,  # give up (and cancel) if Slurm has not started it by then
)
try:
    nodes = job.state(cached_path=None).workers  # submits, waits until the workers answer
    print(f"Slurm job {job.slurm_job_id}: {nodes.extent}")
    counters = nodes.spawn_procs().spawn("counters", Counter)  # one process on each node
    for point, where in counters.where.call().get().items():
        print(f"rank {point.rank} runs on {where}")
    counts = counters.count_primes.call(10_000).get()
    print(f"primes below 10000: {sum(counts.values())}, counted by {len(counts)} nodes")
    assert sum(counts.values()) == 1229
finally:
    job.kill()  # scancel: the allocation ends with the script
print("slurm job: ok")
