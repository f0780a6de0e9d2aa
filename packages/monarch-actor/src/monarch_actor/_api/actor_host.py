"""One actor in this process: its own thread, its mailbox, and the handling of
each message (spawn, endpoint call, stop) one at a time, in arrival order.

A sync actor runs its endpoints on its thread; an async actor runs an event
loop on its thread and its endpoints on that loop. Either way the process's
control loop only drops messages into the mailbox.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import inspect
import logging
import queue
import threading
import traceback
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import cloudpickle  # type: ignore[import-untyped]

from monarch_mesh import Extent, Point, Shape, Slice
from monarch_supervision import ROOT, Delivery, MeshFailure, root_cause
from monarch_transport import DecodeError, EncodeError, decode, decode_payload, new_event_loop

from .._core.config import cleanup_timeout, stop_actor_timeout
from .._core.current import reset_current, set_current
from .._core.errors import ActorError, SupervisionError
from .._core.extensions import extension
from .._core.lifecycle import ActorFailed, ActorStarted, ActorStopped, emit
from .._core.ports import Port
from .._core.router import Frames, Runtime
from .._core.threads import take_ctrl_c_too
from .._core.wire import Key, Op, port_header
from .._procs.table import ProcTables
from .._supervision.supervise import Supervision
from .._supervision.wording import actor_failed, actor_stopped, call_failed
from .actor import EndpointProperty, endpoints_of
from .actor_stats import ActorStats
from .context import Context, Instance
from .creator import ROOT_CREATOR
from .local_actors import LocalActors
from .mesh import ProcMesh

__all__ = ["ActorHost", "message_point", "setup_failure"]

log = logging.getLogger("monarch.actor")
_STOP = object()
# read once: a member of a StrEnum costs an attribute lookup on its class
_SPAWN_OP, _STOP_OP = Op.SPAWN, Op.STOP


def message_point(header: dict[str, Any]) -> Point:
    labels, _offset, sizes, _strides = header[Key.SHAPE]
    return Point(header[Key.BRANCH][0], Extent(labels, sizes))


def remote_traceback(error: BaseException) -> str:
    lines = traceback.format_exception(error)
    header = "Traceback of where the remote call failed (most recent call last):\n"
    if lines[0].startswith("Traceback"):
        lines[0] = header
    else:  # raised here, not thrown through frames: no traceback of its own
        lines.insert(0, header)
    return "".join(lines)


class ActorHost:
    """One actor of this process, started by its spawn message."""

    def __init__(self, runtime: Runtime, header: dict[str, Any], frames: Frames) -> None:
        self.runtime = runtime
        self.supervision = Supervision.of(runtime)
        self.key: str = header[Key.ACTOR]
        self.name: str = header[Key.NAME]
        self.owner: str = header[Key.OWNER]  # the owner's process
        self.owner_actor: str = header.get(Key.OWNER_ACTOR, ROOT)  # the owner's actor there
        self.rank = message_point(header)
        self.is_async: bool = header[Key.ASYNC]
        self.instance: Any = None
        self.me: Instance | None = None
        self.endpoints: dict[str, EndpointProperty[..., Any]] = {}
        self.failure: str | None = None
        # what its callers hear of when it failed on a child's failure it did not
        # handle: the actor that failed first, and why (as in Monarch)
        self.failure_root: MeshFailure | None = None
        self.stopped: str | None = None
        self.requested: tuple[str, str] | None = None  # ("stop" | "abort", reason)
        self.cleaned = False  # __cleanup__ ran (it runs once, on stop or on failure)
        self.constructed = False  # its __init__ returned
        self._stopping = threading.Lock()  # the thread and the control loop may both stop it
        self.tasks: set[asyncio.Task[Any]] = set()
        # calls of an async actor whose caller awaits an answer not yet sent: if the
        # actor fails meanwhile, they are answered with its failure at once
        self.open_calls: dict[int, dict[str, Any]] = {}
        self.stats = ActorStats()
        if self.is_async:
            # its post_urgent work, queued (from any thread, under the lock) and
            # started (on its loop): the loop takes no message while one is behind
            self.urgent_posted = self.urgent_started = 0
            self._posting = threading.Lock()
            self.loop = new_event_loop()
            self.mailbox: asyncio.Queue[Any] = asyncio.Queue()
            target, thread_name = self._run_async, "monarch-actor-event-loop"
        else:
            self.inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
            # work that goes before the next queued message (supervision, failing)
            self.urgent: collections.deque[tuple[Callable[..., Any], tuple[Any, ...]]] = (
                collections.deque()
            )
            target, thread_name = self._run_sync, "monarch-actor-driver"
            # set (on the control loop) once the failed actor's thread has ended:
            # the loop then answers its messages itself
            self.thread_gone = False
        self.post(header, frames)
        self.thread = threading.Thread(target=target, name=thread_name, daemon=True)
        self.thread.start()

    def join(self, timeout: float) -> None:
        """Wait for the actor's thread to end."""
        self.thread.join(timeout)

    def busy(self) -> bool:
        """Whether a message runs or waits here: a stop would wait behind it."""
        if self.stats.current:
            return True
        if self.is_async:
            return not self.mailbox.empty() or bool(self.tasks)
        return not self.thread_gone and not self.inbox.empty()

    def post(self, header: dict[str, Any], frames: Frames) -> None:
        """Queue one message (from the control loop)."""
        if header.get(Key.OP) == _STOP_OP:
            why = header.get(Key.WHY) or "stopped by client"
            self.runtime.loop.call_later(stop_actor_timeout(), self._stop_overdue, header, why)
        if self.is_async:
            self.loop.call_soon_threadsafe(self.mailbox.put_nowait, (header, frames))
        elif self.thread_gone:
            self._step(header, frames)  # failed and cleaned up: only answers are left
        else:
            self.inbox.put((header, frames))

    # -- the actor's thread ----------------------------------------------------------

    def post_urgent(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the actor's thread before its next message
        (an async actor runs it on its loop at once: a coroutine becomes a task)."""
        if self.is_async:

            def start() -> None:
                try:
                    outcome = fn(*args)
                finally:
                    self.urgent_started += 1
                if inspect.isawaitable(outcome):
                    task = self.loop.create_task(_awaitable(outcome))
                    self.tasks.add(task)
                    task.add_done_callback(self.tasks.discard)

            self.loop.call_soon_threadsafe(start)
            with self._posting:  # counted once queued: the loop never waits for what is not
                self.urgent_posted += 1
        elif not self.thread_gone:  # (once it is, the actor has failed: nothing is left to do)
            self.urgent.append((fn, args))
            self.inbox.put((None, None))  # wakes the thread if it waits for a message

    def _run_sync(self) -> None:
        take_ctrl_c_too()
        while True:
            header, frames = self.inbox.get()
            while self.urgent:
                fn, args = self.urgent.popleft()
                fn(*args)
            if header is not None and self._step(header, frames) is _STOP:
                return
            if self.failure is not None and self.cleaned:
                # failed, and __cleanup__ has run: the thread ends, as Monarch's
                # driver does, and the control loop answers what is left
                self.runtime.call_soon(self._thread_ended)
                return

    def _thread_ended(self) -> None:
        """On the control loop, after a failed sync actor's thread ended:
        answer what it left queued, and from now on each message as it comes."""
        self.thread_gone = True
        while True:
            try:
                header, frames = self.inbox.get_nowait()
            except queue.Empty:
                return
            if header is not None:
                self._step(header, frames)

    def _run_async(self) -> None:
        take_ctrl_c_too()
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._serve_async())
        self.loop.close()

    async def _serve_async(self) -> None:
        while True:
            if self.urgent_started < self.urgent_posted:
                # a queued message is taken without a turn of the loop, and an endpoint
                # that never awaits gives none: urgent work (__supervise__) would wait
                # for the whole backlog. Turns until each posted piece has started, and
                # one more, in which a task that one made runs up to its first await.
                while self.urgent_started < self.urgent_posted:
                    await asyncio.sleep(0)
                await asyncio.sleep(0)
            header, frames = await self.mailbox.get()
            outcome = self._step(header, frames)
            if inspect.isawaitable(outcome):
                outcome = await outcome
            if outcome is _STOP:
                return

    def _step(self, header: dict[str, Any], frames: Frames) -> Any:
        op = header[Key.OP]
        if op == _SPAWN_OP:
            return self._construct(header, frames)
        if op == _STOP_OP:
            return self._stop(header, header.get(Key.WHY) or "stopped by client")
        if self.failure is not None or self.stopped is not None:
            why = self.failure or self.stopped
            self._answer(header, SupervisionError(self._down_text(header, why or "")), failed=True)
            return None
        return self._call(header, frames)

    def _construct(self, header: dict[str, Any], frames: Frames) -> Any:
        try:
            spawned: Any = decode(frames)[1]
            cls, args, kwargs, info = spawned
        except DecodeError as error:
            self._fail(f"the spawn message could not be decoded: {error}")
            return None
        self.endpoints = endpoints_of(cls)
        self.me = Instance(
            self.name,
            f"{cls.__module__}.{cls.__qualname__}",
            self.rank,
            info["proc_mesh"] or self._spawned_on(header),
            f"{self.name}@{self.runtime.address}",
            info.get("creator") or ROOT_CREATOR,
            self,
        )
        ctx = Context(self.me, self.rank)
        token = set_current(ctx)
        try:
            self.instance = cls.__new__(cls)
            self.instance.__init__(*args, **kwargs)
            self.constructed = True  # else half made: no __cleanup__ runs on it, as in Monarch
        except Exception as error:
            # the owner hears of the failure before the answer: by the time the
            # caller sees `initialized` fail, the proc mesh refuses new spawns
            self._fail(f"__init__ of {self.name} raised:\n{remote_traceback(error)}", error)
            self._answer(header, _failure(self.name, "__init__", error), failed=True)
        else:
            self.stats.note("started")
            emit(ActorStarted(repr(self.me), self.key, self.rank.rank))
            self._answer(header, None)
        finally:
            reset_current(token)
        return None

    def _spawned_on(self, header: dict[str, Any]) -> Any:
        """The proc mesh of a spawn whose sender could not name it yet (its
        processes were still starting): the table its owner announced."""
        table = self.runtime.get(ProcTables).get(header.get(Key.TABLE, ""))
        if table is None:
            return None
        labels, offset, sizes, strides = header[Key.SHAPE]
        return ProcMesh(table, Shape(labels, Slice(offset=offset, sizes=sizes, strides=strides)))

    def _call(self, header: dict[str, Any], frames: Frames) -> Any:
        method_name = header[Key.METHOD]
        ep = self.endpoints.get(method_name)
        if ep is None and header.get(Key.PLAIN):
            method = getattr(type(self.instance), method_name, None)
            if callable(method):
                ep = EndpointProperty(
                    method, explicit_response_port=bool(header.get(Key.EXPLICIT_PORT))
                )
        keep = header.get(Key.KEEP)
        try:
            message: Any = decode_payload(frames)  # the router has read the header
            args, kwargs = message
        except DecodeError as error:
            if keep is not None:
                _kept(keep, error)
            self._answer(header, _failure(self.name, method_name, error), failed=True)
            return None
        if ep is None:
            missing = AttributeError(
                f"{type(self.instance).__name__} has no endpoint {method_name!r}"
            )
            self._answer(header, _failure(self.name, method_name, missing), failed=True)
            return None
        if ep.explicit_response_port:
            port = header.get(Key.REPLY_TO)
            reply = Port(port[0], port[1], header[Key.BRANCH][0]) if port else _DroppingPort()
            args = (reply, *args)
        ctx = Context(self.me, header=header)  # type: ignore[arg-type]
        if ep.is_async:
            tracked = (
                keep is None
                and not ep.explicit_response_port
                and header.get(Key.REPLY_TO) is not None
            )
            if tracked:
                self.open_calls[id(header)] = header
            body = self._await_call(header, ep, ctx, args, kwargs, keep, tracked)
            return self._call_async(body, ep.concurrent)
        token = set_current(ctx)
        started = self.stats.begin(ep.name)
        try:
            result = ep.method(self.instance, *args, **kwargs)
        except BaseException as error:
            self._settle(header, ep, keep, False, token, started, None, error)
        else:
            self._settle(header, ep, keep, False, token, started, result, None)
        return self._after_message()

    async def _call_async(self, body: Coroutine[Any, Any, None], concurrent: bool) -> Any:
        """Run an async endpoint's ``body`` on the actor's loop: to its end, or
        as a task of its own when the endpoint is concurrent."""
        if concurrent:
            task = asyncio.get_running_loop().create_task(body)
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
            await asyncio.sleep(0)  # the body starts before the next message is taken
        else:
            await body
        return self._after_message()

    async def _await_call(
        self,
        header: dict[str, Any],
        ep: EndpointProperty[..., Any],
        ctx: Context,
        args: Any,
        kwargs: Any,
        keep: Any,
        tracked: bool,
    ) -> None:
        """The body of an async endpoint call, awaited on the actor's loop."""
        token = set_current(ctx)
        started = self.stats.begin(ep.name)
        try:
            result = await ep.method(self.instance, *args, **kwargs)
        except BaseException as error:
            self._settle(header, ep, keep, tracked, token, started, None, error)
        else:
            self._settle(header, ep, keep, tracked, token, started, result, None)

    def _settle(
        self,
        header: dict[str, Any],
        ep: EndpointProperty[..., Any],
        keep: Any,
        tracked: bool,
        token: contextvars.Token[Any],
        started: float,
        result: Any,
        error: BaseException | None,
    ) -> None:
        """What follows the body of an endpoint call, sync or async: its result
        or ``error`` (``None`` when it returned) goes to the ``keep`` extension,
        or answers the caller (a call still ``tracked`` in ``open_calls`` is
        answered only if the actor's failure did not answer it already); a
        ``BaseException`` fails the actor. The call's stats end before anyone
        hears of it, so whoever is told can see it counted; the call's context
        is reset last."""
        try:
            if isinstance(error, Exception) and keep is None:
                self.stats.raised(ep.name, error)  # the admin shows it, whoever hears of it
            self.stats.end(ep.name, started, error is not None)
            if error is None:
                if keep is not None:
                    _kept(keep, result)
                elif not ep.explicit_response_port and (not tracked or self._untrack(header)):
                    self._answer(header, result)
            elif isinstance(error, Exception):
                if keep is not None:  # the error stays with the results, as their values would
                    _kept(keep, error)
                elif not tracked or self._untrack(header):
                    self._raised(header, ep, error)
            elif ep.is_async and isinstance(error, asyncio.CancelledError):
                if not tracked or self._untrack(header):
                    message = call_failed(self.name, ep.name, "the call was cancelled")
                    self._answer(header, SupervisionError(message), True)
            else:  # a panic: the actor cannot go on
                answer = not tracked or self._untrack(header)
                self._fail(_aborted(self.name, ep.name, error), error)
                if answer:
                    self._answer(
                        header, SupervisionError(self._down_text(header, self.failure or "")), True
                    )
        finally:
            reset_current(token)

    def _untrack(self, header: dict[str, Any]) -> bool:
        """Take a tracked call out of ``open_calls``: False if it was answered
        with the actor's failure already."""
        return self.open_calls.pop(id(header), None) is not None

    def _after_message(self) -> Any:
        if self.requested is None:
            return None
        what, reason = self.requested
        self.requested = None
        if what == "abort":
            self._fail(f"actor explicitly aborted due to: {reason}")
            return None
        return self._stop(None, reason)

    def _stop(self, header: dict[str, Any] | None, reason: str) -> Any:
        """Stop the meshes this actor owns, run ``__cleanup__(None)``, answer
        the stop request, end the thread."""

        def finish() -> Any:
            if self._mark_stopped(reason) and header is not None:
                self._answer(header, None)
            return _STOP

        if self.is_async:

            async def stop_async() -> Any:
                await self._wind_down_async(None, reason)
                return finish()

            return stop_async()
        self._wind_down(None, reason)
        return finish()

    def _mark_stopped(self, reason: str) -> bool:
        """Record the stop once; False when it was recorded already (by the
        actor's thread, or by ``_stop_overdue`` on the control loop)."""
        with self._stopping:
            if self.stopped is not None:
                return False
            self.stopped = reason
        self.stats.note("stopped", reason)
        emit(
            ActorStopped(repr(self.me) if self.me else self.name, self.key, self.rank.rank, reason)
        )
        actors = self.runtime.get(LocalActors)
        self.runtime.call_soon(actors.forget, self.key, f"was stopped: {reason}")
        return True

    def _stop_overdue(self, header: dict[str, Any], reason: str) -> None:
        """A stop request the actor's thread has not reached in time (it is
        stuck in ``__init__`` or in a message that does not return): the actor
        is stopped without it, as Monarch does after ``stop_actor_timeout``;
        its thread is left to itself and runs no further message."""
        if self.failure is not None or not self._mark_stopped(reason):
            return
        log.warning(
            "actor %s did not stop within %g s (its thread is still busy); "
            "it is stopped without running __cleanup__",
            repr(self.me) if self.me else self.name,
            stop_actor_timeout(),
        )
        self._answer(header, None)

    def _wind_down(self, exc: BaseException | None, reason: str) -> None:
        """Stop the meshes this actor owns, then run its ``__cleanup__(exc)``,
        within the cleanup timeout (on the actor's thread)."""
        if self.cleaned:
            return
        self.cleaned = True
        self.supervision.stop_owned(self.key, reason, cleanup_timeout())
        cleanup = getattr(self.instance, "__cleanup__", None)
        if cleanup is None or not self.constructed:
            return
        token = set_current(Context(self.me, self.rank))  # type: ignore[arg-type]
        try:
            ctx = contextvars.copy_context()
        finally:
            reset_current(token)
        finished = threading.Event()

        def run() -> None:
            try:
                ctx.run(cleanup, exc)
            except Exception:
                log.exception("__cleanup__ of %s raised", self.name)
            finally:
                finished.set()

        threading.Thread(target=run, name="monarch-actor-cleanup", daemon=True).start()
        if not finished.wait(cleanup_timeout()):
            log.error("__cleanup__ of %s did not finish in %g s", self.name, cleanup_timeout())

    async def _wind_down_async(self, exc: BaseException | None, reason: str) -> None:
        if self.cleaned:
            return
        self.cleaned = True
        current = asyncio.current_task()
        others = [task for task in self.tasks if task is not current]
        for task in others:
            task.cancel()
        if others:
            await asyncio.wait(others, timeout=cleanup_timeout())
        if self.supervision.tree.owned_by(self.key):
            # stopping them blocks: on a thread of its own, not the loop's default
            # executor, which refuses work once the interpreter is shutting down
            await _in_thread(self.supervision.stop_owned, self.key, reason, cleanup_timeout())
        cleanup = getattr(self.instance, "__cleanup__", None)
        if cleanup is None or not self.constructed:
            return
        token = set_current(Context(self.me, self.rank))  # type: ignore[arg-type]
        try:
            outcome = cleanup(exc)
            if inspect.isawaitable(outcome):
                await asyncio.wait_for(_awaitable(outcome), cleanup_timeout())
        except TimeoutError:
            log.error("__cleanup__ of %s did not finish in %g s", self.name, cleanup_timeout())
        except Exception:
            log.exception("__cleanup__ of %s raised", self.name)
        finally:
            reset_current(token)

    # -- answers and failures -----------------------------------------------------------

    def request_stop(self, reason: str) -> None:
        self.requested = ("stop", reason)

    def request_abort(self, reason: str) -> None:
        self.requested = ("abort", reason)

    def _down_text(self, header: dict[str, Any], why: str) -> str:
        """The error of a call this actor cannot answer: it failed (``why`` is
        its failure) or was stopped (``why`` is the reason)."""
        me = repr(self.me) if self.me is not None else self.name
        method = header.get(Key.METHOD, "?")
        if self.failure is not None and self.failure_root is not None:
            root = self.failure_root
            return call_failed(self.name, method, actor_failed(root.actor, root.reason))
        if self.failure is not None:
            return call_failed(self.name, method, actor_failed(me, why))
        return call_failed(self.name, method, actor_stopped(me, why))

    def _raised(
        self, header: dict[str, Any], ep: EndpointProperty[..., Any], error: Exception
    ) -> None:
        if ep.explicit_response_port:  # no reply path: the actor fails
            self._fail(f"{self.name}.{ep.name} raised:\n{remote_traceback(error)}", error)
            self._answer(
                header, SupervisionError(self._down_text(header, self.failure or "")), True
            )
        elif (
            header.get(Key.REPLY_TO) is None
        ):  # nobody awaits: the actor fails, its owner hears of it
            self._fail(
                f"actor explicitly aborted due to: {self.name}.{ep.name} raised:\n"
                f"{remote_traceback(error)}",
                error,
            )
        else:
            self._answer(header, _failure(self.name, ep.name, error), failed=True)

    def _answer(self, header: dict[str, Any], value: Any, failed: bool = False) -> None:
        port = header.get(Key.REPLY_TO)
        if port is None:
            return
        position = header[Key.BRANCH][0]
        try:
            self.runtime.send(port[0], port_header(port[1], position, failed), value)
        except EncodeError as error:
            method = header.get(Key.METHOD, "?")
            problem = TypeError(f"the result of {self.name}.{method} cannot be sent: {error}")
            self.runtime.send(
                port[0], port_header(port[1], position, True), _failure(self.name, method, problem)
            )

    def _fail(
        self, reason: str, error: BaseException | None = None, cause: MeshFailure | None = None
    ) -> None:
        """This actor failed: its owner hears of it, then the meshes it owns
        are stopped and its ``__cleanup__(error)`` runs. It answers every
        later message with the reason."""
        if self.failure is not None or self.stopped is not None:
            return
        self.failure = reason
        if cause is not None:
            mine = MeshFailure(self.key, [self.rank.rank], "", reason, cause)
            root = root_cause(mine)
            self.failure_root = root if root is not mine else None
        self.stats.note("failed", reason.splitlines()[0] if reason else "")
        emit(ActorFailed(repr(self.me) if self.me else self.name, self.key, self.rank.rank, reason))
        self._report(reason, cause)
        # the calls in flight will not be answered otherwise: as Monarch's
        # callers, theirs hear of the failure now (the bodies run on, unheard)
        open_calls = list(self.open_calls.values())
        self.open_calls.clear()
        for header in open_calls:
            self._answer(header, SupervisionError(self._down_text(header, reason)), True)
        exc = error if error is not None else SupervisionError(reason)
        if self.is_async:
            self.post_urgent(self._wind_down_async, exc, reason)
        else:
            self.post_urgent(self._wind_down, exc, reason)

    def _report(self, reason: str, cause: MeshFailure | None = None) -> None:
        failure = MeshFailure(
            self.key, [self.rank.rank], repr(self.me) if self.me else self.name, reason, cause
        )
        try:
            self.supervision.report(self.owner, failure, self.owner_actor)
        except EncodeError:
            log.error("could not report a failure of %s: %s", self.name, reason)

    # -- supervising the meshes this actor owns (called on the control loop) -------------

    def supervise(self, delivery: Delivery) -> bool:
        """Hand a failure of a mesh this actor owns to its ``__supervise__``;
        False if it has none or cannot take it any more."""
        if self.instance is None or self.failure is not None or self.stopped is not None:
            return False
        if getattr(type(self.instance), "__supervise__", None) is None:
            return False
        self.post_urgent(self._supervise, delivery)
        return True

    def fail_unsupervised(self, reason: str, cause: MeshFailure) -> None:
        """A failure of a mesh this actor owns was not handled: the actor fails."""
        self.post_urgent(self._fail, reason, None, cause)

    def _supervise(self, delivery: Delivery) -> Any:
        tree = self.supervision.tree
        if self.failure is not None or self.stopped is not None:
            tree.supervised(delivery, False)
            return None
        token = set_current(Context(self.me, self.rank))  # type: ignore[arg-type]
        try:
            outcome = self.instance.__supervise__(delivery.failure)
        except Exception as error:
            tree.supervised(delivery, None, error)
            return None
        finally:
            reset_current(token)
        if not inspect.isawaitable(outcome):
            tree.supervised(delivery, outcome)
            return None
        if not self.is_async:
            if hasattr(outcome, "close"):
                outcome.close()
            problem = TypeError(
                f"{type(self.instance).__qualname__}.__supervise__ is async, but the actor is "
                "not: make __supervise__ a plain def, or give the actor an async endpoint"
            )
            tree.supervised(delivery, None, problem)
            return None

        async def finish() -> None:
            token = set_current(Context(self.me, self.rank))  # type: ignore[arg-type]
            try:
                tree.supervised(delivery, await _awaitable(outcome))
            except asyncio.CancelledError as error:
                task = asyncio.current_task()
                if task is not None and task.cancelling():  # the actor stops: not a failure
                    raise
                tree.supervised(delivery, None, error)  # it awaited a cancelled future
            except Exception as error:
                tree.supervised(delivery, None, error)
            finally:
                reset_current(token)

        return finish()


def _aborted(actor: str, method: str, error: BaseException) -> str:
    """Why an actor fails when its endpoint raised a ``BaseException`` (a panic)."""
    raised = "".join(traceback.format_exception(error))
    return (
        f"actor explicitly aborted due to: {raised}"
        f"({actor}.{method} raised {type(error).__name__}, a BaseException: the actor cannot go on)"
    )


def setup_failure(error: Exception) -> ActorError:
    """What a proc mesh's ``initialized`` raises when its ``bootstrap`` raised
    ``error``: in Monarch's words, whose procs run it as endpoint ``setup`` of an
    actor ``setup``."""
    failure = _failure("setup", "setup", error)
    assert isinstance(failure, ActorError)
    return failure


def _kept(keep: Any, outcome: Any) -> None:
    """Hand an rref call's result (or its error) to the ``keep`` extension."""
    hook = extension("keep")
    assert hook is not None
    hook(keep, outcome)


def _failure(actor: str, method: str, error: BaseException) -> BaseException:
    failure = ActorError(error, f"Actor call {actor}.{method} failed.", remote_traceback(error))
    try:
        cloudpickle.dumps(failure)
    except Exception:  # the exception itself does not pickle: keep its text
        stand_in = RuntimeError(f"{type(error).__name__}: {error}")
        failure = ActorError(stand_in, failure.message, failure.exception_formatted)
    return failure


async def _awaitable(outcome: Awaitable[Any]) -> Any:
    return await outcome


async def _in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """Await ``fn(*args)`` run on a new daemon thread."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()

    def settle(error: BaseException | None, value: Any) -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(value)

    def run() -> None:
        try:
            value = fn(*args)
        except BaseException as error:
            loop.call_soon_threadsafe(settle, error, None)
        else:
            loop.call_soon_threadsafe(settle, None, value)

    threading.Thread(target=run, name="monarch-actor-stop-owned", daemon=True).start()
    return await done


class _DroppingPort(Port[Any]):
    """The reply port of a message sent without one: what is sent is dropped."""

    def __init__(self) -> None:
        super().__init__("", 0)

    def send(self, obj: Any) -> None:
        return None

    def exception(self, exc: BaseException) -> None:
        return None
