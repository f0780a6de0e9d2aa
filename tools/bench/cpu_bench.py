"""Where the time of a call goes: CPU seconds per call, by process and by
user/kernel, while one script calls one actor in a loop (``call_one``), or
with ``--procs N`` a mesh of N actors, each in a process of its own
(``call().get()`` to all of them).

Written once against the public ``monarch.actor`` API, so the same file
runs against this project (``--impl ours``) and torchmonarch 0.7.0
(``--impl monarch``). ``--impl floor`` is the same round trip with no
framework at all, in plain Python: the caller writes a small message to a
Unix socket from its own thread while a second thread waits on the reply
socket (as a control loop does), and the receiving process reads it on one
thread and answers from another (as an actor's thread does): every thread
wake-up of a call, and nothing else. With ``--procs N`` it writes to N such
processes and the call is back when all N answers are. The difference to it is the work a
framework adds.

The CPU is read from ``/proc`` (Linux): the client process and every process
it started (procs, their helpers), user and system time, over a window of
``--seconds`` of back-to-back calls. ``--cpus 0`` (or ``first``) keeps the script and every
process it starts on CPU 0 (the affinity is inherited): the same calls
without any wake-up of another, idle, CPU. Prints one JSON object: ``latency``
(median seconds per call), ``client_user``, ``client_sys``, ``others_user``,
``others_sys`` (CPU seconds per call), ``cpu`` (their sum) and ``threads`` (the busiest threads
of the client and the procs, CPU seconds per call each).

    python tools/bench/cpu_bench.py --impl ours [--seconds 4] [--cpus 0] [--procs 8]
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import socket
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _timing import log

TICK = os.sysconf("SC_CLK_TCK")


def descendants(root: int) -> list[int]:
    """``root`` and every process below it (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rpartition(")")[2].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def thread_times(pids: list[int]) -> dict[tuple[int, int], tuple[int, int]]:
    """(pid, tid) -> (user, system) clock ticks of every thread of ``pids``."""
    times = {}
    for pid in pids:
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                fields = (task / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            times[(pid, int(task.name))] = (int(fields[11]), int(fields[12]))
    return times


def account(call: Callable[[], object], seconds: float) -> dict[str, Any]:
    """Call ``call`` back to back for ``seconds``; its latency and CPU."""
    for _ in range(200):
        call()
    me = os.getpid()
    pids = descendants(me)
    before = thread_times(pids)
    latencies = []
    end = time.perf_counter() + seconds
    while (now := time.perf_counter()) < end:
        call()
        latencies.append(time.perf_counter() - now)
    after = thread_times(pids)
    n = len(latencies)
    result: dict[str, Any] = {"latency": statistics.median(latencies), "calls": n}
    sums = {"client_user": 0, "client_sys": 0, "others_user": 0, "others_sys": 0}
    threads = []
    for key, (user, system) in after.items():
        user0, system0 = before.get(key, (0, 0))
        du, ds = user - user0, system - system0
        side = "client" if key[0] == me else "others"
        sums[f"{side}_user"] += du
        sums[f"{side}_sys"] += ds
        if du + ds:
            threads.append((side, (du + ds) / TICK / n))
    result.update({k: v / TICK / n for k, v in sums.items()})
    result["cpu"] = sum(sums.values()) / TICK / n  # all of it: every process, user and kernel
    result["threads"] = sorted(threads, key=lambda t: -t[1])[:6]
    return result


def framework(args: argparse.Namespace) -> dict[str, Any]:
    from monarch.actor import Actor, endpoint, this_host

    class Echo(Actor):
        @endpoint
        def ping(self) -> int:
            return 0

    procs = this_host().spawn_procs(per_host={"gpus": args.procs})
    actors = procs.spawn("echo", Echo)
    actors.ping.call().get()
    if args.procs == 1:
        result = account(lambda: actors.ping.call_one().get(), args.seconds)
    else:
        result = account(lambda: actors.ping.call().get(), args.seconds)
    procs.stop().get()
    return result


def floor(args: argparse.Namespace) -> dict[str, Any]:
    sockets, children = [], []
    for _ in range(args.procs):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:
            for other in sockets:
                other.close()
            ours.close()
            receive(theirs)
        theirs.close()
        sockets.append(ours)
        children.append(pid)
    replied = threading.Semaphore(0)

    def loop() -> None:  # the caller's control loop: a call is back when every answer is
        selector = selectors.DefaultSelector()
        for ours in sockets:
            selector.register(ours, selectors.EVENT_READ)
        waiting, open_ = len(sockets), len(sockets)
        while open_:
            for key, _ in selector.select():
                if not os.read(key.fd, 4096):
                    selector.unregister(key.fileobj)
                    open_ -= 1
                    continue
                waiting -= 1
                if not waiting:
                    waiting = len(sockets)
                    replied.release()

    threading.Thread(target=loop, daemon=True).start()
    message = b"x" * 200

    def call() -> None:
        for ours in sockets:
            os.write(ours.fileno(), message)
        replied.acquire()

    result = account(call, args.seconds)
    for ours in sockets:
        ours.shutdown(socket.SHUT_WR)
    for pid in children:
        os.waitpid(pid, 0)
    return result


def receive(theirs: socket.socket) -> None:
    """A receiving process: a loop thread reads, an actor thread answers."""
    answers: list[bytes] = []
    ready = threading.Condition()

    def actor() -> None:
        while True:
            with ready:
                while not answers:
                    ready.wait()
                message = answers.pop()
            if not message:
                return
            os.write(theirs.fileno(), message)

    threading.Thread(target=actor, daemon=True).start()
    selector = selectors.DefaultSelector()
    selector.register(theirs, selectors.EVENT_READ)
    while True:
        selector.select()
        message = os.read(theirs.fileno(), 4096)
        with ready:
            answers.append(message)
            ready.notify()
        if not message:
            os._exit(0)


def cpu_set(text: str) -> set[int]:
    """``--cpus``: "0,1", or "first" (the lowest CPU this process may run on)."""
    if text == "first":
        return {min(os.sched_getaffinity(0))}
    return {int(cpu) for cpu in text.split(",")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--impl", choices=("ours", "monarch", "floor"), required=True)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument(
        "--procs",
        type=int,
        default=1,
        help="actors, each in a process of its own; above 1 each call goes to all of them "
        "(`call().get()`; the floor writes to each and waits for every answer)",
    )
    parser.add_argument(
        "--cpus",
        type=cpu_set,
        help="run on these CPUs only (comma-separated, or 'first': the first this process may "
        "use, CPU 0 as a rule; inherited by every process started)",
    )
    args = parser.parse_args()
    if args.cpus:
        os.sched_setaffinity(0, args.cpus)
    result = floor(args) if args.impl == "floor" else framework(args)
    log(f"{args.impl}: {result['latency'] * 1e6:.0f} us per call")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
