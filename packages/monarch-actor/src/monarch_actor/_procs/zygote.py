"""The host agent's process starter: a fork server.

It imports the runtime (and heavy modules such as torch, when installed) once,
then forks a new proc for each request, so a proc starts in milliseconds
instead of paying for a fresh interpreter and its imports. It stays single
threaded (no event loop, no sockets) so that forking is safe.

Commands arrive as msgpack maps on stdin; events go out on the descriptor
named in argv. A spawn that names a command
(``spawn_procs(bootstrap_command=...)``) is forked too, but the child then
executes that command, which runs this module again with ``--proc FD
ENTRY``: the new interpreter reads its start from FD and becomes the proc,
still this server's child. When the controller goes away (stdin closes, or
the kernel signals that the parent died), every proc it started is killed:
no orphans.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import importlib.util
import logging
import os
import select
import shutil
import signal
import sys
import tempfile
import time
import traceback
from typing import Any

import msgpack  # type: ignore[import-untyped]

from monarch_transport import preload_event_loop

from .._core.private import alive
from .bootstrap import FORK_SERVER_MODULE, PROC_FLAG, STARTED_BY_ENV, proc_environment
from .finalize import finalize, forget_inherited_exit_handlers
from .finalize import prepare as prepare_exit
from .logs import release_output

PR_SET_PDEATHSIG = 1
KILL_GRACE = 2.0  # seconds between SIGTERM and SIGKILL for procs left at exit


def die_with_parent(sig: int) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)


def preload(entry_module: str) -> None:
    """Import the procs' entry module, their event loop's implementation
    (which making the loop would import in every proc), and what
    ``$MONARCH_PRELOAD`` names; work out what each proc's exit needs."""
    import_modules([entry_module, *(os.environ.get("MONARCH_PRELOAD") or "").split(",")])
    preload_event_loop()
    prepare_exit()


def import_modules(names: list[str]) -> None:
    """Import each of ``names`` that is installed and not imported yet (a
    module that fails to import is left to the procs that use it)."""
    for name in filter(None, (n.strip() for n in names)):
        if name in sys.modules or name in ("none", "auto"):
            continue
        with contextlib.suppress(Exception):
            if importlib.util.find_spec(name) is not None:
                importlib.import_module(name)


class Zygote:
    def __init__(self, events_fd: int, entry: str) -> None:
        self.events_fd = events_fd
        self.entry = entry  # "module:function" each proc runs, with its start blob
        self.controller = os.getppid()
        self.children: set[int] = set()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, lambda *_: self.exit())
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the controller's to handle

    def emit(self, event: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):
            os.write(self.events_fd, msgpack.packb(event))

    def serve(self) -> None:
        unpacker = msgpack.Unpacker(raw=False)
        self.emit({"ev": "up", "pid": os.getpid()})
        while True:
            try:
                readable, _, _ = select.select([0, self.wake_r], [], [])
            except InterruptedError:
                continue
            if self.wake_r in readable:
                os.read(self.wake_r, 4096)
                self.reap()
            if 0 in readable:
                data = os.read(0, 1 << 16)
                if not data:
                    self.exit()
                unpacker.feed(data)
                for command in unpacker:
                    self.handle(command)

    def handle(self, command: dict[str, Any]) -> None:
        op = command.get("op")
        if op == "spawn":
            # What the proc inherits (the runtime, torch, the preloads) goes
            # to the collector's permanent generation first: the proc's full
            # collections then never walk it (milliseconds per 30,000
            # objects) nor write to its pages, which stay shared with this
            # server and every other proc instead of being copied into each.
            gc.freeze()
            pid = os.fork()
            if pid == 0:
                if command.get("command"):
                    self.launch_proc(command["command"], command["blob"])
                self.become_proc(command["blob"])
            self.children.add(pid)
            self.emit({"ev": "spawned", "id": command["id"], "pid": pid})
        elif op == "preload":  # a worker's new controller uses more modules
            import_modules(list(command.get("names") or []))
        elif op == "kill":
            pid = command["pid"]
            if pid in self.children:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, command.get("sig", signal.SIGKILL))
        elif op == "exit":
            self.exit()

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.children.discard(pid)
            event = {"ev": "exited", "pid": pid, "code": os.waitstatus_to_exitcode(status)}
            why = last_words(pid)
            if why:
                event["why"] = why
            self.emit(event)

    def leave_server(self) -> None:
        """In a forked child: drop what belongs to the server."""
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        for fd in (self.events_fd, self.wake_r, self.wake_w):
            os.close(fd)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        die_with_parent(signal.SIGKILL)

    def become_proc(self, blob: bytes) -> None:
        code = 1
        try:
            self.leave_server()
            code = run_entry(self.entry, blob, forked=True)
        except BaseException:
            fail_to_start()
        finally:
            release_output()
            os._exit(code)

    def launch_proc(self, spec: dict[str, Any], blob: bytes) -> None:
        """In a forked child: execute the command ``spec`` (``command_spec``),
        handing it the start ``blob`` through an unnamed file it inherits."""
        try:
            self.leave_server()
            # it stays open through the exec: the new interpreter reads it
            carrier = tempfile.TemporaryFile(dir=os.environ.get("MONARCH_JOB_DIR") or None)  # noqa: SIM115
            carrier.write(blob)
            carrier.flush()
            fd = carrier.fileno()
            os.lseek(fd, 0, os.SEEK_SET)
            os.set_inheritable(fd, True)
            argv = [*spec["argv"], PROC_FLAG, str(fd), self.entry]
            base = {**os.environ, **spec["base"]} if spec.get("base") else dict(os.environ)
            if STARTED_BY_ENV in os.environ:  # this agent's starter, not the requester's
                base[STARTED_BY_ENV] = os.environ[STARTED_BY_ENV]
            os.execvpe(spec["program"], argv, proc_environment(spec, base))
        except BaseException:
            fail_to_start(f"the bootstrap command {spec.get('argv')!r} could not be executed:\n")
        finally:
            release_output()
            os._exit(1)

    def exit(self) -> None:
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + KILL_GRACE
        while self.children and time.monotonic() < deadline:
            self.reap()
            time.sleep(0.01)
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.reap()
        folder = os.environ.get("MONARCH_JOB_DIR")
        owns_folder = os.environ.get("MONARCH_AGENT_OWNS_JOB_DIR") == "1"
        if folder and owns_folder and not alive(self.controller):  # died without cleaning up
            shutil.rmtree(folder, ignore_errors=True)
        os._exit(0)


def run_entry(entry: str, blob: bytes, forked: bool = False) -> int:
    """Run a proc's ``entry`` ("module:function") with its start ``blob``; when
    it ends cleanly, run the process's exit handlers and finalizers (it ends
    with ``os._exit``). A ``forked`` proc first drops the handlers it inherited
    from the fork server."""
    started_with = forget_inherited_exit_handlers() if forked else frozenset(sys.modules)
    module, _, function = entry.partition(":")
    code = int(getattr(importlib.import_module(module), function)(blob))
    if code == 0:
        finalize(started_with)
    return code


def fail_to_start(prefix: str = "") -> None:
    """In a proc that failed while starting: say why on stderr, and leave it for its owner."""
    text = prefix + traceback.format_exc()
    release_output()
    sys.stderr.write(text)
    leave_last_words(text)


def proc_from_command(fd: int, entry: str) -> None:
    """A proc launched by a bootstrap command: read the start from ``fd``, then serve."""
    code = 1
    try:
        die_with_parent(signal.SIGKILL)
        with os.fdopen(fd, "rb") as carrier:
            blob = carrier.read()
        code = run_entry(entry, blob)
    except BaseException:
        fail_to_start()
    finally:
        release_output()
        os._exit(code)


LAST_WORDS_LIMIT = 4000  # characters of a failed proc's traceback kept for its error


def _last_words_path(pid: int) -> str | None:
    folder = os.environ.get("MONARCH_JOB_DIR")
    return os.path.join(folder, f"proc-{pid}.failed") if folder else None


def leave_last_words(text: str) -> None:
    """In a proc that fails while starting: keep why, for its owner's error."""
    path = _last_words_path(os.getpid())
    if path is not None:
        with contextlib.suppress(OSError), open(path, "w") as out:
            out.write(text[-LAST_WORDS_LIMIT:])


def last_words(pid: int) -> str:
    """What a proc that failed while starting left (removed once read)."""
    path = _last_words_path(pid)
    if path is None:
        return ""
    try:
        with open(path) as source:
            text = source.read()
    except OSError:
        return ""
    with contextlib.suppress(OSError):
        os.remove(path)
    return text


def serve_forked(parent: int, commands: int, events: int, entry: str, env: dict[str, str]) -> None:
    """In a child just forked from a worker that imported the runtime and
    started nothing yet (no thread, no socket): become its fork server
    without paying for a second interpreter and its imports. What a fresh
    server would not have is dropped first: every descriptor but stdio, the
    commands (as stdin) and the events; the signal handlers and logging
    handlers the worker's script set; its environment, for ``env``."""
    try:
        die_with_parent(signal.SIGTERM)
        os.dup2(commands, 0)
        os.dup2(events, 3)
        os.closerange(4, os.sysconf("SC_OPEN_MAX"))
        for sig in signal.valid_signals():
            handler = signal.getsignal(sig)
            if callable(handler) and handler is not signal.default_int_handler:
                signal.signal(sig, signal.SIG_DFL)
        logging.root.handlers.clear()
        logging.root.setLevel(logging.WARNING)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = [FORK_SERVER_MODULE]
        if os.getppid() != parent:  # the worker died before we got here
            os._exit(0)
        preload(entry.partition(":")[0])
        Zygote(3, entry).serve()
    finally:
        os._exit(1)  # serve() ends with os._exit(0): only a failure gets here


def main() -> None:
    if sys.argv[1:2] == [PROC_FLAG]:
        proc_from_command(int(sys.argv[2]), sys.argv[3])
    die_with_parent(signal.SIGTERM)
    events_fd, entry = int(sys.argv[1]), sys.argv[2]
    if os.getppid() == 1:  # the controller died before we got here
        os._exit(0)
    preload(entry.partition(":")[0])
    Zygote(events_fd, entry).serve()


if __name__ == "__main__":
    main()
