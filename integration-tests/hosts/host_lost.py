"""A host that vanishes while a call waits on it. Usage: host_lost.py
WORKER_ADDRESS...  Prints READY once a call to host 1 is in flight, then
waits; the test makes host 1 vanish. Prints the seconds until the call
failed, the error, the failures the root hook saw and whether host 0 still
answers."""

import sys
import time

import monarch.actor
from monarch.actor import Actor, SupervisionError, attach_to_workers, endpoint
from monarch_actor.testing import wait_for

seen = []
monarch.actor.unhandled_fault_hook = seen.append


class Sleeper(Actor):
    @endpoint
    def nap(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds


def main(workers: list[str]) -> None:
    hosts = attach_to_workers(workers=workers, ca="trust_all_connections")
    sleepers = hosts.spawn_procs(per_host={"gpus": 1}).spawn("s", Sleeper)
    sleepers.nap.call(0.0).get(timeout=60)
    busy = sleepers.slice(hosts=1).nap.call_one(120.0)
    print("READY", flush=True)
    sys.stdin.readline()  # the test says when host 1 is gone
    started = time.monotonic()
    try:
        busy.get(timeout=60)
        print("FAILED TO FAIL", flush=True)
    except SupervisionError as error:
        print(f"after {time.monotonic() - started:.1f} s: {error}", flush=True)
    print("host 0 answers:", sleepers.slice(hosts=0).nap.call_one(0.0).get(timeout=30) == 0.0)
    wait_for(lambda: seen, 15)
    time.sleep(1.0)  # a second report would come now: what is checked is that none does
    print("reports:", len(seen), [f.crashed_ranks for f in seen], flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
