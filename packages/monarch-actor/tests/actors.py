"""Actor classes the tests spawn (importable by the procs)."""

import asyncio
import os
import threading
import time
from typing import Any

from monarch_actor import (
    Actor,
    Port,
    ProcMesh,
    SupervisionError,
    context,
    current_rank,
    current_size,
    endpoint,
)


class Counter(Actor):
    def __init__(self, start: int) -> None:
        self.value = start

    @endpoint
    def incr(self) -> None:
        self.value += 1

    @endpoint
    def get(self) -> int:
        return self.value

    @endpoint
    def boom(self, text: str) -> None:
        raise ValueError(text)

    @endpoint
    def add(self, a: int, b: int = 0) -> int:
        return a + b

    def helper(self) -> int:
        return 1


class Collector(Actor):
    @endpoint
    def collect(self) -> tuple[int, int]:
        """A full collection; then the objects the collector keeps out of its
        walks (frozen) and the objects it walks."""
        import gc

        gc.collect()
        return gc.get_freeze_count(), len(gc.get_objects())


class Inherited(Actor):
    @endpoint
    def exit_paths_ready(self) -> bool:
        """Whether what this process's exit needs (where installed code
        lives) was worked out before it started serving."""
        from monarch_actor._procs.finalize import _installed_code

        return _installed_code.cache_info().currsize == 1


class Probe(Actor):
    @endpoint
    def where(self) -> dict:
        ctx = context()
        return {
            "pid": os.getpid(),
            "thread": threading.current_thread().name,
            "rank": dict(ctx.actor_instance.rank),
            "message_rank": dict(current_rank()),
            "size": current_size(),
            "env": {
                k: os.environ[k]
                for k in (
                    "RANK",
                    "WORLD_SIZE",
                    "LOCAL_RANK",
                    "LOCAL_WORLD_SIZE",
                    "MASTER_ADDR",
                    "MASTER_PORT",
                )
            },
        }

    @endpoint
    def sleep(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    @endpoint
    def hold(self, gate: str, seconds: float = 60.0) -> bool:
        """Busy (a sync endpoint) until the file ``gate`` exists, at most
        ``seconds``; whether it came: the test opens the gate when it has
        seen what it wanted while this actor was busy."""
        deadline = time.monotonic() + seconds
        while not os.path.exists(gate):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)  # busy on purpose: what the test looks at is this actor held
        return True

    @endpoint
    def unpicklable(self) -> object:
        return threading.Lock()

    @endpoint
    def driver_ended(self, ident: int, timeout: float) -> bool:
        """Whether the sync actor thread ``ident`` of this process has ended,
        waiting for it (a join) at most ``timeout`` seconds."""
        for thread in threading.enumerate():
            # the name too: a dead thread's ident can be given to another
            if thread.ident == ident and thread.name == "monarch-actor-driver":
                thread.join(timeout)
                return not thread.is_alive()
        return True

    @endpoint
    def echo(self, value: object) -> object:
        return value


class Asyncy(Actor):
    @endpoint
    async def where(self) -> str:
        asyncio.get_running_loop()
        return threading.current_thread().name

    @endpoint
    async def nap(self, seconds: float) -> float:
        await asyncio.sleep(seconds)
        return seconds

    @endpoint
    async def call_other(self, other) -> int:
        return await other.get.call_one()


class Caller(Actor):
    """Calls meshes it receives, the getting-started way."""

    @endpoint
    def ask(self, counters) -> int:
        mine = counters.slice(**context().actor_instance.rank)
        return mine.get.call_one().get()

    @endpoint
    def ask_one(self, counter) -> int:
        return counter.get.call_one().get()

    @endpoint
    def tell(self, port: Port, value: int) -> None:
        port.send(value * 10)


class Replier(Actor):
    @endpoint(explicit_response_port=True)
    def later(self, port: Port, value: int) -> None:
        threading.Timer(0.05, port.send, args=(value + 1,)).start()

    @endpoint(explicit_response_port=True)
    def refuse(self, port: Port) -> None:
        port.exception(KeyError("nope"))


class Registry(Actor):
    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.seen: list[int] = []

    @endpoint
    def visit(self, who: int) -> list[int]:
        self.seen.append(who)
        return list(self.seen)


class Visitor(Actor):
    def __init__(self, registry: str = "registry") -> None:
        self.registry = registry

    @endpoint
    def visit(self) -> int:
        from monarch_actor import get_or_spawn_controller

        registry = get_or_spawn_controller(self.registry, Registry, "from-actor").get()
        return len(registry.visit.call_one(context().actor_instance.rank["gpus"]).get())


class Env(Actor):
    @endpoint
    def get(self, name: str) -> str | None:
        return os.environ.get(name)


class Modules(Actor):
    @endpoint
    def loaded(self, names: list[str]) -> list[bool]:
        """Which of ``names`` this process has imported."""
        import sys

        return [name in sys.modules for name in names]


def set_flag() -> None:  # a bootstrap: runs in each new process before any actor
    os.environ["BOOTSTRAPPED"] = "yes"


def fail_bootstrap() -> None:
    raise RuntimeError("no GPUs here")


class Affinity(Actor):
    @endpoint
    def cpus(self) -> list[int]:
        return sorted(os.sched_getaffinity(0))


# -- fault injection -------------------------------------------------------------------


def note(path: str, line: str) -> None:
    """Append a line to a file the test reads (processes share no memory)."""
    with open(path, "a") as f:
        f.write(line + "\n")


class Victim(Actor):
    """Dies on request, in the ways processes die."""

    def __init__(self, log: str = "", init_seconds: float = 0.0) -> None:
        self.log = log
        if log:
            note(log, f"init {os.getpid()}")
        time.sleep(init_seconds)

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def thread_ident(self) -> int:
        return threading.get_ident()

    @endpoint
    def env(self, names: list[str]) -> list[str | None]:
        return [os.environ.get(name) for name in names]

    @endpoint
    def block(self, seconds: float, started: str = "") -> float:
        """Busy for ``seconds``; with ``started``, a line there says it began."""
        if started:
            note(started, f"blocking {os.getpid()}")
        time.sleep(seconds)  # a sync endpoint, busy
        return seconds

    @endpoint
    def die(self, how: str) -> None:
        if how == "exit":
            os._exit(3)
        if how == "segfault":
            import ctypes

            ctypes.string_at(0)
        if how == "raise":
            raise ValueError("a bad batch")
        if how == "abort":
            context().actor_instance.abort()
            return
        os.kill(os.getpid(), 9)

    def __cleanup__(self, exc: BaseException | None) -> None:
        if self.log:
            note(self.log, f"cleanup {current_rank().rank} {type(exc).__name__ if exc else None}")


class AsyncVictim(Actor):
    @endpoint
    async def pid(self) -> int:
        return os.getpid()

    @endpoint
    async def nap(self, seconds: float, started: str = "") -> float:
        """Asleep for ``seconds``; with ``started``, a line there says it began."""
        if started:
            note(started, f"napping {os.getpid()}")
        await asyncio.sleep(seconds)
        return seconds


class BadInit(Actor):
    def __init__(self, log: str = "") -> None:
        self.log = log
        if log:
            note(log, f"init {threading.get_ident()}")
        raise ValueError("no config file")

    @endpoint
    def ping(self) -> int:
        return 1

    def __cleanup__(self, exc: BaseException | None) -> None:
        note(self.log, "cleanup")  # must not run: __init__ did not finish


class Supervisor(Actor):
    """Owns a mesh of workers in processes of its own; with ``respawn`` its
    ``__supervise__`` replaces a failed mesh, otherwise failures escalate."""

    def __init__(self, respawn: bool, log: str = "") -> None:
        self.respawn = respawn
        self.log = log
        self.failures: list[str] = []
        self._start()

    def _start(self) -> None:
        from monarch_actor import this_host

        self.procs = this_host().spawn_procs(per_host={"w": 2}, name="workers")
        self.workers = self.procs.spawn("worker", Victim, self.log)

    @endpoint
    def work(self) -> list[int]:
        return sorted(self.workers.pid.call().get(timeout=30).values())

    @endpoint
    def crash_worker(self, rank: int, how: str) -> None:
        self.workers.slice(w=rank).die.broadcast(how)

    @endpoint
    def seen(self) -> list[str]:
        return self.failures

    def __supervise__(self, failure) -> bool:
        self.failures.append(failure.report())
        if not self.respawn:
            return False
        self.procs.stop().get(timeout=30)
        self._start()
        return True

    def __cleanup__(self, exc: BaseException | None) -> None:
        if self.log:
            note(self.log, "supervisor cleanup")


class AsyncSupervisor(Actor):
    """Supervisor, as an async actor with an async ``__supervise__``."""

    def __init__(self) -> None:
        self.failures: list[str] = []
        self._start()

    def _start(self) -> None:
        from monarch_actor import this_host

        self.procs = this_host().spawn_procs(per_host={"w": 2}, name="workers")
        self.workers = self.procs.spawn("worker", Victim)

    @endpoint
    async def work(self) -> list[int]:
        return sorted((await self.workers.pid.call()).values())

    @endpoint
    async def crash_worker(self, rank: int, how: str) -> None:
        self.workers.slice(w=rank).die.broadcast(how)

    @endpoint
    async def seen(self) -> list[str]:
        return self.failures

    async def __supervise__(self, failure) -> bool:
        await self.procs.stop()
        self._start()
        self.failures.append(failure.report())  # last: the test waits for it
        return True


class SlowCleanup(Actor):
    @endpoint
    def pid(self) -> int:
        return os.getpid()

    def __cleanup__(self, exc: BaseException | None) -> None:
        time.sleep(600)


class Journal(Actor):
    """Notes every message it gets, in arrival order."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    @endpoint
    def note(self, n: int) -> int:
        self.seen.append(n)
        return n

    @endpoint
    def notes(self) -> list[int]:
        return self.seen


class Scribe(Actor):
    """Sends a journal numbered messages from inside an actor, every way."""

    @endpoint
    def write(self, journal: Any, start: int, count: int) -> None:
        for n in range(start, start + count):
            if n % 3 == 0:
                journal.note.broadcast(n)
            elif n % 3 == 1:
                journal.note.call_one(n)  # not awaited: only its order matters
            else:
                journal.note.call(n).get()


class _WritesOnDel:
    def __init__(self, path: str) -> None:
        self._file = open(path, "w")  # noqa: SIM115  (closed by __del__, the point of the test)

    def __del__(self) -> None:
        self._file.write("finalized")
        self._file.close()


_held_until_exit: _WritesOnDel | None = None


class FinalizerMarker(Actor):
    """Leaves an object with a finalizer in a module global, and an atexit handler."""

    def __init__(self, path: str) -> None:
        import atexit

        global _held_until_exit
        _held_until_exit = _WritesOnDel(path)
        atexit.register(lambda: open(path + ".atexit", "w").close())

    @endpoint
    def pid(self) -> int:
        return os.getpid()


class StuckInInit(Actor):
    """Sends a port a value, then never returns from ``__init__``."""

    def __init__(self, port: Port[int]) -> None:
        port.send(os.getpid())
        threading.Event().wait()

    @endpoint
    def unreachable(self) -> None:
        pass


class Panic(BaseException):
    """Not an ``Exception``: an endpoint that raises it ends its actor."""


class AsyncPanicker(Actor):
    @endpoint
    async def ping(self) -> int:
        return 1

    @endpoint
    async def panic(self) -> None:
        raise Panic("the actor cannot go on")


class AsyncOwner(Actor):
    """An async actor that owns a mesh of ``AsyncPanicker``; its ``__supervise__``
    handles their failures when ``handle``, and records each failure's mesh name."""

    def __init__(self, handle: bool) -> None:
        from monarch_actor import this_host

        self.handle = handle
        self.procs = this_host().spawn_procs(per_host={"w": 1}, name="panickers")
        self.child = self.procs.spawn("child", AsyncPanicker)
        self.names: list[str] = []
        self.supervised = asyncio.Event()
        self.cleaned_up = asyncio.Event()

    @endpoint
    async def fail_child_then_wait(self) -> str:
        """Fails the child, then waits for ``__supervise__`` (for ever, if it
        does not handle the failure: the call then fails with the child's)."""
        await self.child.ping.call()
        try:
            await self.child.panic.call()
        except SupervisionError as error:
            first = str(error)
        else:
            raise AssertionError("the child's panic did not fail the call")
        await self.supervised.wait()
        if not self.handle:  # this call is answered when the actor fails: that is the test
            await self.cleaned_up.wait()
        return first

    @endpoint
    async def mesh_names(self) -> tuple[str, list[str]]:
        return await self.child._name, self.names

    def __supervise__(self, failure) -> bool:
        self.names.append(failure.mesh_name)
        self.supervised.set()
        return self.handle

    def __cleanup__(self, exc: BaseException | None) -> None:
        self.cleaned_up.set()


# -- test_urgent_order: the test sets these events as the runtime hands work over

BACKLOG = 20  # queued calls in test_urgent_order

backlog_posted = threading.Event()  # every queued `busy` has been handed to the actor
supervise_posted = threading.Event()  # the child's failure has been handed to it


class SyncBacklogged(Actor):
    def __init__(self, procs: ProcMesh) -> None:
        self.procs = procs  # where its child is spawned, to fail
        self.events: list[str] = []

    def wait_for_backlog(self) -> None:
        # returns once the whole backlog waits in the actor's queue
        assert backlog_posted.wait(30), "the backlog was never posted"

    def work(self, first: bool) -> None:
        if first:
            # a child fails while this endpoint holds the actor: its failure
            # arrives with the rest of the backlog queued behind this call
            self.child = self.procs.spawn("doomed", BadInit)
            assert supervise_posted.wait(30), "the child's failure never arrived"
        self.events.append("busy")

    @endpoint
    def begin(self) -> None:
        self.wait_for_backlog()

    @endpoint
    def busy(self, first: bool) -> None:
        self.work(first)

    @endpoint
    def seen(self) -> list[str]:
        return self.events

    def __supervise__(self, failure: object) -> bool:
        self.events.append("supervise")
        return True


class AsyncBacklogged(SyncBacklogged):
    """The same, with endpoints that are async but never await."""

    @endpoint
    async def begin(self) -> None:
        self.wait_for_backlog()

    @endpoint
    async def busy(self, first: bool) -> None:
        self.work(first)

    @endpoint
    async def seen(self) -> list[str]:
        return self.events


class AsyncSupervising(AsyncBacklogged):
    """And with an async ``__supervise__``: it runs as a task of the actor's loop."""

    async def __supervise__(self, failure: object) -> bool:  # type: ignore[override]
        self.events.append("supervise")
        return True
