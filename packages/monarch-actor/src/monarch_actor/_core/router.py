"""The router of one process: its control loop, its listener, its outboxes
to other processes and the ports it receives on. It knows nothing of
meshes, actors or supervision: the layers above register a handler for each
kind of message they own (``Runtime.handle``) and the services they keep per
process (``Runtime.provide``).

The control loop only routes: it reads a message's msgpack header, forwards
casts down their multicast tree, hands each message to its kind's handler
and values to ports. Payloads are pickled and unpickled on the threads of
the callers and the actors, so a slow endpoint or a big argument never
stalls it.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import itertools
import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from monarch_mesh import Branch, Shape, host_children
from monarch_transport import (
    HandshakeRefused,
    Listener,
    PeerLeft,
    Received,
    Sender,
    SharedHeader,
    TransportError,
    connect,
    decode_header,
    encode,
    encode_header,
)

from .config import cast_fanout, order_gap_wait
from .errors import SupervisionError
from .ordering import InOrder, Numbering
from .wire import Key, Kind, port_header

__all__ = ["Frames", "Handler", "Runtime"]

log = logging.getLogger("monarch.actor.runtime")

Frames = Sequence[bytes | bytearray | memoryview]
Handler = Callable[[dict[str, Any], Frames], None]
S = TypeVar("S")
# A thread sending again this soon after its last write is in a burst
# (pipelined calls): the loop then gathers the burst into few writes.
BURST_GAP = 50e-6  # seconds
# read once: a member of a StrEnum costs an attribute lookup on its class
_CALL, _SKIP = Kind.CALL, Kind.SKIP
_PER_BRANCH = frozenset(
    {Key.BRANCH, Key.DESTS, Key.SEQS}
)  # what each branch's header has of its own
# ... and what is not in the shared part either, though every branch has the
# same: a call's own reply port would make every shared part new, which its
# receivers would then unpack each time instead of once
_UNSHARED = _PER_BRANCH | {Key.REPLY_TO}
# a call whose payload is at most this many bytes goes straight to each of its
# ranks when they are few (see Runtime.cast)
DIRECT_CALL = 1 << 16
EXIT_REPORT_GRACE = 1.0  # seconds a lost connection waits for its process's exit status
HANG_UP_WAIT = 2.0  # seconds a stopping process gives each connection to hand over what is queued


class PortEntry:
    """A receiving port: ``deliver`` gets each message, ``lost`` hears of a
    process that will not answer."""

    def __init__(self, deliver: Handler, lost: Callable[[str, str], None] | None) -> None:
        self.deliver = deliver
        self.lost = lost
        self.watching: set[str] = set()


class Outbox:
    """The ordered way out to one address. Messages posted during one turn of
    the loop leave together at its end (one system call for a burst of
    broadcasts or replies); they queue here while the connection is made and
    whenever the transport pushes back.

    A thread other than the loop's (a caller, an actor) writes a message
    itself when the way is clear: connected, nothing queued, nothing on its
    way through the loop. That saves two thread hand-offs per message; the
    lock keeps its write and the loop's from interleaving, and the count of
    messages in transit keeps every thread's messages in order."""

    def __init__(self, runtime: Runtime, address: str) -> None:
        self.runtime = runtime
        self.address = address
        self.queue: collections.deque[Frames] = collections.deque()
        self.sender: Sender | None = None
        self.draining = False
        self.flushing = False
        self.failure: str | None = None
        self.lock = threading.Lock()
        self.in_transit = 0  # handed to the loop by other threads, not yet queued
        self.last_direct = 0.0  # when a thread last wrote here itself

    def from_thread(self, frames: Frames, batch: bool = False) -> None:
        """Send from a thread other than the loop's: at once if the way is
        clear, unless ``batch`` (then the loop sends it with whatever else
        it sends there this turn: a burst of broadcasts costs few writes)."""
        now = time.monotonic()
        with self.lock:
            if (
                not batch
                and now - self.last_direct > BURST_GAP
                and self.sender is not None
                and not self.queue
                and not self.in_transit
                and not self.draining
                and self.failure is None
                and self.sender.send_threadsafe(frames)
            ):
                self.last_direct = now
                return
            self.in_transit += 1
        self.runtime.hand_to_loop(self, frames)

    def put(self, frames: Frames, handed: bool = False) -> None:
        """Queue ``frames`` to go at the end of this turn of the loop (on the
        loop; ``handed``: another thread handed them over, see ``from_thread``)."""
        with self.lock:
            if handed:
                self.in_transit -= 1
            failure = self.failure
            if failure is None:
                self.queue.append(frames)
        if failure is not None:
            self.runtime.undeliverable(frames, self.address, failure)
        elif not self.draining and not self.flushing:
            self.flushing = True
            self.runtime.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self.flushing = False
        if self.draining or not self.queue or self.failure is not None:
            return
        if self.sender is not None:
            with self.lock:
                try:  # no task, no wait: the common case
                    sent = self.sender.send_many_nowait(self.queue)
                except (TransportError, OSError) as error:
                    sent = -1
                    problem = error
                else:
                    for _ in range(sent):
                        self.queue.popleft()
            if sent < 0:
                self.draining = True  # nothing more goes out meanwhile
                self.runtime.loop.create_task(self._lost(f"cannot reach {self.address}: {problem}"))
                return
            if not self.queue:
                return
        self.draining = True
        self.runtime.loop.create_task(self._drain())

    async def _drain(self) -> None:
        try:
            if self.sender is None:
                try:
                    self.sender = await connect(self.address)
                except HandshakeRefused as error:
                    # not a peer that is not up yet, nor a handshake cut short by a busy
                    # machine: one that will not have us (another job's secret), so
                    # whoever waits for it is told so, not left retrying
                    self.runtime.refused[self.address] = str(error)
                    self.fail(f"the handshake with {self.address} failed: {error}")
                    return
                self.runtime.loop.create_task(self._watch(self.sender))
            while self.queue:
                await self.sender.send(self.queue[0])
                with self.lock:
                    self.queue.popleft()
        except (TransportError, OSError) as error:
            await self._lost(f"cannot reach {self.address}: {error}")
        except Exception as error:  # a bug below: said loudly, and nobody is left waiting
            log.exception("sending to %s failed unexpectedly", self.address)
            self.fail(f"cannot reach {self.address}: {type(error).__name__}: {error}")
        finally:
            self.draining = False

    async def _lost(self, reason: str) -> None:
        """The connection broke while sending: fail with ``reason``, but a
        process started here first gets a moment to report its exit, whose
        status (a signal, an exit code) says more than a broken socket."""
        try:
            await self._exit_reported()
            self.fail(reason)  # nothing, if the exit report failed it first
        finally:
            self.draining = False

    async def _exit_reported(self) -> None:
        """Until this outbox failed, for at most ``EXIT_REPORT_GRACE``, where
        the peer's exit will be reported (a process started here)."""
        if self.runtime.exit_will_be_reported(self.address):
            deadline = self.runtime.loop.time() + EXIT_REPORT_GRACE
            while self.failure is None and self.runtime.loop.time() < deadline:
                await asyncio.sleep(0.01)

    async def _watch(self, sender: Sender) -> None:
        reason = await sender.wait_closed()
        await self._exit_reported()
        if not self.runtime.closing:
            self.fail(f"the connection to {self.address} was lost ({reason})")

    def fail(self, reason: str) -> None:
        if self.failure is None:
            with self.lock:
                self.failure = reason
                queued, self.queue = list(self.queue), collections.deque()
            for frames in queued:
                self.runtime.undeliverable(frames, self.address, reason)
            self.runtime.peer_lost(self.address, reason)


def _payload_size(frames: Frames) -> int:
    """The bytes of a message after its header."""
    return sum(f.nbytes if type(f) is memoryview else len(f) for f in frames[1:])


def _host_of(address: str, own: str) -> str:
    """The host of ``address``; "" for this one (``own``, or a Unix socket)."""
    scheme, _, rest = address.partition("://")
    if scheme not in ("tcp", "tls+tcp"):
        return ""
    host = rest.rpartition(":")[0]
    return "" if host == own else host


async def _hang_up(sender: Sender, silent: bool) -> None:
    """Close one connection when the process stops, giving up after
    ``HANG_UP_WAIT`` on a peer that does not take what is queued; a
    ``silent`` peer's (declared lost) is cut at once."""
    with contextlib.suppress(TransportError, OSError, TimeoutError):
        if silent:
            await sender.abort("this process is stopping, and the peer was declared lost")
        else:
            await asyncio.wait_for(sender.aclose(), HANG_UP_WAIT)


class Runtime:
    """Everything of this process that talks to other processes."""

    def __init__(self, loop: asyncio.AbstractEventLoop, listener: Listener, role: str) -> None:
        self.loop = loop
        self.listener = listener
        self.address = str(listener.address)
        self.aliases: set[str] = set()  # other addresses this process listens at
        self.listeners = [listener]
        self.role = role  # "controller", "proc" or "worker"
        self.thread_id = threading.get_ident()
        self.closing = False
        self.outboxes: dict[str, Outbox] = {}
        # messages other threads handed to the loop, taken in one callback per
        # burst (a broadcast hands one per branch; pipelined calls one each)
        self._handed: collections.deque[tuple[Outbox, Frames]] = collections.deque()
        self._handed_lock = threading.Lock()
        self._handed_due = False  # a _take_handed is scheduled
        # peers whose handshake failed (address -> why): a wrong secret, not a slow start
        self.refused: dict[str, str] = {}
        # peers declared lost whose connection is kept (a silent host's, to take
        # its orphans' kills should it come back): closing cuts them, for a
        # goodbye would wait out an answer that cannot come
        self.silent: set[str] = set()
        self.ports: dict[int, PortEntry] = {}
        self.port_ids = itertools.count(1)
        self.handlers: dict[str, Handler] = {Kind.PORT: self._to_port}
        self.services: dict[type[Any], Any] = {}
        self.fanout = cast_fanout()
        # actor messages are numbered per (address, actor), so that one sent
        # straight to a process cannot overtake one still in a multicast tree
        self.origin = secrets.token_hex(8)
        self.numbering = Numbering()
        self.in_order = InOrder(self._deliver_call, loop.call_later, order_gap_wait())
        self._host_keys: dict[tuple[str, ...], list[str] | None] = {}
        # (start, count, fanout) -> the plain tree's children (read only: shared by every call)
        self._plain_children: dict[tuple[int, int, int], list[Branch]] = {}
        self.stopped = asyncio.Event()
        # told (on the loop) of every peer whose connection broke: (address, reason)
        self.lost_hooks: list[Callable[[str, str], None]] = []
        # whether a lost peer's exit status will be reported (then it is waited for)
        self.exit_reporters: list[Callable[[str], bool]] = []
        self.root = self.address  # the controller's address (a proc learns it at start)
        self.owner = ""  # in a proc: the address of the process that started it
        self.thread: threading.Thread | None = None  # the controller's loop thread

    # -- what the layers above register --------------------------------------------------

    def handle(self, kind: Kind, handler: Handler) -> None:
        """Messages of ``kind`` go to ``handler(header, frames)``, on the loop.
        ``Kind.CALL`` messages are forwarded down their tree first."""
        self.handlers[kind] = handler
        if kind == Kind.CALL:
            self.in_order.deliver = handler  # in order, then straight to it

    def provide(self, service: S) -> S:
        """Keep ``service`` as this process's one instance of its class."""
        self.services[type(service)] = service
        return service

    def get(self, cls: type[S]) -> S:
        """This process's instance of ``cls`` (``provide``d by the layer that owns it)."""
        try:
            return self.services[cls]  # type: ignore[no-any-return]
        except KeyError:
            raise RuntimeError(
                f"this process's runtime has no {cls.__name__}: the runtime was not started "
                "through monarch_actor (a bug)"
            ) from None

    def exit_will_be_reported(self, address: str) -> bool:
        return any(reporter(address) for reporter in self.exit_reporters)

    # -- threads -------------------------------------------------------------------

    def on_loop(self) -> bool:
        return threading.get_ident() == self.thread_id

    def call_soon(self, fn: Callable[..., object], *args: Any) -> None:
        """Run ``fn(*args)`` on the control loop; calls from one thread keep their order."""
        if self.on_loop():
            fn(*args)
        else:
            self.loop.call_soon_threadsafe(fn, *args)

    def hand_to_loop(self, outbox: Outbox, frames: Frames) -> None:
        """Queue ``frames`` for ``outbox`` from another thread: the loop takes
        what was handed in order, many messages per wake-up."""
        with self._handed_lock:
            self._handed.append((outbox, frames))
            if self._handed_due:
                return
            self._handed_due = True
        try:
            self.loop.call_soon_threadsafe(self._take_handed)
        except BaseException:  # the loop is closed: the next message tries again
            with self._handed_lock:
                self._handed_due = False
            raise

    def _take_handed(self) -> None:
        with self._handed_lock:
            handed, self._handed = self._handed, collections.deque()
            self._handed_due = False
        for outbox, frames in handed:
            outbox.put(frames, handed=True)

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
        """Send one message (on the loop). To this process, it is dispatched soon."""
        if address == self.address or address in self.aliases:
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
        if outbox is None:  # setdefault: another thread may be making it too
            outbox = self.outboxes.setdefault(address, Outbox(self, address))
        outbox.put(frames)

    def send(self, address: str, header: dict[str, Any], payload: object) -> None:
        """Encode on the calling thread and send: from this thread when the
        connection is idle, else through the loop (in order either way).

        To another process of this host, CUDA tensors in ``payload`` may travel
        as CUDA IPC handles (see ``monarch_transport.encode``'s ``same_host``)."""
        same_host = functools.partial(self.same_host_peer, address)  # asked for CUDA tensors only
        self.send_frames(address, encode(payload, header, same_host=same_host))

    def same_host_peer(self, address: str) -> bool:
        """Whether ``address`` is another process on this host: a Unix socket,
        or TCP on this process's own host (never this process itself, whose
        messages to itself are copied rather than sent, nor an ``inproc://``
        address, which lives in this process too)."""
        if not address or address == self.address or address in self.aliases:
            return False
        if address.startswith("inproc://"):
            return False
        return _host_of(address, self._own_host) == ""

    def send_frames(self, address: str, frames: Frames, batch: bool = False) -> None:
        """Send an encoded message from any thread, in order (``batch``: no
        hurry, see ``Outbox.from_thread``)."""
        if self.on_loop():
            self.post(address, frames)
        elif address == self.address or not address or address in self.aliases:
            self.loop.call_soon_threadsafe(self.post, address, frames)
        else:
            outbox = self.outboxes.get(address)
            if outbox is None:  # made here, so this thread's next messages queue behind this one
                outbox = self.outboxes.setdefault(address, Outbox(self, address))
            outbox.from_thread(frames, batch)

    def cast(
        self,
        shape: Shape,
        addresses: list[str],
        header: dict[str, Any],
        frames: Frames,
        batch: bool = False,
    ) -> None:
        """Send one message to every rank of ``shape`` down a multicast tree
        (from any thread). ``addresses[i]`` is where position ``i`` lives; the
        header says what to deliver. The sender is the tree's root: it sends
        to at most ``fanout`` subtrees, and each subtree's first rank
        delivers locally and forwards to its own children.

        A small call (not ``batch``) to at most ``fanout`` ranks goes
        straight to each of them, on other hosts too: its answers are
        waited for, and a forward would put a whole hop before the answers
        of each host's other processes (it also costs more CPU than the
        caller's extra writes). Broadcasts and large arguments take the
        host-aware tree, which crosses each host boundary once."""
        s = shape.ndslice
        header[Key.SHAPE] = [shape.labels, s.offset, s.sizes, s.strides]
        header[Key.ORIGIN] = self.origin
        seqs = self.numbering.take(addresses, header[Key.ACTOR])
        if not batch and len(addresses) <= self.fanout and _payload_size(frames) <= DIRECT_CALL:
            children = self._plain(0, len(addresses))
        else:
            children = self._children(0, addresses)
        self._send_branches(header, frames, children, 0, addresses, seqs, batch)

    def _children(self, start: int, addresses: Sequence[str]) -> list[Branch]:
        """Where a message for ``addresses`` (positions ``start`` on) goes
        from here: down the plain tree, except that each other host's run of
        positions is entered once (``host_children``)."""
        hosts = self._hosts_of(addresses)
        if hosts is None:  # one host throughout
            return self._plain(start, len(addresses))
        return host_children(start, hosts, "", self.fanout)

    def _plain(self, start: int, count: int) -> list[Branch]:
        """The plain tree's children for ``count`` positions from ``start``
        (the same for every message: kept, and shared read-only)."""
        key = (start, count, self.fanout)
        children = self._plain_children.get(key)
        if children is None:
            children = Branch(start - 1, start + count).children(self.fanout)
            if len(self._plain_children) > 1024:
                self._plain_children.clear()
            self._plain_children[key] = children
        return children

    def _hosts_of(self, addresses: Sequence[str]) -> list[str] | None:
        """The host of each address ("" for this one), or None if all are here."""
        key = tuple(addresses)
        if key in self._host_keys:
            return self._host_keys[key]
        own = self._own_host
        hosts = [_host_of(a, own) for a in addresses]
        found = None if not any(hosts) else hosts
        if len(self._host_keys) > 1024:
            self._host_keys.clear()
        self._host_keys[key] = found
        return found

    def _send_branches(
        self,
        header: dict[str, Any],
        frames: Frames,
        children: list[Branch],
        first: int,
        addresses: Sequence[str],
        seqs: Sequence[int],
        batch: bool = False,
        received: bool = False,
    ) -> None:
        """Send the message down each of ``children``; ``addresses`` and
        ``seqs`` are those of positions ``first`` on. A ``received`` header
        (being forwarded) is left as it is; the root's own is this branch's
        header when there is one branch."""
        payload = frames[1:]
        if len(children) == 1 and not received:
            branch = children[0]
            lo, hi = branch.first - first, branch.stop - first
            header[Key.BRANCH] = [branch.first, branch.stop]
            header[Key.DESTS] = list(addresses[lo:hi])
            header[Key.SEQS] = list(seqs[lo:hi])
            self.send_frames(addresses[lo], [encode_header(header), *payload], batch)
            return
        # the entries every branch shares are packed once
        shared = SharedHeader({k: v for k, v in header.items() if k not in _UNSHARED})
        reply_to = header.get(Key.REPLY_TO)
        for branch in children:
            lo, hi = branch.first - first, branch.stop - first
            own = {
                Key.BRANCH: [branch.first, branch.stop],
                Key.DESTS: list(addresses[lo:hi]),
                Key.SEQS: list(seqs[lo:hi]),
            }
            if reply_to is not None:
                own[Key.REPLY_TO] = reply_to
            self.send_frames(addresses[lo], [shared.frame(own), *payload], batch)

    def _forward(self, header: dict[str, Any], frames: Frames) -> None:
        first = header[Key.BRANCH][0]
        addresses, seqs = header[Key.DESTS], header[Key.SEQS]
        children = self._children(first + 1, addresses[1:])
        if children:
            self._send_branches(header, frames, children, first, addresses, seqs, received=True)

    # -- ports -------------------------------------------------------------------------

    def open_port(self, deliver: Handler, lost: Callable[[str, str], None] | None = None) -> int:
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

    def new_peer(self, address: str) -> None:
        """A process that has just started listens at ``address`` (on the
        loop): a connection still held there, failed or not, is to an earlier
        process that had the same address (a reused port) and goes, and the
        numbering of messages to it starts anew."""
        self.silent.discard(address)
        outbox = self.outboxes.pop(address, None)
        if outbox is not None:
            outbox.fail(f"the process at {address} is gone (another one listens there now)")
            if outbox.sender is not None:
                self.loop.create_task(outbox.sender.aclose())
        self.numbering.forget(address)

    def reset_peer(self, address: str) -> None:
        """Forget a failed connection to ``address``, so the next message
        dials anew (a worker that was not up yet, or has restarted)."""
        outbox = self.outboxes.get(address)
        if outbox is not None and outbox.failure is not None:
            del self.outboxes[address]

    def peer_gone(self, address: str, reason: str) -> None:
        """``address`` will never answer (its process exited or was declared
        dead; on the loop): what is queued for it and whoever waits for it
        fail with ``reason``."""
        outbox = self.outboxes.get(address)
        if outbox is not None and outbox.failure is None:
            outbox.fail(reason)  # tells everyone through peer_lost
        else:
            self.peer_lost(address, reason)
        if outbox is not None and outbox.sender is not None:
            # a connection still up (to a host gone silent, say) is dropped
            # now: a goodbye at exit would only wait for its answer
            self.loop.create_task(outbox.sender.abort(reason))

    def peer_lost(self, address: str, reason: str) -> None:
        self.numbering.forget(address)
        for hook in self.lost_hooks:
            hook(address, reason)
        for entry in list(self.ports.values()):
            if address in entry.watching and entry.lost is not None:
                entry.lost(address, reason)

    def undeliverable(self, frames: Frames, address: str, reason: str, loud: bool = False) -> None:
        """A message that cannot reach ``address``: whoever waits for its answer
        hears why. One nobody waits for (a broadcast, a reply, log lines) is
        dropped quietly, for its peer is gone, which supervision reports once
        (a job ending with broadcasts in flight printed hundreds of lines);
        ``loud`` says it anyway, for a drop that is nobody's failure but a
        mistake (a message for an actor this process never had)."""
        try:
            header = decode_header(frames)
        except TransportError:
            return
        if header.get(Key.KIND) == Kind.CALL:
            self._skip_branch(header)
        port = header.get(Key.REPLY_TO)
        if port is not None and header.get(Key.KIND) == Kind.CALL:
            error = SupervisionError(
                f"Endpoint call {header.get(Key.NAME, '?')}.{header.get(Key.METHOD, '?')}() "
                f"failed: {reason}"
            )
            first, stop = header.get(Key.BRANCH, [0, 1])
            for position in range(first, stop):
                self.send(port[0], port_header(port[1], position, failed=True), error)
        elif header.get(Key.KIND) == Kind.HOST:
            log.debug("a host request for %s was not delivered: %s", address, reason)
        else:
            (log.warning if loud else log.debug)("dropped a message for %s: %s", address, reason)

    def _skip_branch(self, header: dict[str, Any]) -> None:
        """A message for a branch could not reach its first process: the rest
        of the branch will not get it either, and must not wait for it."""
        for address, n in zip(header[Key.DESTS][1:], header[Key.SEQS][1:], strict=True):
            if address:
                skip = {
                    Key.KIND: Kind.SKIP,
                    Key.ORIGIN: header[Key.ORIGIN],
                    Key.ACTOR: header[Key.ACTOR],
                    Key.DESTS: [address],
                    Key.SEQS: [n],
                }
                self.send(address, skip, None)

    # -- receiving ----------------------------------------------------------------------

    def serve(self) -> None:
        """Handle every message the listener gets, as it arrives."""
        self.listener.deliver_to(self._on_event)

    @property
    def _own_host(self) -> str:
        scheme, _, rest = self.address.partition("://")
        return rest.rpartition(":")[0] if scheme in ("tcp", "tls+tcp") else ""

    def listen_also(self, listener: Listener) -> None:
        """Listen at a second address, reachable from other hosts (on the
        loop): it becomes this process's address, for everything sent from
        now on; the first one stays in ``aliases`` for those who know it."""
        self.aliases.add(self.address)
        self._host_keys.clear()
        self.listeners.append(listener)
        self.address = str(listener.address)
        if self.role == "controller":
            self.root = self.address
        listener.deliver_to(self._on_event)

    def _on_event(self, event: Received | PeerLeft) -> None:
        if isinstance(event, Received):
            try:
                self.dispatch(event.frames)
            except Exception:
                log.exception("could not handle a message from %s", event.peer)
        # a PeerLeft needs nothing: senders notice a lost peer on their own connection

    def dispatch(self, frames: Frames) -> None:
        header = decode_header(frames)
        kind = header[Key.KIND]
        if kind == _CALL:
            first, stop = header[Key.BRANCH]
            if stop - first > 1:
                self._forward(header, frames)
            stream = (header[Key.ORIGIN], header[Key.DESTS][0], header[Key.ACTOR])
            self.in_order.arrive(stream, header[Key.SEQS][0], header, frames)
            return
        if kind == _SKIP:
            stream = (header[Key.ORIGIN], header[Key.DESTS][0], header[Key.ACTOR])
            self.in_order.skip(stream, header[Key.SEQS][0])
            return
        handler = self.handlers.get(kind)
        if handler is None:
            log.warning("dropped a message of unknown kind %r", kind)
        else:
            handler(header, frames)

    def _deliver_call(self, header: dict[str, Any], frames: Frames) -> None:
        handler = self.handlers.get(Kind.CALL)
        if handler is None:
            log.warning("dropped an actor message: this process hosts no actors")
        else:
            handler(header, frames)

    def _to_port(self, header: dict[str, Any], frames: Frames) -> None:
        entry = self.ports.get(header[Key.PORT_ID])
        if entry is None:
            log.debug("a message for closed port %s was dropped", header[Key.PORT_ID])
        else:
            entry.deliver(header, frames)

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
        # every connection hangs up at once: peers that do not answer cost one
        # wait between them, not one each (16 hosts cut off would hold an exit 32 s)
        await asyncio.gather(
            *(
                _hang_up(o.sender, address in self.silent)
                for address, o in self.outboxes.items()
                if o.sender is not None
            )
        )
        for listener in self.listeners:
            await listener.aclose()
