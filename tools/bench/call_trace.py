#!/usr/bin/env python3
"""Where one ``call_one`` round trip's time goes, stage by stage, across
the caller's process and the actor's.

This process calls one actor in another process back to back. Both
processes note ``time.perf_counter()`` (``CLOCK_MONOTONIC``, the same clock
in every process of a host) at the edges of each stage, by wrapping the
runtime's own methods in each process; nothing in the package changes. The
stages, in the order a call passes them:

- ``caller builds``: from ``call_one`` until the message is handed to the
  transport (arguments checked and pickled, header, reply port, routing);
- ``write, to the proc's loop``: until the proc's control loop starts on it
  (the socket write, waking that loop, reading and cutting the bytes into
  a message). One stage, since the two overlap: the woken loop may run
  before the write has returned to the caller;
- ``proc's loop``: until the message is queued for the actor's thread
  (header, ordering, the actor's inbox);
- ``to the actor's thread``: until that thread starts on it (the wake-up);
- ``actor``: until the reply is handed to the transport (unpickling, the
  endpoint, pickling the reply);
- ``write, to the caller's loop``: until the caller's control loop starts
  on the reply;
- ``caller's loop``: until the reply has settled the call's future;
- ``to the caller``: until ``get()`` returns (waking the calling thread).

Prints a table of medians (µs) and one JSON line.

    python tools/bench/call_trace.py [--samples 3000]
"""

from __future__ import annotations

import argparse
import bisect
import json
import sys
import time

from _timing import note_calls, report_stages

from monarch.actor import Actor, endpoint, this_host

# (stage, mark it starts at, mark it ends at); marks "p:" are the actor's process's
STAGES = (
    ("caller builds", "start", "sending"),
    ("write, to the proc's loop", "sending", "p:dispatch"),
    ("proc's loop", "p:dispatch", "p:queued"),
    ("to the actor's thread", "p:queued", "p:step"),
    ("actor", "p:step", "p:sending"),
    ("write, to the caller's loop", "p:sending", "dispatch"),
    ("caller's loop", "dispatch", "settled"),
    ("to the caller", "settled", "end"),
)


def _trace_sends(log: list[tuple[str, float]], prefix: str) -> None:
    from monarch_actor._core.router import Runtime

    note_calls(Runtime, "send_frames", log, before=f"{prefix}sending")
    note_calls(Runtime, "dispatch", log, before=f"{prefix}dispatch")


class Traced(Actor):
    """Answers ``ping``; notes when its process's loop, its thread and its
    reply reach each stage."""

    def __init__(self) -> None:
        from monarch_actor._api.actor_host import ActorHost

        self.log: list[tuple[str, float]] = []
        _trace_sends(self.log, "p:")
        note_calls(ActorHost, "post", self.log, after="p:queued")
        note_calls(ActorHost, "_step", self.log, before="p:step")

    @endpoint
    def ping(self) -> int:
        return 0

    @endpoint
    def taken(self) -> list[tuple[str, float]]:
        taken, self.log[:] = list(self.log), []
        return taken


def _by_label(log: list[tuple[str, float]]) -> dict[str, list[float]]:
    """Each label's times, sorted."""
    found: dict[str, list[float]] = {}
    for label, at in log:
        found.setdefault(label, []).append(at)
    return {label: sorted(times) for label, times in found.items()}


def _first(times: list[float], at: float, until: float) -> float | None:
    """The first of ``times`` in [at, until]."""
    i = bisect.bisect_left(times, at)
    return times[i] if i < len(times) and times[i] <= until else None


def _last(times: list[float], at: float, until: float) -> float | None:
    """The last of ``times`` in [at, until]."""
    i = bisect.bisect_right(times, until) - 1
    return times[i] if i >= 0 and times[i] >= at else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=3000)
    args = parser.parse_args()
    from monarch_actor._core.gather import Gather

    procs = this_host().spawn_procs(per_host={"gpus": 1})
    actor = procs.spawn("traced", Traced)
    for _ in range(200):  # warm: connections, caches, the actor's thread
        actor.ping.call_one().get()
    actor.taken.call_one().get()
    mine: list[tuple[str, float]] = []
    _trace_sends(mine, "")
    note_calls(Gather, "_settle", mine, after="settled")
    calls: list[dict[str, float]] = []
    for _ in range(args.samples):
        call = {"start": time.perf_counter()}
        actor.ping.call_one().get()
        call["end"] = time.perf_counter()
        calls.append(call)
    theirs = actor.taken.call_one().get()
    procs.stop().get()

    # each call's own marks: the caller's between its start and end; the
    # proc's in order after the caller's write began (other messages, such
    # as supervision's, add marks outside that window)
    stages: dict[str, list[float]] = {stage: [] for stage, _, _ in STAGES}
    totals = []
    here, there = _by_label(mine), _by_label(theirs)
    for call in calls:
        marks = dict(call)
        for label in ("sending", "settled"):
            found = _first(here.get(label, []), call["start"], call["end"])
            if found is not None:
                marks[label] = found
        if "sending" not in marks or "settled" not in marks:
            continue
        # the reply's arrival: the caller's last dispatch before the future settled
        found = _last(here.get("dispatch", []), marks["sending"], marks["settled"])
        if found is None:
            continue
        marks["dispatch"] = found
        at = marks["sending"]
        for label in ("p:dispatch", "p:queued", "p:step", "p:sending"):
            found = _first(there.get(label, []), at, call["end"])
            if found is None:
                break
            marks[label] = at = found
        else:
            for stage, first, last in STAGES:
                stages[stage].append(marks[last] - marks[first])
            totals.append(call["end"] - call["start"])
    result = report_stages(
        f"call_one round trip, stages (medians of {len(totals)} calls):", stages, totals, {}
    )
    print(json.dumps(result))
    return 0 if totals else 1


if __name__ == "__main__":
    sys.exit(main())
