"""``shell``: an interactive shell on the one host of a host mesh.

The remote side runs the user's shell inside a proc of that host, on a
pseudo-terminal when this process has a terminal, else on pipes (as ``ssh``
does: then the end of this process's input is the end of the shell's). Its
output streams back over a channel as it appears, and what the user types
goes to it as fire-and-forget messages (ordered, like every message from one
sender to one actor). The shell's exit status comes back as
the answer to the first call, so a proc that dies fails it with a
``SupervisionError`` instead of leaving the terminal waiting.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import pwd
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import threading
import tty
from collections.abc import Iterator
from typing import Any

from monarch_actor import Actor, Channel, HostMesh, Port, endpoint

from ._exec import client_workdir, rank_env

__all__ = ["ShellActor", "shell"]

CHUNK = 16 * 1024
OUTPUT_GRACE = 10.0  # seconds the last output may trail the exit status
HANG_UP_GRACE = 2.0  # seconds a hung-up shell gets to go before it is killed


def _login_shell() -> str:
    """The user's shell on this host: $SHELL, their passwd entry, bash, sh."""
    candidates = [os.environ.get("SHELL", "")]
    with contextlib.suppress(KeyError):
        candidates.append(pwd.getpwuid(os.getuid()).pw_shell)
    candidates += ["/bin/bash", "/bin/sh"]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("sh") or "/bin/sh"


def _set_window(fd: int, rows: int, columns: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


def _status(wait_status: int) -> int:
    """A wait status as a shell reports it: the exit code, or 128 + signal."""
    if os.WIFSIGNALED(wait_status):
        return 128 + os.WTERMSIG(wait_status)
    return os.waitstatus_to_exitcode(wait_status)


class ShellActor(Actor):
    """Runs one shell on its host for ``shell``: on a pseudo-terminal when
    the client has a terminal, else reading a pipe (as ``ssh`` does)."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.fd: int | None = None  # the terminal's master side, or the shell's stdin pipe
        self.interactive = False
        self.reaped = threading.Event()

    @endpoint(explicit_response_port=True)
    def start(
        self,
        done: Port[int],
        output: Port[tuple[int, bytes] | None],
        env: dict[str, str] | None,
        workdir: str | None,
        client_cwd: str | None,
        term: str,
        window: tuple[int, int] | None,
    ) -> None:
        """Start the shell (on a terminal of ``window``'s size, or on pipes
        if ``None``); its output goes to ``output`` as ``(1 or 2, bytes)``,
        ``None`` last, and its exit status to ``done`` once it has exited."""
        if self.pid is not None:
            done.exception(RuntimeError("this shell actor already runs a shell"))
            return
        program = _login_shell()
        cwd = workdir or client_workdir(client_cwd) or os.path.expanduser("~")
        if not os.path.isdir(cwd):
            done.exception(FileNotFoundError(f"workdir {cwd!r} does not exist on this host"))
            return
        variables = {**os.environ, **rank_env(), "TERM": term, **(env or {})}
        self.interactive = window is not None
        if window is not None:
            pid, fd = os.forkpty()
            if pid == 0:  # the child: only system calls until exec
                try:
                    os.chdir(cwd)
                    os.execve(program, [program, "-i"], variables)
                finally:
                    os._exit(127)
            _set_window(fd, *window)
            streams = [(1, fd)]
        else:
            child = subprocess.Popen(
                [program],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=cwd,
                env=variables,
                start_new_session=True,  # hang_up reaches what it starts
            )
            assert child.stdin and child.stdout and child.stderr
            pid, fd = child.pid, os.dup(child.stdin.fileno())
            streams = [(1, os.dup(child.stdout.fileno())), (2, os.dup(child.stderr.fileno()))]
            for pipe in (child.stdin, child.stdout, child.stderr):
                pipe.close()
        self.pid, self.fd = pid, fd
        readers = [
            threading.Thread(target=_pump, args=(stream, source, output, source != fd), daemon=True)
            for stream, source in streams
        ]
        for reader in readers:
            reader.start()
        threading.Thread(
            target=self._reap, args=(readers, done, output), name="monarch-shell", daemon=True
        ).start()

    def _reap(
        self,
        readers: list[threading.Thread],
        done: Port[int],
        output: Port[tuple[int, bytes] | None],
    ) -> None:
        assert self.pid is not None
        for reader in readers:  # all output is out before the status
            reader.join()
        _, wait_status = os.waitpid(self.pid, 0)
        self.reaped.set()
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
        self.fd = None
        output.send(None)
        done.send(_status(wait_status))

    @endpoint
    def write(self, data: bytes) -> None:
        """Type ``data`` into the shell."""
        if self.fd is not None and data:
            with contextlib.suppress(OSError):
                os.write(self.fd, data)

    @endpoint
    def end_input(self) -> None:
        """The client's input ended: so does the shell's."""
        if self.fd is not None and not self.interactive:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None

    @endpoint
    def resize(self, rows: int, columns: int) -> None:
        """The client's terminal changed size."""
        if self.fd is not None and self.interactive:
            with contextlib.suppress(OSError):
                _set_window(self.fd, rows, columns)

    @endpoint
    def hang_up(self) -> None:
        """The client went away, or its input ended at a terminal: end the
        shell and what it started, the job in the foreground included (an
        interactive shell's foreground job has a process group of its own)."""
        if self.pid is None:
            return
        groups = {self.pid}
        if self.interactive and self.fd is not None:
            with contextlib.suppress(OSError):
                groups.add(os.tcgetpgrp(self.fd))
        self._signal(groups, signal.SIGHUP)
        # a shell started with SIGHUP ignored (inherited from a controller run under
        # nohup) would not notice: it is killed if it is still there after a grace
        timer = threading.Timer(HANG_UP_GRACE, self._signal, (groups, signal.SIGKILL, True))
        timer.daemon = True
        timer.start()

    def _signal(self, groups: set[int], sig: int, unless_reaped: bool = False) -> None:
        if unless_reaped and self.reaped.is_set():
            return
        for group in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, sig)


def _pump(stream: int, fd: int, output: Port[tuple[int, bytes] | None], close: bool) -> None:
    """Send what the shell writes to ``fd`` until it is closed on its side
    (then close ``fd`` too if ``close``)."""
    try:
        while True:
            try:
                data = os.read(fd, CHUNK)
            except OSError as error:  # EIO: the terminal's other side is gone
                if error.errno not in (errno.EIO, errno.EBADF):
                    raise
                return
            if not data:
                return
            output.send((stream, data))
    finally:
        if close:
            os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _window(fd: int) -> tuple[int, int]:
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return 24, 80
    return size.lines, size.columns


@contextlib.contextmanager
def _raw(fd: int) -> Iterator[None]:
    """The terminal at ``fd`` in raw mode (keys go to the remote shell as
    typed, Ctrl-C included); restored however the session ends."""
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd, termios.TCSANOW)  # keeps what was typed ahead
        yield
    finally:
        with contextlib.suppress(termios.error):  # a terminal that hung up has no settings
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def shell(
    host_mesh: HostMesh,
    *,
    env: dict[str, str] | None = None,
    workdir: str | None = None,
) -> int:
    """Run an interactive shell on the one host of ``host_mesh``.

    The shell (the user's ``$SHELL`` there, else bash or sh) has
    ``MONARCH_RANK_*``/``MONARCH_SIZE_*``, ``TERM`` and ``env`` in its
    environment. When this process's standard input is a terminal, the shell
    gets a pseudo-terminal of its size (following changes) and this terminal
    is in raw mode for the session (if that terminal's input ends, the shell
    and its foreground job are hung up); otherwise the shell reads what this
    process reads (a pipe, a file) until its end, and its output and errors
    come back separately, as with ``ssh host < script``.

    Args:
        host_mesh: a mesh of exactly one host (slice a larger one first).
        env: variables added to the shell's environment.
        workdir: where the shell starts (default: this script's working
            directory if it exists on that host, else the home directory).

    Returns:
        The shell's exit status (128 + n if signal n ended it).

    Raises:
        TypeError: ``host_mesh`` is not a ``HostMesh``.
        ValueError: ``host_mesh`` is not a singleton (it has more than one host).
        SupervisionError: the remote process died during the session.
        OSError: the shell's output could not be copied here (``BrokenPipeError``:
            whatever read this process's output went away); the remote shell
            is hung up first.
    """
    size = getattr(host_mesh, "size", None)
    if not isinstance(host_mesh, HostMesh) and not callable(size):
        raise TypeError(f"shell() takes a HostMesh of one host, got {type(host_mesh).__name__}")
    if host_mesh.size() != 1:
        raise ValueError(
            f"shell() needs a singleton HostMesh (exactly one host), got {host_mesh.size()} "
            "hosts: slice the mesh to one host first, e.g. shell(hosts.slice(hosts=0))"
        )
    if not isinstance(host_mesh, HostMesh):
        raise TypeError(f"shell() takes a HostMesh of one host, got {type(host_mesh).__name__}")
    stdin_fd, stdout_fd, stderr_fd = sys.stdin.fileno(), sys.stdout.fileno(), sys.stderr.fileno()
    interactive = os.isatty(stdin_fd)
    output, received = Channel[Any].open()
    procs = host_mesh.spawn_procs()
    try:
        actor = procs.spawn("monarch_shell", ShellActor)
        term = os.environ.get("TERM", "xterm-256color")
        window = _window(stdin_fd) if interactive else None
        done = actor.start.call_one(output, env, workdir, os.getcwd(), term, window)
        finished = threading.Event()
        failed: list[BaseException] = []  # what stopped the output's copy here

        def show() -> None:
            try:
                while (item := received.recv().get()) is not None:
                    stream, data = item
                    _write_all(stdout_fd if stream == 1 else stderr_fd, data)
            except BaseException as error:  # a broken pipe, a closed terminal
                if not finished.is_set():
                    failed.append(error)
                    # no one can see the shell any more: end it, so the wait below ends
                    with contextlib.suppress(Exception):
                        actor.hang_up.broadcast()
            finally:
                finished.set()

        threading.Thread(target=show, name="monarch-shell-show", daemon=True).start()
        feeder = _Feeder(actor, stdin_fd, interactive)
        with _raw(stdin_fd) if interactive else contextlib.nullcontext(), feeder:
            try:
                status: int = done.get()
            except BaseException:
                with contextlib.suppress(Exception):  # its proc may be gone
                    actor.hang_up.broadcast()
                raise
        finished.wait(OUTPUT_GRACE)
        if failed:  # the caller hears why it saw none of the shell's last output
            raise failed[0]
        finished.set()
        return status
    finally:
        received.close()
        with contextlib.suppress(Exception):
            procs.stop().get(timeout=30)


class _Feeder:
    """Types this process's input into the remote shell (a thread), and
    forwards terminal size changes while the session lasts."""

    def __init__(self, actor: Any, fd: int, interactive: bool) -> None:
        self.actor = actor
        self.fd = fd
        self.interactive = interactive
        self.previous_winch: Any = None
        self.stop_r, self.stop_w = os.pipe()

    def __enter__(self) -> _Feeder:
        if self.interactive and threading.current_thread() is threading.main_thread():
            self.previous_winch = signal.signal(signal.SIGWINCH, self._resized)
        threading.Thread(target=self._feed, name="monarch-shell-input", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):  # the thread may have ended at end of input
            os.write(self.stop_w, b"x")
        os.close(self.stop_w)
        if self.previous_winch is not None:
            signal.signal(signal.SIGWINCH, self.previous_winch)

    def _resized(self, signum: int, frame: object) -> None:
        self.actor.resize.broadcast(*_window(self.fd))

    def _feed(self) -> None:
        try:
            while True:
                ready, _, _ = select.select([self.fd, self.stop_r], [], [])
                if self.stop_r in ready:
                    return
                try:
                    data = os.read(self.fd, CHUNK)
                except OSError:  # EIO: the terminal hung up; its input ended too
                    data = b""
                if not data:
                    self._ended()
                    return
                self.actor.write.broadcast(data)
        finally:
            os.close(self.stop_r)

    def _ended(self) -> None:
        """This process's input ended. On pipes the shell's input ends too (it
        runs what it has, then exits); at a terminal, nothing more can be typed
        to the shell or what runs in its foreground, so they are hung up, as a
        terminal that closes hangs up its session."""
        if self.interactive:
            self.actor.hang_up.broadcast()
        else:
            self.actor.end_input.broadcast()
