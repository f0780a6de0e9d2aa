#!/usr/bin/env python3
"""What two plain Python processes reach for a ``cuda_ipc``-style transfer.

The floor that ``rdma_bench.py --cuda`` is judged against, the way
``cpu_bench.py`` gives a plain-Python floor for ``call_one``: no actors, no
RDMA package, just one owner process that opens a peer's shared CUDA
tensor once and, per request on a Unix socket pair, copies its own tensor
into it (a read) on a stream of its own. Variants of how the owner answers:

- ``sync``: the copy completes (an event is waited for), then the answer;
- ``early``: the answer goes as soon as the copy is queued, with an
  interprocess event the peer waits on (the owner still waits for the copy
  before it reads the next request);
- ``early+spin``: as ``early``, and the owner polls its socket instead of
  sleeping in ``recv`` for a while after each request.

Beside them: the empty round trip (blocking and polled), and a device copy
of the same size in one process (host-timed with a synchronize, and by
events), including one out of the peer's opened memory. Prints one JSON
line; needs torch with CUDA.

    python tools/bench/cuda_ipc_floor.py [--mib 256] [--samples 30]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import socket
import statistics
import sys
import time
from typing import Any

from _timing import cuda_skip_reason

SPIN_SECONDS = 0.002  # how long the owner polls after a request before it sleeps


def _recv_exact(sock: socket.socket, n: int, spin: bool) -> bytes:
    if not spin:
        return sock.recv(n, socket.MSG_WAITALL)
    until = time.perf_counter() + SPIN_SECONDS
    while True:
        try:
            return sock.recv(n, socket.MSG_DONTWAIT | socket.MSG_WAITALL)
        except BlockingIOError:
            if time.perf_counter() > until:
                return sock.recv(n, socket.MSG_WAITALL)


def owner(sock: socket.socket, nbytes: int) -> None:
    import pickle

    import torch

    torch.cuda.init()
    mine = torch.full((nbytes,), 7, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.Stream()
    private = torch.cuda.Event()
    shared = torch.cuda.Event(interprocess=True)
    length = int.from_bytes(sock.recv(8, socket.MSG_WAITALL), "little")
    items = pickle.loads(sock.recv(length, socket.MSG_WAITALL))
    storage = torch.UntypedStorage._new_shared_cuda(*items)
    theirs = torch.empty(0, dtype=torch.uint8, device="cuda")
    theirs.set_(storage, 0, (storage.nbytes(),), (1,))
    # how fast a copy into the opened memory runs, by events
    timings = []
    for _ in range(10):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record(stream)
        with torch.cuda.stream(stream):
            theirs[:nbytes].copy_(mine, non_blocking=True)
        end.record(stream)
        end.synchronize()
        timings.append(begin.elapsed_time(end) / 1e3)
    handle = pickle.dumps({"ipc_event": shared.ipc_handle(), "opened_copy_s": min(timings)})
    sock.sendall(len(handle).to_bytes(8, "little") + handle)
    spin = False
    while True:
        request = _recv_exact(sock, 1, spin)
        if not request or request == b"q":
            return
        mode = request.decode()
        spin = mode in "Sp"
        if mode in "0p":  # the empty round trip
            sock.send(b"k")
            continue
        with torch.cuda.stream(stream):
            theirs[:nbytes].copy_(mine, non_blocking=True)
        if mode == "s":  # sync: wait, then answer
            private.record(stream)
            private.synchronize()
            sock.send(b"k")
        else:  # early: answer once queued; wait before the next request
            shared.record(stream)
            private.record(stream)
            sock.send(b"k")
            private.synchronize()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--samples", type=int, default=30)
    args = parser.parse_args()
    reason = cuda_skip_reason()
    if reason is not None:
        print(json.dumps({"skipped": reason}))
        return 0
    import pickle

    import torch

    nbytes = args.mib << 20
    here, there = socket.socketpair()
    child = multiprocessing.get_context("spawn").Process(target=owner, args=(there, nbytes))
    child.start()
    there.close()
    local = torch.zeros(nbytes, dtype=torch.uint8, device="cuda")
    src = torch.ones(nbytes, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    items = pickle.dumps(local.untyped_storage()._share_cuda_())
    here.sendall(len(items).to_bytes(8, "little") + items)
    length = int.from_bytes(here.recv(8, socket.MSG_WAITALL), "little")
    reply = pickle.loads(here.recv(length, socket.MSG_WAITALL))
    event = torch.cuda.Event.from_ipc_handle(torch.cuda.current_device(), reply["ipc_event"])

    def timed(fn: Any) -> tuple[float, float]:
        for _ in range(3):
            fn()
        times = []
        for _ in range(args.samples):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times), statistics.median(times)

    def copy() -> None:
        local.copy_(src)
        torch.cuda.synchronize()

    def request(mode: str) -> Any:
        def go() -> None:
            torch.cuda.current_stream().synchronize()
            here.send(mode.encode())
            here.recv(1)
            if mode in "eS":
                event.synchronize()

        return go

    results: dict[str, Any] = {"mib": args.mib, "opened_copy_s": reply["opened_copy_s"]}
    results["copy"] = timed(copy)
    for name, mode in (
        ("empty", "0"),
        ("empty+spin", "p"),
        ("sync", "s"),
        ("early", "e"),
        ("early+spin", "S"),
    ):
        results[name] = timed(request(mode))
    results["copy_again"] = timed(copy)
    here.send(b"q")
    child.join(30)
    copy_s = min(results["copy"][0], results["copy_again"][0])
    for name in ("sync", "early", "early+spin"):
        best, median = results[name]
        print(
            f"floor {name:>10} {args.mib} MiB: best {best * 1e6:7.0f} us "
            f"(median {median * 1e6:7.0f}), {copy_s / best:.0%} of the copy",
            file=sys.stderr,
        )
    print(
        f"floor copy {copy_s * 1e6:.0f} us host-timed, {reply['opened_copy_s'] * 1e6:.0f} us "
        f"into opened memory by events; empty round trip {results['empty'][0] * 1e6:.0f} us "
        f"({results['empty+spin'][0] * 1e6:.0f} polled)",
        file=sys.stderr,
    )
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
