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
- ``caller's write``: the socket write (it wakes the actor's process);
- ``to the proc's loop``: until the proc's control loop starts on it
  (waking that loop, reading and cutting the bytes into a message);
- ``proc's loop``: until the message is queued for the actor's thread
  (header, ordering, the actor's inbox);
- ``to the actor's thread``: until that thread starts on it (the wake-up);
- ``actor``: until the reply is handed to the transport (unpickling, the
  endpoint, pickling the reply);
- ``actor's write``: the socket write of the reply;
- ``to the caller's loop``: until the caller's control loop starts on it;
- ``caller's loop``: until the reply has settled the call's future;
- ``to the caller``: until ``get()`` returns (waking the calling thread).

Prints a table of medians (µs) and one JSON line.

    python tools/bench/call_trace.py [--samples 3000]
"""

from __future__ import annotations

import argparse
import bisect
import json
import statistics
import sys
import time
from typing import Any

from monarch.actor import Actor, endpoint, this_host

# (stage, mark it starts at, mark it ends at); marks "p:" are the actor's process's
STAGES = (
    ("caller builds", "start", "sending"),
    ("caller's write", "sending", "sent"),
    ("to the proc's loop", "sent", "p:dispatch"),
    ("proc's loop", "p:dispatch", "p:queued"),
    ("to the actor's thread", "p:queued", "p:step"),
    ("actor", "p:step", "p:sending"),
    ("actor's write", "p:sending", "p:sent"),
    ("to the caller's loop", "p:sent", "dispatch"),
    ("caller's loop", "dispatch", "settled"),
    ("to the caller", "settled", "end"),
)


def _wrap(owner: Any, name: str, log: list[tuple[str, float]], before: str, after: str) -> None:
    """Note the time before (``before``) and after (``after``) each call of
    ``owner.name``; an empty label notes nothing."""
    real = getattr(owner, name)

    def noted(*args: Any, **kwargs: Any) -> Any:
        if before:
            log.append((before, time.perf_counter()))
        try:
            return real(*args, **kwargs)
        finally:
            if after:
                log.append((after, time.perf_counter()))

    setattr(owner, name, noted)


def _trace_sends(log: list[tuple[str, float]], prefix: str) -> None:
    from monarch_actor._core.router import Runtime

    _wrap(Runtime, "send_frames", log, f"{prefix}sending", f"{prefix}sent")
    _wrap(Runtime, "dispatch", log, f"{prefix}dispatch", "")


class Traced(Actor):
    """Answers ``ping``; notes when its process's loop, its thread and its
    reply reach each stage."""

    def __init__(self) -> None:
        from monarch_actor._api.actor_host import ActorHost

        self.log: list[tuple[str, float]] = []
        _trace_sends(self.log, "p:")
        _wrap(ActorHost, "post", self.log, "", "p:queued")
        _wrap(ActorHost, "_step", self.log, "p:step", "")

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
    _wrap(Gather, "_settle", mine, "", "settled")
    calls: list[dict[str, float]] = []
    for _ in range(args.samples):
        call = {"start": time.perf_counter()}
        mine.append(("start", call["start"]))
        actor.ping.call_one().get()
        call["end"] = time.perf_counter()
        calls.append(call)
    theirs = actor.taken.call_one().get()
    procs.stop().get()

    # each call's own marks: the caller's between its start and end; the
    # proc's in order between the caller's write and the reply's arrival
    # (other messages, such as supervision's, add marks outside that window)
    stages: dict[str, list[float]] = {stage: [] for stage, _, _ in STAGES}
    totals = []
    here, there = _by_label(mine), _by_label(theirs)
    for call in calls:
        marks = dict(call)
        for label in ("sending", "sent", "settled"):
            found = _first(here.get(label, []), call["start"], call["end"])
            if found is not None:
                marks[label] = found
        if "sent" not in marks or "settled" not in marks:
            continue
        # the reply's arrival: the caller's last dispatch before the future settled
        found = _last(here.get("dispatch", []), marks["sent"], marks["settled"])
        if found is None:
            continue
        marks["dispatch"] = found
        at = marks["sent"]
        for label in ("p:dispatch", "p:queued", "p:step", "p:sending", "p:sent"):
            found = _first(there.get(label, []), at, marks["dispatch"])
            if found is None:
                break
            marks[label] = at = found
        else:
            for stage, first, last in STAGES:
                stages[stage].append(marks[last] - marks[first])
            totals.append(call["end"] - call["start"])
    result: dict[str, Any] = {
        "matched": len(totals),
        "total_us": statistics.median(totals) * 1e6 if totals else None,
    }
    print(f"call_one round trip, stages (medians of {len(totals)} calls):")
    for stage, values in stages.items():
        result[stage] = statistics.median(values) * 1e6 if values else None
        shown = "-" if not values else f"{result[stage]:8.1f} µs"
        print(f"  {stage:<22} {shown}")
    if totals:
        print(f"  {'whole':<22} {result['total_us']:8.1f} µs")
    print(json.dumps(result))
    return 0 if totals else 1


if __name__ == "__main__":
    sys.exit(main())
