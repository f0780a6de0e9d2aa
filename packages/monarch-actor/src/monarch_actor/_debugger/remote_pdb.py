"""The session's side of ``breakpoint()``, in the actor's process: the
``sys.breakpointhook`` every process's runtime installs, and the pdb whose
terminal is the debug controller (its input and output travel as endpoint
calls). Only the thread that called ``breakpoint()`` waits in pdb; elsewhere
(the script itself) ``breakpoint()`` does what it did before."""

from __future__ import annotations

import bdb
import dis
import inspect
import linecache
import logging
import os
import pdb
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

from .._core.current import current
from .._core.process import get_runtime
from .controller import DebugController, block_on, debug_controller

__all__ = ["install_breakpoint_hook"]

log = logging.getLogger("monarch.actor.debugger")

_previous_hook: Callable[..., Any] = sys.__breakpointhook__
_active = threading.local()  # .session: the _RemotePdb of this thread's open session
_SUSPENDS = {op for name, op in dis.opmap.items() if name in ("YIELD_VALUE", "RESUME")}
_BY_VALUE = "<dynamic-code>"  # what cloudpickle names the file of code it carries by value
_RESUMABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
# code that came by value from a __main__ without __file__ (a notebook's): its
# file and lines in the controller's process, or None where it has none
_origins: dict[tuple[str, int, bytes], tuple[str, list[str]] | None] = {}


def install_breakpoint_hook() -> None:
    """Make ``breakpoint()`` in actors open a session with the debug controller
    (once per process; elsewhere the hook in place before still serves it)."""
    global _previous_hook
    if sys.breakpointhook is not _breakpointhook:
        _previous_hook = sys.breakpointhook
        sys.breakpointhook = _breakpointhook


def _breakpointhook(*args: Any, **kwargs: Any) -> Any:
    ctx = current()
    if ctx is None or getattr(ctx.actor_instance, "_host", None) is None:
        return _previous_hook(*args, **kwargs)
    if os.environ.get("PYTHONBREAKPOINT", "").strip() == "0":
        return None  # breakpoints are switched off, as for plain Python
    frame = sys._getframe(1)
    session: _RemotePdb | None = getattr(_active, "session", None)
    if session is None or session.ended:
        session = _RemotePdb.open(ctx, frame)
        _active.session = session
    session.set_trace(frame)  # last: what runs after it is traced
    return None


class _Output:
    """pdb's stdout: kept until pdb next asks for input."""

    encoding = "utf-8"

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        return None

    def take(self) -> str:
        text = "".join(self.parts)
        self.parts.clear()
        return text


class _Input:
    """pdb's stdin: each line comes from the debug controller."""

    encoding = "utf-8"

    def __init__(self, session: _RemotePdb) -> None:
        self.session = session

    def readline(self) -> str:
        return self.session.exchange()


class _RemotePdb(pdb.Pdb):
    """A pdb whose terminal is the debug controller."""

    def __init__(self, controller: Any, sid: int, label: str, endpoint_frame: FrameType | None):
        self.controller = controller
        self.sid = sid
        self.label = label
        self.ended = False
        self.endpoint_frame = endpoint_frame
        self.out = _Output()
        self.sources: dict[str, list[str]] = {}  # the lines of files of code that came by value
        super().__init__(
            stdin=_Input(self),  # type: ignore[arg-type]
            stdout=self.out,  # type: ignore[arg-type]
            skip=["monarch_actor._debugger.*"],  # the hook and the controller's calls
            nosigint=True,
            readrc=False,
        )

    @classmethod
    def open(cls, ctx: Any, frame: FrameType) -> _RemotePdb:
        instance = ctx.actor_instance
        label = f"{instance.name} {instance.rank.rank}"
        if isinstance(getattr(instance._host, "instance", None), DebugController):
            raise RuntimeError("breakpoint() inside the debug controller cannot be served by it")
        runtime = get_runtime()
        start = {
            "actor_name": instance.name,
            "rank": instance.rank.rank,
            "coords": dict(instance.rank),
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "address": runtime.address,
            "function": frame.f_code.co_qualname,
            "filename": _filename(frame),
            "lineno": frame.f_lineno,
        }
        controller = debug_controller()
        try:
            sid = block_on(controller.debugger_session_start.call_one(start))
        except Exception as error:
            cause = getattr(error, "exception", error)  # an ActorError: the controller's own
            raise RuntimeError(
                f"breakpoint() in {label} cannot be served by the debug controller: {cause}"
            ) from None
        return cls(controller, sid, label, _endpoint_frame(frame))

    # -- the terminal ------------------------------------------------------------------

    def exchange(self) -> str:
        """Hand pdb's output to the controller; pdb's next command."""
        text = self.out.take()
        frame = self.curframe
        where = (
            (frame.f_code.co_qualname, _filename(frame), frame.f_lineno)
            if frame is not None
            else (None, None, None)
        )
        try:
            line = block_on(self.controller.debugger_read.call_one(self.sid, text, *where))
        except Exception as error:
            self._forget()
            log.error("the debug session of %s lost its debug controller: %s", self.label, error)
            raise bdb.BdbQuit(f"the debug session of {self.label} lost its controller") from None
        return f"{line}\n"

    def _forget(self) -> None:
        self.ended = True
        if getattr(_active, "session", None) is self:
            _active.session = None

    def finish(self, reason: str) -> None:
        """The session is over: tell the controller (once)."""
        if self.ended:
            return
        self._forget()
        try:
            block_on(
                self.controller.debugger_session_end.call_one(self.sid, self.out.take(), reason)
            )
        except Exception as error:
            log.warning("could not end the debug session of %s: %s", self.label, error)

    # -- when the session ends -------------------------------------------------------------

    def set_continue(self) -> None:
        super().set_continue()
        if not self.breaks:  # pdb stopped tracing: nothing will stop the actor again
            self.finish("continued")

    def set_quit(self) -> None:
        super().set_quit()
        self.finish("quit (the endpoint raises bdb.BdbQuit)")

    def trace_dispatch(self, frame: FrameType, event: str, arg: Any) -> Any:
        if frame is not self.endpoint_frame:
            return super().trace_dispatch(frame, event, arg)
        super().trace_dispatch(frame, event, arg)
        if event == "return" and not _suspending(frame):
            self._endpoint_returned()
            return None
        return self.trace_dispatch  # keep watching the endpoint's frame, even across awaits

    def _endpoint_returned(self) -> None:
        self.finish("the endpoint returned")
        self.clear_all_breaks()
        sys.settrace(None)
        frame = self.endpoint_frame
        while frame is not None:  # no stale trace function for a later session to meet
            frame.f_trace = None
            frame = frame.f_back
        self.endpoint_frame = None

    # -- source lines of code that came by value -------------------------------------------

    def print_stack_entry(self, frame_lineno: Any, *args: Any, **kwargs: Any) -> None:
        self._show_source_of(frame_lineno[0])
        super().print_stack_entry(frame_lineno, *args, **kwargs)

    def format_stack_entry(self, frame_lineno: Any, *args: Any, **kwargs: Any) -> str:
        text: str = super().format_stack_entry(frame_lineno, *args, **kwargs)
        frame = frame_lineno[0]
        if frame.f_code.co_filename == _BY_VALUE:
            text = text.replace(_BY_VALUE, _filename(frame), 1)
        return text

    def _show_source_of(self, frame: FrameType) -> None:
        """Give linecache the lines of code that cloudpickle brought without
        its file (its frames name the file ``<dynamic-code>``): the script's,
        or a notebook cell's, as the controller's process has them."""
        if frame.f_code.co_filename != _BY_VALUE:
            return
        path = frame.f_globals.get("__file__")
        if not isinstance(path, str):  # a notebook's __main__: the controller knows the cell
            found = _origin(frame.f_code)
            lines = found[1] if found is not None else []
        elif (cached := self.sources.get(path)) is not None:
            lines = cached
        else:
            try:
                text: str | None = Path(path).read_text()
            except (OSError, UnicodeDecodeError):  # the script is on the controller's machine
                try:
                    text = block_on(self.controller.source.call_one(path))
                except Exception:
                    text = None
            lines = self.sources[path] = (text or "").splitlines(keepends=True)
        # always replace the entry: lines of other code, or none, rather than a wrong file's
        linecache.cache[_BY_VALUE] = (sum(map(len, lines)), None, lines, _BY_VALUE)

    # -- commands that would wait on the process's own terminal ----------------------------

    def do_clear(self, arg: str) -> None:
        """cl(ear) [filename:lineno | bpnumber ...]
        Without argument, clear all breakpoints (without asking)."""
        if arg:
            super().do_clear(arg)
            return
        cleared = [bp for bp in bdb.Breakpoint.bpbynumber if bp]
        self.clear_all_breaks()
        for bp in cleared:
            self.message(f"Deleted {bp}")

    do_cl = do_clear

    def do_interact(self, arg: str) -> None:
        """interact
        Not available in a remote session: use p, pp or ! statements."""
        self.error("interact needs the actor process's terminal; use p, pp or ! statements")


def _endpoint_frame(frame: FrameType) -> FrameType | None:
    """The outermost frame of the code the actor runs (the endpoint): the one
    the runtime called."""
    inner: FrameType | None = None
    walk: FrameType | None = frame
    while walk is not None:
        if str(walk.f_globals.get("__name__", "")).startswith("monarch_actor."):
            return inner
        inner, walk = walk, walk.f_back
    return None


def _filename(frame: FrameType) -> str:
    """The file of ``frame``'s code; for code that came by value, the file it came from."""
    name = frame.f_code.co_filename
    if name == _BY_VALUE:
        origin = frame.f_globals.get("__file__")
        if isinstance(origin, str):
            return origin
        found = _origin(frame.f_code)
        if found is not None:
            return found[0]
    return name


def _origin(code: CodeType) -> tuple[str, list[str]] | None:
    """Where code that came by value from a ``__main__`` without ``__file__``
    (a notebook cell) was defined, and its lines: asked of the debug
    controller, in the notebook's kernel, once per function."""
    key = (code.co_qualname, code.co_firstlineno, code.co_code)
    if key not in _origins:
        try:
            found = block_on(debug_controller().main_source.call_one(*key))
        except Exception:  # no controller to ask: pdb shows no source
            found = None
        _origins[key] = None if found is None else (found[0], found[1].splitlines(keepends=True))
    return _origins[key]


def _suspending(frame: FrameType) -> bool:
    """Whether a ``return`` event of ``frame`` is a coroutine pausing at an
    ``await`` (it resumes later), not its end."""
    if not frame.f_code.co_flags & _RESUMABLE:
        return False
    code = frame.f_code.co_code
    return 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] in _SUSPENDS
