#!/usr/bin/env python3
"""What a full garbage collection costs a proc: its time, and how much of
the memory the proc shared with the fork server (and every other proc) it
makes private by writing to it.

Spawns ``--procs`` procs on this host; each reports its PSS (from
``/proc/self/smaps_rollup``), runs ``gc.collect()``, and reports the time it
took, its PSS after, the objects the collector keeps out of its walks
(``gc.get_freeze_count()``) and the objects it walks. With ``--torch`` the
script imports torch first, so the fork server preloads it, as it does for
any script that imports torch. Prints one JSON object.

    python tools/bench/collect_bench.py [--procs 4] [--torch]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from typing import Any

from monarch.actor import Actor, endpoint, this_host


def pss_kib() -> int:
    """This process's proportional set size, KiB."""
    with open("/proc/self/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    raise RuntimeError("no Pss line in /proc/self/smaps_rollup")


class Collector(Actor):
    @endpoint
    def collect(self) -> dict[str, Any]:
        before = pss_kib()
        start = time.perf_counter()
        gc.collect()
        took = time.perf_counter() - start
        return {
            "ms": took * 1e3,
            "pss_before_mib": before / 1024,
            "pss_after_mib": pss_kib() / 1024,
            "frozen": gc.get_freeze_count(),
            "walked": len(gc.get_objects()),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--torch", action="store_true", help="import torch first (preloaded)")
    args = parser.parse_args()
    if args.torch:
        import torch  # noqa: F401  # the fork server preloads what the script imported

    procs = this_host().spawn_procs(per_host={"gpus": args.procs})
    try:
        # each proc collects once, all at the same moment: what the first
        # full collection after the spawn costs each of them
        found = list(procs.spawn("collector", Collector).collect.call().get().values())
    finally:
        procs.stop().get(timeout=30)
    result = {
        key: statistics.median(r[key] for r in found)
        for key in ("ms", "pss_before_mib", "pss_after_mib", "frozen", "walked")
    }
    result["torch"] = args.torch
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()
