"""The runtime of one process: its control loop, its listener, its outboxes to
other processes, the actors it hosts and the ports it receives on.

The control loop only routes: it reads a message's msgpack header, forwards
casts down their multicast tree, hands actor messages to the actor's own
thread and replies to ports. Payloads are pickled and unpickled on the
threads of the callers and the actors, so a slow endpoint or a big argument
never stalls it.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import contextlib
import itertools
import logging
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from monarch_mesh import Branch, Shape
from monarch_transport import (
    Address,
    Listener,
    PeerLeft,
    Received,
    Sender,
    TransportError,
    connect,
    decode_header,
    default_listen_address,
    encode,
    encode_header,
    listen,
    new_event_loop,
    prefer_backend,
)

from ._config import cast_fanout
from ._errors import SupervisionError

if TYPE_CHECKING:
    from ._actor_host import ActorHost

__all__ = ["Runtime", "get_runtime", "maybe_runtime"]

log = logging.getLogger("monarch.actor.runtime")

Frames = Sequence[bytes | bytearray | memoryview]
PortHandler = Callable[[dict[str, Any], Frames], None]
UNKNOWN_ACTOR_GRACE = 10.0  # seconds a message waits for its actor's spawn message
EXIT_REPORT_GRACE = 1.0  # seconds a lost connection waits for its process's exit status


class PortEntry:
    """A receiving port: ``deliver`` gets each message, ``lost`` hears of a
    process that will not answer."""

    def __init__(self, deliver: PortHandler, lost: Callable[[str, str], None] | None) -> None:
        self.deliver = deliver
        self.lost = lost
        self.watching: set[str] = set()


class Outbox:
    """The ordered way out to one address. Messages posted during one turn of
    the loop leave together at its end (one system call for a burst of
    broadcasts or replies); they queue here while the connection is made and
    whenever the transport pushes back."""

    def __init__(self, runtime: Runtime, address: str) -> None:
        self.runtime = runtime
        self.address = address
        self.queue: collections.deque[Frames] = collections.deque()
        self.sender: Sender | None = None
        self.draining = False
        self.flushing = False
        self.failure: str | None = None

    def put(self, frames: Frames) -> None:
        if self.failure is not None:
            self.runtime.undeliverable(frames, self.address, self.failure)
            return
        self.queue.append(frames)
        if not self.draining and not self.flushing:
            self.flushing = True
            self.runtime.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self.flushing = False
        if self.draining or not self.queue or self.failure is not None:
            return
        if self.sender is not None:
            try:  # no task, no wait: the common case
                sent = self.sender.send_many_nowait(self.queue)
            except (TransportError, OSError) as error:
                self.fail(f"cannot reach {self.address}: {error}")
                return
            for _ in range(sent):
                self.queue.popleft()
            if not self.queue:
                return
        self.draining = True
        self.runtime.loop.create_task(self._drain())

    async def _drain(self) -> None:
        try:
            if self.sender is None:
                self.sender = await connect(self.address)
                self.runtime.loop.create_task(self._watch(self.sender))
            while self.queue:
                await self.sender.send(self.queue[0])
                self.queue.popleft()
        except (TransportError, OSError) as error:
            self.fail(f"cannot reach {self.address}: {error}")
        finally:
            self.draining = False

    async def _watch(self, sender: Sender) -> None:
        reason = await sender.wait_closed()
        if self.runtime.supervision.exit_will_be_reported(self.address):
            # a process started here: its exit status says more than a closed socket
            deadline = self.runtime.loop.time() + EXIT_REPORT_GRACE
            while self.failure is None and self.runtime.loop.time() < deadline:
                await asyncio.sleep(0.01)
        if not self.runtime.closing:
            self.fail(f"the connection to {self.address} was lost ({reason})")

    def fail(self, reason: str) -> None:
        if self.failure is None:
            self.failure = reason
            queued, self.queue = list(self.queue), collections.deque()
            for frames in queued:
                self.runtime.undeliverable(frames, self.address, reason)
            self.runtime.peer_lost(self.address, reason)


class Runtime:
    """Everything of this process that talks to other processes."""

    def __init__(self, loop: asyncio.AbstractEventLoop, listener: Listener, role: str) -> None:
        self.loop = loop
        self.listener = listener
        self.address = str(listener.address)
        self.role = role  # "controller" or "proc"
        self.thread_id = threading.get_ident()
        self.closing = False
        self.outboxes: dict[str, Outbox] = {}
        self.ports: dict[int, PortEntry] = {}
        self.port_ids = itertools.count(1)
        self.actors: dict[str, ActorHost] = {}
        self.gone: dict[str, str] = {}  # actors that stopped here, and why
        # messages for actors whose spawn has not arrived yet, by actor key
        self.waiting: dict[str, list[tuple[dict[str, Any], Frames]]] = {}
        self.handlers: dict[str, Callable[[dict[str, Any], Frames], None]] = {}
        self.fanout = cast_fanout()
        self.stopped = asyncio.Event()
        self.lost_hooks: list[Callable[[str, str], None]] = []
        self.tables: dict[str, Any] = {}  # proc meshes this process knows, by id
        self.root = self.address  # the controller's address (a proc learns it at start)
        self.owner = ""  # in a proc: the address of the process that started it
        self.thread: threading.Thread | None = None  # the controller's loop thread
        self.singletons: dict[str, Any] = {}  # get_or_spawn_controller, on the controller
        from ._supervise import Supervision

        self.supervision = Supervision(self)
        self.handlers["f"] = self.supervision.on_report
        self.handlers["h"] = self.supervision.beat

    # -- threads -------------------------------------------------------------------

    def on_loop(self) -> bool:
        return threading.get_ident() == self.thread_id

    def call_soon(self, fn: Callable[..., object], *args: Any) -> None:
        """Run ``fn(*args)`` on the control loop; calls from one thread keep their order."""
        if self.on_loop():
            fn(*args)
        else:
            self.loop.call_soon_threadsafe(fn, *args)

    def run_sync(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> Any:
        """Run ``fn(*args)`` on the control loop and wait for its result."""
        if self.on_loop():
            return fn(*args)
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            try:
                done.set_result(fn(*args))
            except BaseException as error:
                done.set_exception(error)

        self.loop.call_soon_threadsafe(run)
        return done.result(timeout)

    # -- sending ---------------------------------------------------------------------

    def post(self, address: str, frames: Frames) -> None:
        """Send one message (on the loop). To this process, it is dispatched at once."""
        if address == self.address:
            # the sender keeps its buffers: a local receiver gets copies, as a remote one would
            local = (
                [frames[0], frames[1], *(bytes(f) for f in frames[2:])]
                if len(frames) > 2
                else frames
            )
            self.loop.call_soon(self.dispatch, local)
            return
        if not address:  # a process of a mesh that failed to start
            self.undeliverable(frames, "a process", "the process never started")
            return
        outbox = self.outboxes.get(address)
        if outbox is None:
            outbox = self.outboxes[address] = Outbox(self, address)
        outbox.put(frames)

    def send(self, address: str, header: dict[str, Any], payload: object) -> None:
        """Encode on the calling thread, send from the loop."""
        frames = encode(payload, header)
        self.call_soon(self.post, address, frames)

    def cast(
        self, shape: Shape, addresses: list[str], header: dict[str, Any], frames: Frames
    ) -> None:
        """Send one message to every rank of ``shape`` down a multicast tree
        (on the loop). ``addresses[i]`` is where position ``i`` lives; the
        header says what to deliver. The sender is the tree's root: it sends
        to at most ``fanout`` subtrees, and each subtree's first rank
        delivers locally and forwards to its own children."""
        s = shape.ndslice
        header["s"] = [shape.labels, s.offset, s.sizes, s.strides]
        for branch in Branch(-1, len(addresses)).children(self.fanout):
            self._send_branch(header, frames, branch, addresses[branch.first : branch.stop])

    def _send_branch(
        self, header: dict[str, Any], frames: Frames, branch: Branch, addresses: Sequence[str]
    ) -> None:
        sub = dict(header)
        sub["b"] = [branch.first, branch.stop]
        sub["d"] = list(addresses)
        self.post(addresses[0], [encode_header(sub), *frames[1:]])

    def _forward(self, header: dict[str, Any], frames: Frames) -> None:
        first, stop = header["b"]
        addresses = header["d"]
        for child in Branch(first, stop).children(self.fanout):
            lo, hi = child.first - first, child.stop - first
            self._send_branch(header, frames, child, addresses[lo:hi])

    # -- ports -------------------------------------------------------------------------

    def open_port(
        self, deliver: PortHandler, lost: Callable[[str, str], None] | None = None
    ) -> int:
        pid = next(self.port_ids)
        self.ports[pid] = PortEntry(deliver, lost)
        return pid

    def close_port(self, pid: int) -> None:
        self.ports.pop(pid, None)

    def watch(self, pid: int, addresses: list[str]) -> None:
        """Tell port ``pid`` if any of ``addresses`` goes away before it is closed."""
        entry = self.ports.get(pid)
        if entry is not None and entry.lost is not None:
            entry.watching.update(addresses)
            for address in addresses:
                outbox = self.outboxes.get(address)
                if outbox is not None and outbox.failure is not None:
                    entry.lost(address, outbox.failure)

    def peer_lost(self, address: str, reason: str) -> None:
        self.supervision.peer_lost(address, reason)
        for hook in self.lost_hooks:
            hook(address, reason)
        for entry in list(self.ports.values()):
            if address in entry.watching and entry.lost is not None:
                entry.lost(address, reason)

    def undeliverable(self, frames: Frames, address: str, reason: str) -> None:
        """A message that cannot reach ``address``: whoever waits for its answer hears why."""
        try:
            header = decode_header(frames)
        except TransportError:
            return
        port = header.get("p")
        if port is not None and header.get("k") == "c":
            error = SupervisionError(
                f"Endpoint call {header.get('n', '?')}.{header.get('m', '?')}() failed: {reason}"
            )
            first, stop = header.get("b", [0, 1])
            for position in range(first, stop):
                self.send(port[0], {"k": "p", "pid": port[1], "r": position, "x": 1}, error)
        else:
            log.warning("dropped a message for %s: %s", address, reason)

    # -- receiving ----------------------------------------------------------------------

    def serve(self) -> None:
        """Handle every message the listener gets, as it arrives."""
        self.listener.deliver_to(self._on_event)

    def _on_event(self, event: Received | PeerLeft) -> None:
        if isinstance(event, Received):
            try:
                self.dispatch(event.frames)
            except Exception:
                log.exception("could not handle a message from %s", event.peer)
        # a PeerLeft needs nothing: senders notice a lost peer on their own connection

    def dispatch(self, frames: Frames) -> None:
        header = decode_header(frames)
        kind = header["k"]
        if kind == "p":
            entry = self.ports.get(header["pid"])
            if entry is None:
                log.debug("a message for closed port %s was dropped", header["pid"])
            else:
                entry.deliver(header, frames)
        elif kind == "c":
            if header["b"][1] - header["b"][0] > 1:
                self._forward(header, frames)
            self.deliver_to_actor(header, frames)
        else:
            self.handlers[kind](header, frames)

    def deliver_to_actor(self, header: dict[str, Any], frames: Frames) -> None:
        key = header["a"]
        host = self.actors.get(key)
        if host is not None:
            host.post(header, frames)
        elif header["op"] == "spawn":
            from ._actor_host import ActorHost

            self.actors[key] = host = ActorHost(self, header, frames)
            for early_header, early_frames in self.waiting.pop(key, []):
                host.post(early_header, early_frames)
        elif key in self.gone:
            self.undeliverable_here(
                header, frames, f"actor {header.get('n', key)} {self.gone[key]}"
            )
        else:
            # sent by a process that heard of the actor before its spawn reached us
            early = self.waiting.setdefault(key, [])
            if not early:
                self.loop.call_later(UNKNOWN_ACTOR_GRACE, self._give_up_on, key)
            early.append((header, frames))

    def _give_up_on(self, key: str) -> None:
        for header, frames in self.waiting.pop(key, []):
            self.undeliverable_here(
                header, frames, f"no actor {header.get('n', key)} in this process"
            )

    def undeliverable_here(self, header: dict[str, Any], frames: Frames, reason: str) -> None:
        one = dict(header)
        first = header["b"][0]
        one["b"] = [first, first + 1]
        self.undeliverable([encode_header(one), *frames[1:]], self.address, reason)

    # -- shutting down --------------------------------------------------------------------

    async def flush(self, timeout: float) -> None:
        """Wait until every outbox has handed its messages to the transport."""
        deadline = self.loop.time() + timeout
        while any(
            o.queue or o.draining or o.flushing for o in self.outboxes.values() if o.failure is None
        ):
            if self.loop.time() > deadline:
                return
            await asyncio.sleep(0.005)

    async def close(self) -> None:
        self.closing = True
        await self.flush(2.0)
        for outbox in self.outboxes.values():
            if outbox.sender is not None:
                with contextlib.suppress(TransportError, OSError, TimeoutError):
                    await asyncio.wait_for(outbox.sender.aclose(), 2.0)
        await self.listener.aclose()


# -- the process's runtime ------------------------------------------------------------------

JOB_DIR_ENV = "MONARCH_JOB_DIR"


_job_dir: str | None = None


def job_dir() -> str:
    """A folder of this job's own (Unix sockets live there), made by the
    controller and removed when it ends; its procs inherit it. A controller
    always makes its own, even when started by another job's process."""
    global _job_dir
    if _job_dir is None:
        _job_dir = os.environ[JOB_DIR_ENV] = tempfile.mkdtemp(prefix="monarch-job-")
        atexit.register(shutil.rmtree, _job_dir, True)
    return _job_dir


def join_job(folder: str) -> None:
    """In a proc: use the job folder of the controller that started it."""
    global _job_dir
    _job_dir = folder


def listen_address() -> Address:
    """Where this process listens: the configured kind; Unix sockets in the job's folder."""
    address = default_listen_address()
    if address.scheme == "ipc":
        name = os.path.basename(address.path or "") or f"{uuid.uuid4().hex[:16]}.sock"
        address = Address("ipc", path=os.path.join(job_dir(), name))
    return address


_runtime: Runtime | None = None
_lock = threading.Lock()


def maybe_runtime() -> Runtime | None:
    return _runtime


def install(runtime: Runtime) -> None:
    global _runtime
    _runtime = runtime


def get_runtime() -> Runtime:
    """This process's runtime; in a plain script, started on first use on a
    background thread (the controller)."""
    runtime = _runtime
    if runtime is not None:
        return runtime
    with _lock:
        if _runtime is None:
            _start_controller()
        assert _runtime is not None
        return _runtime


# The actor runtime's backend unless configured: measured on a 2-core machine,
# plain sockets carry a call_one round trip, a call to 8 actors and a
# broadcast far faster than pynng (docs/benchmarks.md); MONARCH_TRANSPORT=nng
# or enable_transport("nng") still choose nng.
RUNTIME_BACKEND = "socket"


def _start_controller() -> None:
    prefer_backend(RUNTIME_BACKEND)  # before the first listener; procs inherit it
    started: concurrent.futures.Future[Runtime] = concurrent.futures.Future()

    def main() -> None:
        loop = new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            listener = loop.run_until_complete(listen(listen_address()))
            runtime = Runtime(loop, listener, "controller")
            from ._controller import install_controller

            install_controller(runtime)
        except BaseException as error:
            started.set_exception(error)
            return
        started.set_result(runtime)
        loop.run_until_complete(_serve_until_stopped(runtime))

    thread = threading.Thread(target=main, name="monarch-control", daemon=True)
    thread.start()
    runtime = started.result(timeout=60)
    runtime.thread = thread
    install(runtime)


def stop_controller_loop(runtime: Runtime, timeout: float) -> None:
    """End the controller's control loop and wait for its thread: a loop
    left running while the interpreter shuts down may fire a timer into a
    finalized interpreter (a crash at exit)."""

    async def close() -> None:
        try:
            await runtime.close()
        finally:
            runtime.stopped.set()

    with contextlib.suppress(Exception):
        asyncio.run_coroutine_threadsafe(close(), runtime.loop).result(timeout)
    if runtime.thread is not None:
        runtime.thread.join(timeout)


async def _serve_until_stopped(runtime: Runtime) -> None:
    runtime.serve()
    await runtime.stopped.wait()
