"""Output of procs. Each proc's stdout and stderr go through a pipe read by a
thread of the proc: by default the lines go on to the terminal it inherited
(as in Monarch, where children share the controller's terminal); once the
owner asks for streaming (``ProcMesh.logging_option(stream_to_client=True)``)
they travel to the owner instead, tagged with the proc's rank. Each proc mesh
has its own streaming options: with an aggregation window, identical lines
said within it (by any of the mesh's ranks, any number of times) are shown
once, with how many there were, as Monarch's ``[N similar log lines]``."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import struct
import sys
import termios
import threading
from collections import OrderedDict
from typing import Any

from .._core.config import prefix_with_rank
from .._core.process import get_runtime
from .._core.router import Runtime
from .._core.wire import Key, Kind

__all__ = [
    "capture_output",
    "configure_streaming",
    "drain_output",
    "flush_lines",
    "release_output",
    "set_forwarding",
    "show_lines",
]

_forward = threading.Event()


def set_log_mode(mode: Any) -> None:
    """A proc's answer to ``logging_option``: ``[stream, level]``; the level is
    the proc's root logger's, as in Monarch."""
    stream, level = mode
    set_forwarding(bool(stream))
    logging.getLogger().setLevel(int(level))


def set_forwarding(on: bool) -> None:
    if on:
        _forward.set()
    else:
        _forward.clear()


def capture_output(runtime: Runtime, owner: str, mesh: str, rank: int, name: str) -> None:
    """Route this process's fd 1 and 2 through pipes read by pump threads
    (rank ``rank`` of proc mesh ``mesh``, whose owner is ``owner``)."""
    for stream, fd in ((sys.stdout, 1), (sys.stderr, 2)):
        stream.flush()
        read, write = os.pipe()
        original = os.dup(fd)
        os.dup2(write, fd)
        os.close(write)
        pump = threading.Thread(
            target=_pump,
            args=(
                runtime,
                owner,
                {Key.KIND: Kind.LOGS, Key.MESH: mesh, Key.RANK: rank, Key.PROC: name, Key.FD: fd},
                read,
                original,
            ),
            daemon=True,
            name=f"monarch-output-{fd}",
        )
        pump.start()
        _captured.append((fd, original, pump))
        _reads.append(read)
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)


_captured: list[tuple[int, int, threading.Thread]] = []
_reads: list[int] = []  # the pipes' read ends, for drain_output
_busy = [0]  # pumps between reading a chunk and handing it on (under _busy_lock)
_busy_lock = threading.Lock()


async def drain_output(timeout: float = 1.0) -> None:
    """Wait (at most ``timeout``) until the pumps have handed on what this
    process has written so far: a proc that streams its output to its owner
    calls this before it answers a stop, so that its last lines reach the
    owner before the owner hears it stopped."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    if not _forward.is_set() or not _reads:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    idle = 0  # two looks in a row, a few ms apart: a chunk just read is not missed
    while idle < 2 and loop.time() < deadline:
        idle = 0 if _busy[0] or any(_unread(fd) for fd in _reads) else idle + 1
        await asyncio.sleep(0.005)


def _unread(fd: int) -> int:
    try:
        return int(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0])
    except OSError:
        return 0


def release_output(timeout: float = 1.0) -> None:
    """Give fd 1 and 2 back to what they were and let the pumps pass on
    what they still hold: a proc about to exit calls this, so its last
    words are not lost with its daemon threads."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    captured, _captured[:] = list(_captured), []
    _reads.clear()
    for fd, original, _pump_thread in captured:
        os.dup2(original, fd)  # the pipe's last writer is gone: its pump reads to the end
    for _fd, _original, pump_thread in captured:
        pump_thread.join(timeout)


def _pump(runtime: Runtime, owner: str, header: dict[str, Any], read: int, original: int) -> None:
    partial = b""
    while True:
        try:
            data = os.read(read, 1 << 16)
        except OSError:
            return
        if not data:
            return
        if not _forward.is_set():
            os.write(original, data)
            continue
        with _busy_lock:
            _busy[0] += 1
        try:
            data = partial + data
            *lines, partial = data.split(b"\n")
            if lines:
                text = [line.decode(errors="replace") for line in lines]
                runtime.send(owner, header, text)
        finally:
            with _busy_lock:
                _busy[0] -= 1


# -- the owner's side ---------------------------------------------------------------------


class _Aggregator:
    """The lines of one proc mesh, on their way to this process's terminal."""

    def __init__(self) -> None:
        self.window: float | None = None  # seconds; None: every line as it comes
        self.lines: OrderedDict[tuple[int, str], list[int]] = OrderedDict()  # -> [count, rank]
        self.lock = threading.Lock()
        self.timer: threading.Timer | None = None

    def add(self, fd: int, rank: int, proc: str, lines: list[str]) -> None:
        out = sys.stdout if fd == 1 else sys.stderr
        if self.window is None:
            if prefix_with_rank():
                host = os.uname().nodename
                out.write("".join(f"[{host} {proc}] [{rank}] {line}\n" for line in lines))
            else:
                out.write("".join(f"{line}\n" for line in lines))
            out.flush()
            return
        with self.lock:
            for line in lines:
                self.lines.setdefault((fd, line), [0, rank])[0] += 1
            if self.timer is None:
                self.timer = threading.Timer(self.window, self.flush)
                self.timer.daemon = True
                self.timer.start()

    def flush(self) -> None:
        with self.lock:
            lines, self.lines, timer, self.timer = self.lines, OrderedDict(), self.timer, None
        if timer is not None and timer is not threading.current_thread():
            timer.cancel()
        for (fd, line), (count, rank) in lines.items():
            out = sys.stdout if fd == 1 else sys.stderr
            if count > 1:
                out.write(f"[{count} similar log lines] {line}\n")
            elif prefix_with_rank():
                out.write(f"[{rank}] {line}\n")
            else:
                out.write(f"{line}\n")
            out.flush()


_aggregators: dict[str, _Aggregator] = {}  # by proc mesh
_aggregators_lock = threading.Lock()


def _aggregator(mesh: str) -> _Aggregator:
    with _aggregators_lock:
        found = _aggregators.get(mesh)
        if found is None:
            found = _aggregators[mesh] = _Aggregator()
        return found


def flush_lines() -> None:
    """Show now the lines held for the current aggregation windows (the
    owner calls this once procs stopped, and at exit): a window's timer is a
    daemon thread, which an ending script would not wait for."""
    with _aggregators_lock:
        held = list(_aggregators.values())
    for aggregator in held:
        aggregator.flush()


def show_lines(header: dict[str, Any], lines: Any) -> None:
    aggregator = _aggregator(str(header.get(Key.MESH)))
    aggregator.add(header[Key.FD], header[Key.RANK], header.get(Key.PROC, "?"), list(lines))


async def configure_streaming(mesh: Any, stream: bool, window: int | None, level: int) -> None:
    if window is not None and (
        isinstance(window, bool) or not isinstance(window, int | float) or window < 0
    ):
        raise ValueError(f"aggregate_window_sec must be a number of seconds >= 0, got {window!r}")
    table = mesh._table
    aggregator = _aggregator(str(table.id))
    aggregator.flush()  # what the old window holds, before the new one starts
    aggregator.window = float(window) if window else None
    runtime = get_runtime()
    done = asyncio.get_running_loop().create_future()
    ranks = list(mesh._shape.ndslice)
    caller = asyncio.get_running_loop()

    def go() -> None:
        for rank in ranks:
            address = table.addresses[rank]
            if address:
                runtime.send(address, {Key.KIND: Kind.LOG_MODE}, [stream, level])
        caller.call_soon_threadsafe(_finish, done)

    runtime.call_soon(table.when_ready, go)
    await done


def _finish(done: Any) -> None:
    if not done.done():
        done.set_result(None)
