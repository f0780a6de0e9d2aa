#!/usr/bin/env python3
"""Where one RDMA transfer's time goes, stage by stage, across both processes.

One owner proc registers a buffer; this process reads it (or writes it)
back to back with a chosen backend. Both sides note ``time.perf_counter()``
(``CLOCK_MONOTONIC``, the same clock in every process of a host) at the
edges of each stage, by wrapping the package's own functions in each
process; nothing in the package changes. The backends whose transfer is
one request the owner answers (``tcp``, ``cuda_ipc``), in stages:

- ``before request``: from ``read_into`` until the request is sent (the
  backend's choice, the local memory, the request's arguments);
- ``to the owner``: until the owner's server starts on it (the socket, and
  waking the server's thread);
- ``owner``: until the owner sends its answer (checks, lookups, the copy
  queued or made);
- ``answer back``: until the answer is read here;
- ``after answer``: until the future resolves (for ``cuda_ipc``, the wait
  for the owner's copy to complete).

Prints a table of medians (µs) and one JSON line. On a machine with a GPU,
``--backend cuda_ipc`` moves CUDA tensors; elsewhere it says why not.

    python tools/bench/rdma_trace.py --backend tcp --size 64
    python tools/bench/rdma_trace.py --backend cuda_ipc --size 268435456
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from _timing import cuda_skip_reason, note_calls, report_stages

from monarch.actor import Actor, endpoint, this_host
from monarch.rdma import RDMABuffer

STAGES = ("before request", "to the owner", "owner", "answer back", "after answer")


class TracedOwner(Actor):
    """Owns one buffer; notes when its server starts a request and sends
    an answer."""

    def __init__(self) -> None:
        self.log: list[tuple[str, float]] = []
        self.keep: Any = None

    @endpoint
    def buffer(self, size: int, cuda: bool) -> RDMABuffer:
        from monarch_rdma import _server, _wire

        note_calls(_server.DataServer, "_handle", self.log, before="owner in")
        note_calls(_wire.Channel, "send", self.log, before="owner out")
        if cuda:
            import torch

            self.keep = torch.ones(size, dtype=torch.uint8, device="cuda")
            torch.cuda.synchronize()
        else:
            self.keep = bytearray(size)
        return RDMABuffer(self.keep if cuda else memoryview(self.keep))

    @endpoint
    def taken(self) -> list[tuple[str, float]]:
        taken, self.log[:] = list(self.log), []
        return taken


def _pairs(log: list[tuple[str, float]], first: str, second: str) -> list[tuple[float, float]]:
    """Each ``first`` with the next ``second`` after it."""
    found, start = [], None
    for label, at in log:
        if label == first:
            start = at
        elif label == second and start is not None:
            found.append((start, at))
            start = None
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="tcp", choices=("tcp", "cuda_ipc"))
    parser.add_argument("--size", type=int, default=64, help="bytes per transfer")
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--write", action="store_true", help="write instead of read")
    args = parser.parse_args()
    cuda = args.backend == "cuda_ipc"
    reason = cuda_skip_reason() if cuda else None
    if reason is not None:
        print(json.dumps({"skipped": reason}))
        return 0
    import monarch_rdma
    from monarch_rdma import _control, _wire

    procs = this_host().spawn_procs(per_host={"gpus": 1})
    owner = procs.spawn("traced_owner", TracedOwner)
    buffer = owner.buffer.call_one(args.size, cuda).get()
    monarch_rdma.configure(backend=args.backend, allow_tcp_fallback=True)
    if cuda:
        import torch

        local: Any = torch.zeros(args.size, dtype=torch.uint8, device="cuda")
    else:
        local = memoryview(bytearray(args.size))
    move = (
        (lambda: buffer.write_from(local).get())
        if args.write
        else lambda: buffer.read_into(local).get()
    )
    for _ in range(20):  # warm: connections, opened memory, lanes
        move()
    owner.taken.call_one().get()
    mine: list[tuple[str, float]] = []
    note_calls(_wire.Channel, "send", mine, before="sent")
    note_calls(_control, "read_answer", mine, after="answered")
    for _ in range(args.samples):
        mine.append(("start", time.perf_counter()))
        move()
        mine.append(("end", time.perf_counter()))
    theirs = owner.taken.call_one().get()
    procs.stop().get()

    # per transfer: its last request (the one answered last) and that answer
    transfers: list[dict[str, float]] = []
    current: dict[str, float] = {}
    for label, at in mine:
        if label == "start":
            current = {"start": at}
        elif label in ("sent", "answered"):
            current[label] = at  # the last of each (a first transfer also says hello)
        elif label == "end" and "sent" in current and "answered" in current:
            current["end"] = at
            transfers.append(current)
    served = _pairs(theirs, "owner in", "owner out")
    stages: dict[str, list[float]] = {stage: [] for stage in STAGES}
    for transfer in transfers:
        # the owner's request that began after this transfer's last send
        match = next(
            (pair for pair in served if transfer["sent"] <= pair[0] <= transfer["answered"]), None
        )
        if match is None:
            continue
        began, answered = match
        stages["before request"].append(transfer["sent"] - transfer["start"])
        stages["to the owner"].append(began - transfer["sent"])
        stages["owner"].append(answered - began)
        stages["answer back"].append(transfer["answered"] - answered)
        stages["after answer"].append(transfer["end"] - transfer["answered"])
    totals = [t["end"] - t["start"] for t in transfers]
    moved = f"{args.backend} {'write' if args.write else 'read'} of {args.size} bytes"
    result = report_stages(
        f"{moved}, medians:",
        stages,
        totals,
        {"backend": args.backend, "size": args.size, "write": args.write},
    )
    print(json.dumps(result))
    return 0 if result["matched"] else 1


if __name__ == "__main__":
    sys.exit(main())
