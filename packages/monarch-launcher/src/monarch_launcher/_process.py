"""Hosts that are worker processes on this machine: ``ProcessJob`` (a job
whose every host is a local worker subprocess, for trying multi-host
programs on one machine) and the workers ``hosts_from_config`` starts when
no hosts are configured."""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from monarch_actor import attach_to_workers
from monarch_actor.extension import background_thread

from ._errors import JobError
from ._job import JobState, JobTrait
from ._procutil import LocalProcess, end_sessions
from ._secret import SECRET_ENV, adopt_secret, current_secret, secret_for_workers
from ._worker import worker_command

__all__ = ["ProcessJob", "check_meshes", "start_local_workers"]

log = logging.getLogger("monarch.launcher.process")

_lifelines: list[int] = []  # write ends held for the life of this process


def check_meshes(meshes: Any, what: str) -> dict[str, int]:
    """``meshes`` as a dict of mesh name -> number of hosts, or a ValueError
    saying what is wrong with it."""
    if not isinstance(meshes, Mapping) or not meshes:
        raise ValueError(
            f"{what} needs meshes as a dict of mesh name -> number of hosts, e.g. "
            f"{{'trainers': 2}}; got {meshes!r}"
        )
    checked: dict[str, int] = {}
    for name, count in meshes.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(
                f"{what}: mesh name {name!r} must be a Python identifier (it becomes an "
                "attribute of the job's state)"
            )
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(
                f"{what}: mesh {name!r} needs a positive number of hosts, got {count!r}"
            )
        checked[name] = count
    return checked


def _free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _spawn(
    address: str,
    env: Mapping[str, str],
    log_path: str | None,
    lifeline: bool,
) -> subprocess.Popen[bytes]:
    """Start one worker process serving at ``address`` in a session of its own."""
    extra: list[str] = []
    pass_fds: tuple[int, ...] = ()
    read_end = -1
    if lifeline:
        read_end, write_end = os.pipe()
        _lifelines.append(write_end)
        extra = ["--lifeline", str(read_end)]
        pass_fds = (read_end,)
    out: Any = None
    try:
        if log_path is not None:
            out = open(log_path, "ab")  # noqa: SIM115 (closed below, once the child has it)
        return subprocess.Popen(
            worker_command(address, extra=extra, log_level=None if log_path else "WARNING"),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT if out is not None else None,
            start_new_session=True,
            pass_fds=pass_fds,
        )
    finally:
        if out is not None:
            out.close()
        if read_end >= 0:
            os.close(read_end)


def _tail(path: str | None, lines: int = 20) -> str:
    if path is None:
        return ""
    try:
        text = Path(path).read_text(errors="replace").rstrip().splitlines()[-lines:]
    except OSError:
        return ""
    return ("; its last output:\n    " + "\n    ".join(text)) if text else ""


def _watch(proc: subprocess.Popen[bytes], what: str, log_path: str | None) -> None:
    """Log the worker's end: info when it exits cleanly or was ended, a
    warning with its last output when it dies on its own."""

    def wait() -> None:
        code = proc.wait()
        if code in (0, -15, -9):
            log.info("%s (pid %d) exited with status %d", what, proc.pid, code)
        else:
            log.warning("%s (pid %d) died with status %d%s", what, proc.pid, code, _tail(log_path))

    background_thread(f"monarch-watch-{proc.pid}", wait).start()


def start_local_workers(name: str, count: int) -> list[str]:
    """Start ``count`` workers on this machine that end when this process
    ends (each watches a pipe this process holds open), and return their
    addresses."""
    folder = tempfile.mkdtemp(prefix=f"monarch_{name}_")
    atexit.register(shutil.rmtree, folder, True)
    env = {**os.environ, SECRET_ENV: secret_for_workers()}
    addresses = []
    for i in range(count):
        address = f"ipc://{folder}/{name}_{i}"
        proc = _spawn(address, env, None, lifeline=True)
        _watch(proc, f"worker {i} of {name}", None)
        addresses.append(address)
    return addresses


class ProcessJob(JobTrait):
    """A job whose every host is a worker process on this machine
    (``python -m monarch_launcher worker``), for running multi-host programs
    on one machine: ``ProcessJob({"trainers": 2}).state().trainers`` is a
    HostMesh of extent ``{"hosts": 2}``.

    The workers outlive the script that applied the job (a later run finds
    the job in its cache and attaches to them again) until ``kill()`` or a
    controller's ``shutdown()`` ends them. Their output goes to one log file
    per host (``log_files``).

    Args:
        meshes: each mesh's name (a Python identifier) and its number of hosts.
        env: variables added to the workers' environment (and so to their
            procs').
        transport: where the workers listen: Unix sockets (``"ipc"``, as in
            Monarch) or ``tcp://127.0.0.1`` ports (``"tcp"``).

    Raises:
        ValueError: ``meshes``, ``env`` or ``transport`` is malformed.
    """

    def __init__(
        self,
        meshes: dict[str, int],
        env: dict[str, str] | None = None,
        *,
        transport: Literal["ipc", "tcp"] = "ipc",
    ) -> None:
        self._meshes = check_meshes(meshes, "ProcessJob")
        if env is not None and not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise ValueError(f"ProcessJob: env must map str to str, got {env!r}")
        if transport not in ("ipc", "tcp"):
            raise ValueError(f"ProcessJob: transport is 'ipc' or 'tcp', got {transport!r}")
        self._env = dict(env) if env is not None else None
        self._transport = transport
        self._workers: dict[str, LocalProcess] = {}
        self._logs: dict[str, str] = {}
        self._folder: str | None = None
        self._secret: str | None = None
        self._patience = 0.0
        super().__init__()

    @property
    def log_files(self) -> dict[str, str]:
        """Each host's log file (``<mesh>_<i>`` -> path) while the job runs."""
        return dict(self._logs)

    @property
    def workers(self) -> dict[str, LocalProcess]:
        """Each host's worker process (``<mesh>_<i>`` -> pid and address)."""
        return dict(self._workers)

    def _create(self, client_script: str | None) -> None:
        if client_script is not None:
            raise JobError(
                "ProcessJob cannot run a client script: run the script yourself; its "
                "job.state() attaches to these workers"
            )
        self._secret = secret_for_workers()
        self._folder = tempfile.mkdtemp(prefix="monarch_process_job_")
        env = {**os.environ, **(self._env or {}), SECRET_ENV: self._secret}
        try:
            for mesh, count in self._meshes.items():
                for i in range(count):
                    key = f"{mesh}_{i}"
                    if self._transport == "ipc":
                        address = f"ipc://{self._folder}/{key}"
                    else:
                        address = f"tcp://127.0.0.1:{_free_tcp_port()}"
                    log_path = os.path.join(self._folder, f"{key}.log")
                    proc = _spawn(address, env, log_path, False)
                    self._workers[key] = LocalProcess.of(proc.pid, address)
                    self._logs[key] = log_path
                    _watch(proc, f"ProcessJob worker {key}", log_path)
                    log.info("ProcessJob: worker %s pid %d at %s", key, proc.pid, address)
        except BaseException:
            self._kill()
            raise

    def _dead(self) -> list[str]:
        return [key for key, proc in self._workers.items() if not proc.alive()]

    def _state(self) -> JobState:
        dead = self._dead()
        if dead or not self._workers:
            details = "".join(f"\n  {key}{_tail(self._logs.get(key), 5)}" for key in dead)
            raise JobError(
                f"this ProcessJob's worker processes are gone ({', '.join(dead) or 'none'}); "
                f"kill() the job and apply it again{details}"
            )
        adopt_secret(self._secret, "this ProcessJob")
        return JobState(
            {
                mesh: attach_to_workers(
                    name=mesh,
                    ca="trust_all_connections",
                    workers=[self._workers[f"{mesh}_{i}"].address for i in range(count)],
                )
                for mesh, count in self._meshes.items()
            }
        )

    def can_run(self, spec: JobTrait) -> bool:
        """Tell whether this running job can serve ``spec``.

        It can with the same meshes, env and transport, every worker alive,
        and a job secret this process can use.

        Args:
            spec: the job a script asks for.

        Returns:
            True if this job can stand in for ``spec``.
        """
        mine = current_secret()
        return (
            isinstance(spec, ProcessJob)
            and spec._meshes == self._meshes
            and spec._env == self._env
            and spec._transport == self._transport
            and self.active
            and bool(self._workers)
            and not self._dead()
            and (mine is None or mine == self._secret)
        )

    def _hosts_shut_down(self) -> None:
        self._patience = 5.0

    def _kill(self) -> None:
        patience, self._patience = getattr(self, "_patience", 0.0), 0.0
        end_sessions(list(self._workers.values()), patience=patience)
        self._workers.clear()
        self._logs.clear()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def __repr__(self) -> str:
        return f"ProcessJob({self._meshes!r})"
