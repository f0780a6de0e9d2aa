"""Jobs: a declarative spec of the hosts a program needs (``JobTrait``),
brought into existence by ``apply()`` on a scheduler, and its *state*: the
host meshes of the running job (``JobState``). A job pickles, so that one
process applies it and another (a later run of the same script, the
``monarch job`` command) finds it again in a cache file and attaches to the
same workers."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import pickle
import subprocess
import sys
import tempfile
import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

from monarch_actor import HostMesh, this_host
from monarch_actor.extension import check_private, private_dir, read_private

from ._errors import Unsupported
from ._observe import MeshAdminConfig, TelemetryConfig, start_observers
from ._procutil import LocalProcess, end_sessions

__all__ = [
    "BATCH_ENV",
    "DEFAULT_JOB_PATH",
    "JOB_CACHE_ENV",
    "JobState",
    "JobTrait",
    "LocalJob",
    "job_file",
    "job_load",
    "job_loads",
]

log = logging.getLogger("monarch.launcher.job")

DEFAULT_JOB_PATH: str = ".monarch/job_state.pkl"
"""The name of the cache where ``JobTrait.state()`` keeps the job it applied,
one per working folder: a later run of the same script from the same folder
finds the job there and attaches to its workers instead of starting new ones.
As in Monarch the name reads as a path under the current folder; the file
itself lives in this user's own state folder (``job_file`` says where), so
that nothing another user leaves in a shared working folder is ever read."""

JOB_CACHE_ENV = "MONARCH_JOB_CACHE"
"""Names the file ``DEFAULT_JOB_PATH`` stands for, instead of this user's
cache for the current folder (a Slurm batch job's client gets the file its
submitter wrote)."""


def job_file(path: str) -> str:
    """The file a job file name stands for: ``DEFAULT_JOB_PATH`` is this
    user's cache for the current folder (``$MONARCH_JOB_CACHE``, else
    ``<state folder>/jobs/cache/<hash of the folder>.pkl``, the folder
    mode 0700); any other name is itself.

    Args:
        path: a job file's name, as given to ``state``, ``dump`` or ``job_load``.

    Returns:
        The path of the file.

    Raises:
        PermissionError: this user's state folder is not this user's alone.
    """
    if path != DEFAULT_JOB_PATH:
        return path
    named = os.environ.get(JOB_CACHE_ENV)
    if named:
        return named
    here = hashlib.sha256(os.path.realpath(os.getcwd()).encode()).hexdigest()[:24]
    return str(private_dir("jobs", "cache") / f"{here}.pkl")


_SHUTDOWN_TIMEOUT = 30.0  # seconds for attached hosts to shut down in kill()

BATCH_ENV = "MONARCH_BATCH_JOB"
"""Set to ``1`` in the environment of a client script a job runs itself
(``apply(client_script=...)``)."""


class JobState:
    """The host meshes of a running job, one attribute per mesh name.

    ``job.state()`` returns one: ``state.trainers`` is the ``HostMesh`` of the
    mesh named ``"trainers"``; a name the job does not have raises
    ``AttributeError`` listing the names it has.

    As in Monarch, it also says where to look at the job:
    ``state.dashboard_url`` and ``state.admin_url`` are the URLs of the
    dashboard and the mesh admin server (``http://HOST:PORT/#token=...``)
    when ``enable_telemetry(include_dashboard=True)``/``enable_admin()``
    started them, else ``None``. ``telemetry_url``, ``query_engine`` and
    ``query_engine_client`` (Monarch's telemetry store) are always ``None``.

    Args:
        hosts: each mesh's name and its host mesh.
        query_engine: accepted for compatibility with Monarch.
        query_engine_client: accepted for compatibility with Monarch.
        telemetry_url: accepted for compatibility with Monarch.
        dashboard_url: the dashboard's URL, or ``None``.
        admin_url: the mesh admin server's URL, or ``None``.

    Attributes:
        query_engine: Monarch's telemetry query engine: always ``None`` here.
        query_engine_client: its client: always ``None`` here.
        telemetry_url: Monarch's telemetry store: always ``None`` here.
        dashboard_url: the dashboard's URL (with ``#token=...``), or ``None``.
        admin_url: the mesh admin server's URL (with ``#token=...``), or ``None``.
    """

    def __init__(
        self,
        hosts: Mapping[str, HostMesh],
        query_engine: Any = None,
        query_engine_client: Any = None,
        telemetry_url: str | None = None,
        dashboard_url: str | None = None,
        admin_url: str | None = None,
    ) -> None:
        self._hosts: dict[str, HostMesh] = dict(hosts)
        self.query_engine = query_engine
        self.query_engine_client = query_engine_client
        self.telemetry_url = telemetry_url
        self.dashboard_url = dashboard_url
        self.admin_url = admin_url

    def __getattr__(self, name: str) -> HostMesh:
        if name.startswith("__") or name == "_hosts":
            raise AttributeError(name)
        try:
            return self._hosts[name]
        except KeyError:
            available = ", ".join(sorted(self._hosts))
            raise AttributeError(
                f"'{name}' is not a valid host mesh name. Available names: {available}"
            ) from None

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *self._hosts})

    def __repr__(self) -> str:
        return f"JobState(hosts={self._hosts})"


class _CachedRunning(NamedTuple):
    """This spec runs as ``job``, a job applied earlier and loaded from a cache."""

    job: JobTrait


_Status = Literal["running", "not_running"] | _CachedRunning


class JobTrait(ABC):
    """A job: a declarative specification of named host meshes and the
    scheduler they come from, plus, once applied, the running job's identity.

    ``apply()`` brings the job into existence (a no-op if it runs already);
    ``state()`` returns its host meshes, applying it first if needed, or
    reusing a job cached by an earlier run that can run this spec;
    ``kill()`` ends it. Subclasses implement ``_create`` (start the job),
    ``_state`` (attach to its workers), ``can_run`` and ``_kill``.
    """

    _shutdown_on_kill = True  # kill() first shuts down the hosts this process attached to

    def __init__(self) -> None:
        self._status: _Status = "not_running"
        self._apply_id: str | None = None
        self._attached: list[HostMesh] = []
        self._admin: MeshAdminConfig | None = None
        self._telemetry: TelemetryConfig | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_attached", None)  # connections of this process, not part of the job
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._attached = []

    # -- what a scheduler provides ------------------------------------------------------

    @abstractmethod
    def _create(self, client_script: str | None) -> None:
        """Start the job on the scheduler (``apply`` sets the status after)."""

    @abstractmethod
    def _state(self) -> JobState:
        """Attach to the running job's workers: one HostMesh per mesh name."""

    @abstractmethod
    def can_run(self, spec: JobTrait) -> bool:
        """Tell whether this (running) job can serve ``spec``.

        It can when it is the same kind of job, with the same meshes and
        options, and still alive. A cached job that can run the spec a script
        asks for is reused instead of applying a new one.

        Args:
            spec: the job a script asks for.

        Returns:
            True if this job can stand in for ``spec``.
        """

    @abstractmethod
    def _kill(self) -> None:
        """End the job on the scheduler."""

    def _check_killable(self) -> None:
        """Raise (before anything is shut down) if this job cannot be ended."""
        return None

    def _hosts_shut_down(self) -> None:
        """Called before ``_kill`` when ``kill()`` shut down hosts this process
        had attached to: their workers are exiting on their own."""
        return None

    # -- the lifecycle ------------------------------------------------------------------

    @property
    def _running(self) -> JobTrait | None:
        status = self._status
        if isinstance(status, _CachedRunning):
            return status.job
        return self if status == "running" else None

    @property
    def active(self) -> bool:
        """True once applied (or matched to a cached running job), until killed."""
        return self._running is not None

    @property
    def apply_id(self) -> str | None:
        """A UUID naming the current allocation of this job, made by the
        ``apply()`` that created it (kept across dump and load); None before."""
        running = self._running
        return running._apply_id if running is not None else None

    def apply(self, client_script: str | None = None) -> None:
        """Bring the job as specified into existence, unless it already runs.

        Args:
            client_script: a script the job also runs as its client (where the
                scheduler supports it), with ``MONARCH_BATCH_JOB=1`` set;
                None runs no client.

        Raises:
            JobError: the scheduler could not start the job, or cannot run a
                client script.
        """
        if self._running is None:
            self._create(client_script)
            self._apply_id = str(uuid.uuid4())
            self._status = "running"

    def state(self, cached_path: str | None = DEFAULT_JOB_PATH) -> JobState:
        """Get the host meshes of the running job, applying it first if needed.

        If this job is not running yet, a job cached at ``cached_path`` that
        can run this spec is reused (a cached one that cannot is killed);
        otherwise the job is applied and saved there for the next run.

        Args:
            cached_path: the job cache file to reuse and write; None neither
                reads nor writes a cache.

        Returns:
            The running job's host meshes, one attribute per mesh name.

        Raises:
            JobError: the job could not be started or its workers reached.
        """
        if cached_path is not None:
            cached_path = job_file(cached_path)
        running = self._running
        if running is None:
            cached = self._load_cached(cached_path)
            if cached is not None:
                log.info("using the job cached at %s", cached_path)
                self._status = _CachedRunning(cached)
                running = cached
        if running is not None:
            return self._remember(running._state())
        self.apply()
        state = self._remember(self._state())
        if cached_path is not None:
            log.info("saving the job to %s", cached_path)
            self.dump(cached_path)
        return state

    def _remember(self, state: JobState) -> JobState:
        if self._shutdown_on_kill:
            self._attached.extend(state._hosts.values())
        # a job loaded from an older cache file has neither attribute
        admin_url, dashboard_url = start_observers(
            getattr(self, "_admin", None), getattr(self, "_telemetry", None)
        )
        state.admin_url = admin_url or state.admin_url
        state.dashboard_url = dashboard_url or state.dashboard_url
        return state

    def _load_cached(self, cached_path: str | None) -> JobTrait | None:
        if cached_path is None:
            return None
        try:
            job = job_load(cached_path)
        except FileNotFoundError:
            return None
        except Exception as error:  # unreadable: not ours to reuse
            log.warning("ignoring the job cache %s, which cannot be loaded: %s", cached_path, error)
            return None
        running = job._running
        if running is None:
            return None
        if running.can_run(self):
            return job
        log.info("the job cached at %s cannot run this spec: ending it", cached_path)
        try:
            running._kill()
        except Unsupported as error:
            log.info("the cached job cannot be ended from here: %s", error)
        except Exception as error:
            log.warning("ending the cached job failed: %s", error)
        target = os.path.realpath(cached_path)
        with contextlib.suppress(FileNotFoundError):
            os.remove(target)
        return None

    def kill(self) -> None:
        """End the job (its workers exit, its allocation is released). Host
        meshes this process got from ``state()`` are shut down first, so that
        their procs stop in order instead of failing as lost."""
        running = self._running
        if running is not None:
            running._check_killable()
        attached, self._attached = self._attached, []
        shut_down = False
        for hosts in attached:
            try:
                # (a shutdown that overtakes the attach is not heard: wait for it first)
                hosts.initialized.get(timeout=_SHUTDOWN_TIMEOUT)
                hosts.shutdown().get(timeout=_SHUTDOWN_TIMEOUT)
                shut_down = True
            except Exception as error:
                log.info("shutting down %r before killing the job: %s", hosts, error)
        if running is not None:
            if shut_down:
                running._hosts_shut_down()
            running._kill()
        self._status = "not_running"

    # -- saving -------------------------------------------------------------------------

    def dumps(self) -> bytes:
        """This job, pickled (``job_loads`` reads it back)."""
        return pickle.dumps(self)

    def dump(self, path: str) -> None:
        """Save this job to a file, which ``job_load`` reads back.

        The file is readable by this user only (mode 0600): a running job
        holds the secret its workers accept. ``job_load`` refuses a file that
        is not this user's alone.

        Args:
            path: the file to write; a symlink there is followed and missing
                folders are created (mode 0700). ``DEFAULT_JOB_PATH`` is this
                user's cache for the current folder (``job_file``).
        """
        target = os.path.realpath(job_file(path))
        os.makedirs(os.path.dirname(target) or ".", mode=0o700, exist_ok=True)
        data = self.dumps()
        fd, temporary = tempfile.mkstemp(dir=os.path.dirname(target) or ".", prefix=".job-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    # -- looking at the job ---------------------------------------------------------------

    def enable_telemetry(
        self,
        config: TelemetryConfig | None = None,
        *,
        mesh_admin_config: MeshAdminConfig | None = None,
        **kwargs: Any,
    ) -> JobTrait:
        """Start the mesh admin server (and, with ``include_dashboard``, the
        dashboard) when ``state()`` next makes the job's state.

        The dashboard is served by the admin server: one server, at the
        address ``enable_admin``/``mesh_admin_config`` asked for, else on
        ``dashboard_port``. It prints ``Mesh admin server listening on URL``
        and ``Monarch Dashboard: URL`` (the same URL, the token in its
        fragment); ``state.dashboard_url`` gives it.

        Args:
            config: the telemetry settings; made from ``kwargs`` when omitted.
            mesh_admin_config: where the admin server listens; what
                ``enable_admin`` chose, if it did, unless given here.
            kwargs: ``TelemetryConfig`` fields.

        Returns:
            This job, for chaining.

        Raises:
            TypeError: a keyword is not a ``TelemetryConfig`` field.
        """
        self._telemetry = config if config is not None else TelemetryConfig(**kwargs)
        if mesh_admin_config is not None or getattr(self, "_admin", None) is None:
            self._admin = mesh_admin_config or MeshAdminConfig()
        return self

    def enable_admin(self, config: MeshAdminConfig | None = None, **kwargs: Any) -> JobTrait:
        """Start the mesh admin server when ``state()`` next makes the job's
        state; it prints ``Mesh admin server listening on
        http://HOST:PORT/#token=...`` (``state.admin_url``), at the address
        asked for, the dashboard too when ``enable_telemetry`` asks for it.

        Args:
            config: where it listens; made from ``kwargs`` when omitted.
            kwargs: ``MeshAdminConfig`` fields (``admin_addr``).

        Returns:
            This job, for chaining.

        Raises:
            TypeError: a keyword is not a ``MeshAdminConfig`` field.
        """
        self._admin = config if config is not None else MeshAdminConfig(**kwargs)
        return self

    # -- what Monarch has and this implementation does not ----------------------------------

    def remote_mount(self, *args: Any, **kwargs: Any) -> None:
        """Not available: mounting a local folder on the workers (FUSE)."""
        raise Unsupported(
            "remote_mount() is not available in Monarch in Python: copy or share the folder "
            "with the workers yourself (a shared file system, rsync)"
        )

    def gather_mount(self, *args: Any, **kwargs: Any) -> None:
        """Not available: mounting the workers' folders here (FUSE)."""
        raise Unsupported(
            "gather_mount() is not available in Monarch in Python: copy the workers' files "
            "back yourself (a shared file system, rsync)"
        )


def job_loads(data: bytes) -> JobTrait:
    """Read back a job from the bytes ``JobTrait.dumps()`` made.

    Unpickling runs code: load only jobs you saved yourself.

    Args:
        data: the pickled job.

    Returns:
        The job, running if it was when saved.

    Raises:
        TypeError: the data holds something other than a job.
    """
    job = pickle.loads(data)
    if not isinstance(job, JobTrait):
        raise TypeError(f"the data holds a {type(job).__name__}, not a job (JobTrait)")
    return job


def job_load(filename: str = DEFAULT_JOB_PATH) -> JobTrait:
    """Read back the job ``JobTrait.dump()`` saved to a file.

    Unpickling runs code, so the file is read only when it is this user's
    alone: owned by this user, readable and writable by no one else, in a
    folder no one else may write (a file another user planted in a shared
    working folder is refused, never unpickled).

    Args:
        filename: the file to read; by default the cache ``state()`` writes
            for the current folder (``job_file``).

    Returns:
        The job, running if it was when saved.

    Raises:
        FileNotFoundError: there is no such file.
        PermissionError: the file or its folder is not this user's alone
            (``monarch_actor.extension.PrivateFileError``; the message says
            how to fix it).
        TypeError: the file holds something other than a job.
    """
    filename = job_file(filename)
    folder = os.path.dirname(os.path.realpath(filename))
    check_private(folder, "the folder of the job file", secret=False)
    data = read_private(filename, "the job file")
    try:
        return job_loads(data)
    except TypeError as error:
        raise TypeError(f"{filename}: {error}") from None


class LocalJob(JobTrait):
    """A job on this machine alone: every named mesh is ``this_host()``.

    A stand-in that lets a program switch between local and scheduled runs by
    changing only its job.

    Args:
        hosts: the names of the host meshes (one name or several), each
            ``this_host()``.
    """

    _shutdown_on_kill = False  # this_host() is this process's own: kill() leaves it be

    def __init__(self, hosts: Sequence[str] = ("hosts",)) -> None:
        if isinstance(hosts, str):
            hosts = (hosts,)
        self._host_names = tuple(hosts)
        self._client: LocalProcess | None = None
        self._log_dir: str | None = None
        super().__init__()

    def _create(self, client_script: str | None) -> None:
        if client_script is None:
            return  # this machine is always there
        logs = Path(".monarch/logs")
        logs.mkdir(parents=True, exist_ok=True)
        self._log_dir = tempfile.mkdtemp(prefix="job_", dir=logs)
        env = {**os.environ, BATCH_ENV: "1"}
        with (
            open(os.path.join(self._log_dir, "stdout.log"), "wb") as out,
            open(os.path.join(self._log_dir, "stderr.log"), "wb") as err,
        ):
            client = subprocess.Popen(
                [sys.executable, client_script],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        self._client = LocalProcess.of(client.pid)
        log.info("started %s as pid %d; logs in %s", client_script, client.pid, self._log_dir)

    @property
    def log_dir(self) -> str | None:
        """Where the client script ``apply(client_script=...)`` started writes
        its output (``stdout.log``, ``stderr.log``), if any."""
        return self._log_dir

    @property
    def client_pid(self) -> int | None:
        """The pid of the client script ``apply(client_script=...)`` started."""
        return self._client.pid if self._client is not None else None

    def _state(self) -> JobState:
        return JobState({name: this_host() for name in self._host_names})

    def can_run(self, spec: JobTrait) -> bool:
        """Always False: a local job costs nothing to apply, so no cache is reused.

        The spec's own mesh names are used instead.

        Args:
            spec: the job a script asks for (not consulted).

        Returns:
            False.
        """
        return False

    def _kill(self) -> None:
        if self._client is not None:
            end_sessions([self._client])
            self._client = None

    def __repr__(self) -> str:
        return f"LocalJob(hosts={self._host_names!r})"
