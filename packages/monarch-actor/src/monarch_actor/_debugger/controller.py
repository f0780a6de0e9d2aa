"""``breakpoint()`` inside actors, served to ``monarch debug``.

Every process's runtime installs a ``sys.breakpointhook``. In code an actor
runs (an endpoint, ``__init__``, ``__supervise__``), ``breakpoint()`` opens a
pdb session whose input and output travel, as endpoint calls, to the job's
debug controller: one actor in the controller's process. Only the thread that
called ``breakpoint()`` waits in pdb; other actors, other processes and the
controller go on. Elsewhere (the script itself) ``breakpoint()`` does what it
did before.

The debug controller keeps the sessions by (actor name, rank) and serves them
to one client at a time over TCP (``server``, ``protocol``): ``list``, ``attach``,
``cast``, ``continue``. Every client proves the job's secret and the server
proves it back, loopback included, and every message after that is sealed;
the controller leaves the secret for its own user's ``monarch debug`` in a
record only that user can read (``publish_record("debug", ...)``). A
session ends when pdb lets the actor run on without
breakpoints (``continue``), when the endpoint returns, or on ``quit``.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import gc
import inspect
import linecache
import logging
import sys
import threading
from pathlib import Path
from types import FunctionType
from typing import Any

from monarch_transport import job_secret

from .._api.actor import Actor, EndpointProperty, concurrent_endpoint
from .._api.singletons import get_or_spawn_controller
from .._core.config import debug_server_address
from .._core.future import Future
from .._core.process import get_runtime
from .server import DebugServer
from .sessions import DebugSessionInfo, Sessions, session_table

__all__ = ["DebugController", "DebugSessionInfo", "block_on", "debug_controller"]

log = logging.getLogger("monarch.actor.debugger")

CONTROLLER_NAME = "debug_controller"


class DebugController(Actor):
    """The job's debugger: it holds every pdb session that ``breakpoint()``
    opened in an actor and serves them to ``monarch debug``.

    One per job, in the controller's process (``debug_controller()`` finds or
    spawns it). It listens at ``MONARCH_DEBUG_SERVER_HOST`` and
    ``MONARCH_DEBUG_SERVER_PORT`` (settings ``debug_server_host``,
    ``debug_server_port``; default ``localhost:27000``). Every client, on
    loopback too, proves the job's secret and hears the server prove it back;
    one client is served at a time (another is refused unless it asks to take
    over). While it listens, the controller leaves its address and the
    secret for its own user's tools (``publish_record("debug", ...)``, a file
    only that user can read). The ``debugger_*``
    endpoints are the sessions' side; users call ``list``,
    ``wait_pending_session`` and ``server_address``.
    """

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._sessions = Sessions(self._loop)
        host, port = debug_server_address()
        self._server = DebugServer(self._sessions, host, port, job_secret())
        self._start = self._loop.create_task(self._server.listen())
        get_runtime().lost_hooks.append(self._on_lost)

    # -- the process's peers ---------------------------------------------------------------

    def _on_lost(self, address: str, reason: str) -> None:
        # called on the control loop; the sessions live on this actor's loop
        with contextlib.suppress(RuntimeError):  # the loop closed: this actor is gone
            self._loop.call_soon_threadsafe(self._lost, address, reason)

    def _lost(self, address: str, reason: str) -> None:
        for session in [s for s in self._sessions.values() if s.address == address]:
            self._sessions.end(session, "", f"its process was lost ({reason})")
            session.lines.put_nowait("")  # ends the read that waits for it

    async def __cleanup__(self, exc: BaseException | None) -> None:
        """Stop serving: the client hears that the program ends.

        Args:
            exc: why the actor stops (``None`` for a plain stop).
        """
        with contextlib.suppress(ValueError):
            get_runtime().lost_hooks.remove(self._on_lost)
        await self._server.close()

    # -- the sessions' side --------------------------------------------------------------

    @concurrent_endpoint
    async def debugger_session_start(self, start: dict[str, Any]) -> int:
        """Register a session that ``breakpoint()`` opened (called by the hook).

        Args:
            start: the actor's name, rank, coordinates, host, pid, process
                address and where it stopped.

        Returns:
            The session's number, for the other ``debugger_*`` calls.

        Raises:
            RuntimeError: the debug server could not listen (the message says
                why and what to do).
        """
        host, port = await self._server.where()
        session = self._sessions.open(start)
        where = f"{session.function} ({session.filename}:{session.lineno})"
        if len(self._sessions) == 1:
            log.warning(
                "%s stopped at breakpoint() in %s on %s; attach with `monarch debug --host %s "
                "--port %d`",
                session.label,
                where,
                session.hostname,
                host,
                port,
            )
        else:
            log.info("%s stopped at breakpoint() in %s", session.label, where)
        await self._sessions.notify()
        return session.sid

    @concurrent_endpoint
    async def debugger_read(
        self, sid: int, output: str, function: str | None, filename: str | None, lineno: int | None
    ) -> str:
        """pdb asks for its next command (called by the session's stdin).

        Args:
            sid: the session's number.
            output: what pdb printed since its last command.
            function: the function pdb is stopped in.
            filename: its file.
            lineno: the line pdb is stopped at.

        Returns:
            The next command, once a client sends one.

        Raises:
            KeyError: no such session (it ended).
        """
        session = self._sessions.get(sid)
        if session is None:
            raise KeyError(f"no debug session {sid}: it ended")
        session.output.append(output)
        session.function, session.filename, session.lineno = function, filename, lineno
        session.turn.set()
        await self._sessions.notify()
        return await session.lines.get()

    @concurrent_endpoint
    async def debugger_session_end(self, sid: int, output: str, reason: str) -> None:
        """A session ended: the actor runs on (called by the hook).

        Args:
            sid: the session's number.
            output: what pdb printed last.
            reason: why it ended (``continued``, ``the endpoint returned``, ...).
        """
        session = self._sessions.get(sid)
        if session is not None:
            self._sessions.end(session, output, reason)
            await self._sessions.notify()

    # -- for users -------------------------------------------------------------------------

    @concurrent_endpoint
    async def wait_pending_session(
        self, count: int = 1, timeout: float | None = None
    ) -> list[DebugSessionInfo]:
        """Wait until ``count`` sessions wait for a pdb command.

        Args:
            count: how many sessions to wait for.
            timeout: the most seconds to wait (``None``: as long as it takes).

        Returns:
            The sessions then, as ``list`` gives them.

        Raises:
            TimeoutError: fewer sessions were waiting when ``timeout`` ran out.
        """

        def enough() -> bool:
            return sum(s.info().waiting for s in self._sessions.values()) >= count

        async with self._sessions.changed:
            try:
                await asyncio.wait_for(self._sessions.changed.wait_for(enough), timeout)
            except TimeoutError:
                raise TimeoutError(
                    f"{sum(s.info().waiting for s in self._sessions.values())} of {count} "
                    f"debug sessions were waiting after {timeout} s"
                ) from None
        return self._sessions.infos()

    @concurrent_endpoint
    async def server_address(self) -> tuple[str, int]:
        """Where the debug server listens, for ``monarch debug --host --port``.

        Returns:
            The host as configured and the port it listens on (the port the
            system chose when ``debug_server_port`` is 0).

        Raises:
            RuntimeError: it could not listen; the message says why.
        """
        return await self._server.where()

    @concurrent_endpoint
    async def source(self, path: str) -> str | None:
        """The text of a Python file of the controller's machine (called by sessions).

        An actor class defined in the script travels by value, without its
        file: pdb shows its lines from the script here.

        Args:
            path: the file, as the script's ``__file__`` names it.

        Returns:
            Its text; ``None`` if it is no ``.py`` file or cannot be read.
        """
        if not path.endswith(".py"):
            return None
        try:
            return Path(path).read_text()
        except (OSError, UnicodeDecodeError):
            return None

    @concurrent_endpoint
    async def main_source(
        self, qualname: str, firstlineno: int, code: bytes
    ) -> tuple[str, str] | None:
        """Where a function of the controller's ``__main__`` was defined, and
        that file's text (called by sessions).

        Code that travels by value loses its file name on the way. A script's
        ``__main__`` says its file (``__file__``); a notebook's does not, and
        its cells are no files on disk: the kernel keeps their text in
        ``linecache``, which this reads.

        Args:
            qualname: the function's qualified name (``Trainer.step``).
            firstlineno: the line its definition starts at.
            code: its bytecode, to tell apart functions of the same name.

        Returns:
            The file (a notebook cell's name for it) and its text; ``None`` if
            no such function is in ``__main__`` or its text is gone.
        """
        function = _main_function(qualname, firstlineno, code)
        if function is None:
            return None
        filename = function.__code__.co_filename
        lines = linecache.getlines(filename)
        return (filename, "".join(lines)) if lines else None

    # last in the class: below this point, ``list`` names the endpoint
    @concurrent_endpoint
    async def list(self, print_output: bool = False) -> builtins.list[DebugSessionInfo]:
        """The sessions: every actor stopped in pdb, by actor name and rank.

        Args:
            print_output: also log the table (logger ``monarch.actor.debugger``).

        Returns:
            One ``DebugSessionInfo`` per session, sorted by actor name and rank.
        """
        infos = self._sessions.infos()
        if print_output:
            log.info("debug sessions:\n%s", session_table(infos))
        return infos


def _main_function(qualname: str, firstlineno: int, code: bytes) -> FunctionType | None:
    """The function of ``__main__`` whose code is this: first by its
    qualified name, then (a function defined inside another, or an older
    class that a cell has since redefined) among every live function."""

    def matches(candidate: Any) -> bool:
        # the exact type first: the gc's objects include ones whose attribute
        # lookups run code and raise (torch.backends.cuda's, without CUDA)
        if type(candidate) is not FunctionType:
            return False
        found = candidate.__code__
        return (
            found.co_qualname == qualname
            and found.co_firstlineno == firstlineno
            and found.co_code == code
        )

    obj: Any = sys.modules.get("__main__")
    try:  # the script's own objects: their attribute lookups may run code that raises
        for part in qualname.split("."):
            namespace = getattr(obj, "__dict__", None)
            obj = namespace.get(part) if isinstance(namespace, dict) else None
            if isinstance(obj, EndpointProperty):
                obj = obj.method  # the method the endpoint serves
            obj = getattr(obj, "__func__", obj)  # a staticmethod or classmethod
            if obj is None:
                break
    except Exception:
        obj = None
    if obj is not None and callable(obj):
        with contextlib.suppress(ValueError):  # a cycle of __wrapped__
            obj = inspect.unwrap(obj)
        if matches(obj):
            return obj  # type: ignore[no-any-return]
    for candidate in gc.get_objects():
        if matches(candidate) and getattr(candidate, "__module__", None) == "__main__":
            return candidate  # type: ignore[no-any-return]
    return None


# -- finding the debug controller ----------------------------------------------------------

_found: tuple[Any, Any] | None = None  # (runtime, controller): a new runtime finds it again
_finding = threading.Lock()


def debug_controller() -> DebugController:
    """The job's debug controller, spawned in the controller's process on first use.

    Calling it from the script starts the debug server before any actor calls
    ``breakpoint()``, so ``monarch debug`` can connect early.

    Returns:
        The one-actor mesh of ``DebugController``.

    Examples:
        >>> from monarch_actor import debug_controller
        >>> debug_controller().list.call_one().get()
        []
    """
    global _found
    runtime = get_runtime()
    with _finding:
        if _found is None or _found[0] is not runtime:
            future = get_or_spawn_controller(CONTROLLER_NAME, DebugController)
            _found = (runtime, block_on(future))
        return _found[1]  # type: ignore[no-any-return]


def block_on(future: Future[Any]) -> Any:
    """The result of ``future``, waited for on this thread."""
    # blocking is what a breakpoint does, even on an async actor's loop: no warning
    return future._cf.result()
