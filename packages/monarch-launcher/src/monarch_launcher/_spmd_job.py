"""torchrun-style jobs (``monarch.job.spmd``): ``serve`` turns a torchrun
command, or a TorchX ``AppDef`` whose role runs one, into an ``SPMDJob``
whose hosts are workers on a scheduler; ``run_spmd`` then runs the training
script on every rank as torchrun would. ``StoreJob`` goes the other way: the
ranks of a job torchrun (or any launcher) already started publish one worker
per host through their ``torch.distributed`` store, and rank 0 drives them as
a job.

TorchX is not needed: an ``AppDef`` is read by its attributes (``roles``; a
role's ``name``, ``entrypoint``, ``args``, ``num_replicas``, ``env``,
``resource`` and ``workspace``), so TorchX's own objects work, and so does
anything shaped like them.
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import re
import shutil
import socket
import tempfile
import uuid
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from monarch_actor import Actor, HostMesh, attach_to_workers, endpoint, this_host

from ._errors import JobError, Unsupported
from ._job import JobState, JobTrait
from ._process import _spawn, _tail, _watch
from ._procutil import LocalProcess, end_sessions
from ._secret import SECRET_ENV, adopt_secret, current_secret, secret_for_workers
from ._slurm import SlurmJob
from ._spmd import SPMDActor

__all__ = ["SPMDJob", "StoreJob", "serve"]

log = logging.getLogger("monarch.launcher.spmd")

_MESH = "workers"  # the name of an SPMDJob's host mesh, as in Monarch
_LOCAL_SCHEDULERS = ("local", "local_cwd")
_SUPPORTED = "'local_cwd' (worker processes on this machine) or 'slurm'"


# -- reading a torchrun command -------------------------------------------------------


def _torchrun_options() -> argparse.ArgumentParser:
    """torchrun's own options (``torch.distributed.run``), so that they can be
    told apart from the training script and its arguments."""
    p = argparse.ArgumentParser(prog="torchrun", add_help=False, allow_abbrev=False)
    valued = [
        ("--nnodes",),
        ("--nproc-per-node", "--nproc_per_node"),
        ("--rdzv-backend", "--rdzv_backend"),
        ("--rdzv-endpoint", "--rdzv_endpoint"),
        ("--rdzv-id", "--rdzv_id"),
        ("--rdzv-conf", "--rdzv_conf"),
        ("--max-restarts", "--max_restarts"),
        ("--monitor-interval", "--monitor_interval"),
        ("--start-method", "--start_method"),
        ("--role",),
        ("--log-dir", "--log_dir"),
        ("-r", "--redirects"),
        ("-t", "--tee"),
        ("--local-ranks-filter", "--local_ranks_filter"),
        ("--node-rank", "--node_rank"),
        ("--master-addr", "--master_addr"),
        ("--master-port", "--master_port"),
        ("--local-addr", "--local_addr"),
        ("--logs-specs", "--logs_specs"),
    ]
    for names in valued:
        p.add_argument(*names)
    for names in [
        ("--standalone",),
        ("-m", "--module"),
        ("--no-python", "--no_python"),
        ("--run-path", "--run_path"),
    ]:
        p.add_argument(*names, action="store_true")
    p.add_argument("training_script", nargs="?")
    p.add_argument("training_script_args", nargs=argparse.REMAINDER)
    return p


_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
_TORCHRUN = ("torchrun", "torch.distributed.run")


def _is_python(word: str) -> bool:
    return _PYTHON.fullmatch(os.path.basename(word)) is not None


def _command_of(role: Mapping[str, Any]) -> list[str]:
    """The command a role runs: its entrypoint and args, or only its args when
    the entrypoint is a wrapper script that runs them (``entrypoint.sh``)."""
    entrypoint = str(role.get("entrypoint") or "")
    args = [str(a) for a in role.get("args") or []]
    if entrypoint in _TORCHRUN or _is_python(entrypoint):
        return [entrypoint, *args]
    return args


def _parse_command(command: Sequence[str]) -> tuple[list[str], int]:
    """The training script with its arguments (``["train.py", ...]`` or
    ``["-m", "pkg.train", ...]``) and the number of processes per host, from
    a torchrun (or plain python) command line."""
    if not command:
        raise ValueError(
            "the role runs no command: give it a torchrun command, e.g. "
            "['torchrun', '--nproc-per-node=2', 'train.py']"
        )
    head = command[0]
    if head in _TORCHRUN:
        rest = list(command[1:])
    elif _is_python(head):
        if len(command) >= 3 and command[1] == "-m" and command[2] in _TORCHRUN:
            rest = list(command[3:])
        else:
            plain = list(command[1:])
            if not plain:
                raise ValueError(f"{list(command)!r} names no script to run")
            return plain, 1  # a plain script: one process per host
    else:
        raise ValueError(
            f"cannot read {list(command)!r} as a torchrun command: it should start with "
            f"torchrun, torch.distributed.run, python or python3, not {head!r}"
        )
    options, _unknown = _torchrun_options().parse_known_args(rest)
    if options.no_python:
        raise Unsupported(
            "torchrun --no-python is not supported: each rank runs a Python script or module "
            "inside its Monarch process; run the program from a script"
        )
    nproc = 1
    text = options.nproc_per_node or "1"
    try:
        nproc = int(text)
    except ValueError:
        warnings.warn(
            f"--nproc-per-node={text} is not a number; running 1 process per host. "
            "Give the number of processes instead",
            stacklevel=3,
        )
    if nproc < 1:
        raise ValueError(f"--nproc-per-node must be at least 1, got {nproc}")
    script: list[str] = ["-m"] if options.module else []
    if options.training_script:
        script.append(options.training_script)
    script.extend(options.training_script_args or [])
    if not script or script == ["-m"]:
        raise ValueError(f"{list(command)!r} names no training script or module to run")
    return script, nproc


def _check_single_node(command: Sequence[str]) -> None:
    head = command[0]
    if head in _TORCHRUN:
        rest = list(command[1:])
    elif len(command) >= 3 and _is_python(head) and command[1] == "-m" and command[2] in _TORCHRUN:
        rest = list(command[3:])
    else:
        return  # a plain script: one process
    found, _ = _torchrun_options().parse_known_args(rest)  # torchrun's own --nnodes only
    if found.nnodes is not None and found.nnodes.strip() not in ("1", "1:1"):
        raise ValueError(
            f"serve() runs a torchrun command on one host only; got --nnodes={found.nnodes}. "
            "For several hosts, pass a TorchX AppDef whose role has num_replicas hosts, with "
            "a scheduler that allocates them (e.g. 'slurm')"
        )


# -- reading an AppDef ----------------------------------------------------------------


def _role_of(appdef: Any) -> tuple[Any, dict[str, Any]]:
    """The one role of a (duck-typed) TorchX AppDef, and what serve needs of it."""
    roles = getattr(appdef, "roles", None)
    if roles is None or isinstance(appdef, str | bytes):
        raise TypeError(
            "serve() takes a TorchX AppDef (an object with .roles) or a torchrun command as a "
            f"list of str, got {type(appdef).__name__}"
        )
    roles = list(roles)
    if not roles:
        raise ValueError("the AppDef has no roles: give it one role that runs torchrun")
    if len(roles) > 1:
        names = ", ".join(repr(getattr(r, "name", "?")) for r in roles)
        raise ValueError(
            f"the AppDef has {len(roles)} roles ({names}); an SPMD job runs one: "
            "give it a single role"
        )
    role = roles[0]
    replicas = getattr(role, "num_replicas", 1)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise ValueError(f"the role's num_replicas must be a positive int, got {replicas!r}")
    env = dict(getattr(role, "env", None) or {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise ValueError(f"the role's env must map str to str, got {env!r}")
    args = getattr(role, "args", None) or []
    if isinstance(args, str):
        raise TypeError(f"the role's args are a list of str, not a str: use [{args!r}]")
    found = {
        "name": str(getattr(role, "name", "trainer") or "trainer"),
        "entrypoint": str(getattr(role, "entrypoint", "") or ""),
        "args": [str(a) for a in args],
        "num_replicas": replicas,
        "env": env,
    }
    return role, found


def _workspace_of(role: Any) -> str | None:
    workspace = getattr(role, "workspace", None)
    projects = getattr(workspace, "projects", None)
    if projects:
        return str(next(iter(projects)))
    return None


# -- the hosts of a job ----------------------------------------------------------------


class _LocalHosts(JobTrait):
    """``count`` worker processes on this machine that end with the script
    that started them (or at ``kill()``): the hosts of a local SPMD job."""

    def __init__(self, count: int, env: Mapping[str, str]) -> None:
        self._count = count
        self._env = dict(env)
        self._workers: list[LocalProcess] = []
        self._logs: list[str] = []
        self._folder: str | None = None
        self._secret: str | None = None
        super().__init__()

    def _create(self, client_script: str | None) -> None:
        self._secret = secret_for_workers()
        self._folder = tempfile.mkdtemp(prefix="monarch_spmd_job_")
        env = {**os.environ, **self._env, SECRET_ENV: self._secret}
        try:
            for i in range(self._count):
                address = f"ipc://{self._folder}/{_MESH}_{i}"
                log_path = os.path.join(self._folder, f"{_MESH}_{i}.log")
                proc = _spawn(address, env, log_path, True)
                self._workers.append(LocalProcess.of(proc.pid, address))
                self._logs.append(log_path)
                _watch(proc, f"SPMD worker {i}", log_path)
        except BaseException:
            self._kill()
            raise

    def _state(self) -> JobState:
        dead = [i for i, w in enumerate(self._workers) if not w.alive()]
        if dead or not self._workers:
            details = "".join(f"\n  worker {i}{_tail(self._logs[i], 5)}" for i in dead)
            raise JobError(
                "this SPMD job's worker processes are gone (they end with the script that "
                f"served the job): serve() it again{details}"
            )
        adopt_secret(self._secret, "this SPMD job")
        return JobState(
            {
                _MESH: attach_to_workers(
                    name=_MESH,
                    ca="trust_all_connections",
                    workers=[w.address for w in self._workers],
                )
            }
        )

    def can_run(self, spec: JobTrait) -> bool:
        return bool(self._workers) and all(w.alive() for w in self._workers)

    def _kill(self) -> None:
        end_sessions(list(self._workers), patience=2.0)
        self._workers.clear()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


_SLURM_OPTIONS = {  # TorchX's slurm run options that become SlurmJob arguments
    "partition": "partition",
    "time": "time_limit",
    "account": "account",
    "qos": "qos",
    "job_dir": "log_dir",
    "exclusive": "exclusive",
    "monarch_port": "monarch_port",
    "python_exe": "python_exe",
}
_SLURM_FLAGS = ("constraint", "comment", "mail-user", "mail-type", "nodelist", "exclude")


def _slurm_job(count: int, role: Any, cfg: Mapping[str, Any]) -> SlurmJob:
    kwargs: dict[str, Any] = {}
    flags: list[str] = []
    for key, value in cfg.items():
        if key in _SLURM_OPTIONS:
            kwargs[_SLURM_OPTIONS[key]] = value
        elif key in _SLURM_FLAGS:
            flags.append(f"--{key}={value}")
        else:
            known = ", ".join(sorted([*_SLURM_OPTIONS, *_SLURM_FLAGS]))
            raise ValueError(f"scheduler_cfg: unknown slurm option {key!r}; known: {known}")
    resource = getattr(role, "resource", None)
    gpus = getattr(resource, "gpu", 0)
    cpus = getattr(resource, "cpu", 0)
    memory = getattr(resource, "memMB", 0)
    if isinstance(gpus, int) and gpus > 0:
        kwargs["gpus_per_node"] = gpus
    if isinstance(cpus, int) and cpus > 0:
        kwargs["cpus_per_task"] = cpus
    if isinstance(memory, int) and memory > 0:
        kwargs["mem"] = f"{memory}M"
    return SlurmJob({_MESH: count}, slurm_args=flags, job_name="spmd-job", **kwargs)


def _hosts_job(
    scheduler: str, count: int, role: Any, found: Mapping[str, Any], cfg: Any
) -> JobTrait:
    if scheduler in _LOCAL_SCHEDULERS:
        if cfg:
            raise ValueError(f"scheduler {scheduler!r} takes no scheduler_cfg, got {dict(cfg)!r}")
        return _LocalHosts(count, found["env"])
    if scheduler == "slurm":
        return _slurm_job(count, role, cfg)
    if scheduler.startswith("mast"):
        raise Unsupported(
            f"scheduler {scheduler!r} is internal to Meta and not available here: use {_SUPPORTED}"
        )
    raise Unsupported(
        f"serve() cannot schedule on {scheduler!r} here: use {_SUPPORTED}, or start workers "
        "with another job (e.g. KubernetesJob) and run the script with monarch.spmd.SPMDActor"
    )


class _SetEnv(Actor):
    """Puts a role's environment in each rank's process before its script runs."""

    @endpoint
    def update(self, env: dict[str, str]) -> None:
        os.environ.update(env)


# -- the jobs ------------------------------------------------------------------------


def serve(
    appdef: Any,
    scheduler: str = "mast_conda",
    scheduler_cfg: dict[str, Any] | None = None,
) -> SPMDJob:
    """Start the hosts of a torchrun-style job, ready for ``run_spmd()``.

    The command, or the AppDef's role, is a torchrun command (``torchrun``,
    ``python -m torch.distributed.run`` or plain ``python script.py``); an
    AppDef role's entrypoint may also be a wrapper script that runs its args.
    Each of the role's ``num_replicas`` hosts runs a worker;
    ``SPMDJob.run_spmd()`` then starts ``--nproc-per-node`` processes on each
    and runs the training script in every one of them, with torchrun's
    environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
    ...) plus the role's ``env``.

    Args:
        appdef: a TorchX ``AppDef`` with one role (or any object shaped like
            one), or a torchrun command as a list of str, e.g.
            ``["torchrun", "--nproc-per-node=4", "--standalone", "train.py"]``
            (one host only).
        scheduler: where the hosts come from: ``"local_cwd"`` (worker
            processes on this machine, which end with this script) or
            ``"slurm"``. Monarch's default, ``"mast_conda"``, is internal to
            Meta and raises ``Unsupported``.
        scheduler_cfg: the scheduler's options: for ``"slurm"``, TorchX's
            (``partition``, ``time``, ``account``, ``qos``, ``job_dir``,
            ``exclusive``, ``constraint``, ``comment``, ``mail-user``,
            ``mail-type``, ``nodelist``, ``exclude``) and ``monarch_port``,
            ``python_exe`` (``SlurmJob``'s); none for ``"local_cwd"``.

    Returns:
        The running job.

    Raises:
        ValueError: the command is empty, asks for several hosts, is not a
            torchrun command or names no script; the AppDef has no role or
            several; ``scheduler_cfg`` has an unknown option.
        TypeError: ``appdef`` is neither an AppDef nor a list of str.
        Unsupported: the scheduler is not available here, or the command
            uses ``--no-python``.
        JobError: the scheduler could not start the hosts.

    Examples:
        ```python
        job = serve(["torchrun", "--nproc-per-node=2", "train.py"], scheduler="local_cwd")
        job.run_spmd()
        job.kill()
        ```
    """
    if isinstance(appdef, list | tuple):
        command = list(appdef)
        if not command:
            raise ValueError(
                "the command is empty: e.g. ['torchrun', '--nproc-per-node=2', 'train.py']"
            )
        if not all(isinstance(word, str) for word in command):
            raise TypeError(f"the command is a list of str, got {command!r}")
        _check_single_node(command)
        role: Any = None
        found: dict[str, Any] = {
            "name": "trainer",
            "entrypoint": command[0],
            "args": command[1:],
            "num_replicas": 1,
            "env": {},
        }
        workspace = None
    else:
        role, found = _role_of(appdef)
        workspace = _workspace_of(role)
    if not isinstance(scheduler, str):
        raise TypeError(f"scheduler is a name such as 'local_cwd', got {scheduler!r}")
    original = {"entrypoint": found["entrypoint"], "args": list(found["args"])}
    _parse_command(_command_of(original))  # a command that cannot run fails here
    hosts = _hosts_job(scheduler, found["num_replicas"], role, found, scheduler_cfg or {})
    job = SPMDJob(
        handle=f"{scheduler}://monarch/spmd-job-{uuid.uuid4().hex[:12]}",
        scheduler=scheduler,
        workspace=workspace or os.getcwd(),
        original_roles=[original],
    )
    job._hosts = hosts
    job._env = dict(found["env"])
    job.apply()
    log.info("launched %s", job._app_handle)
    return job


class SPMDJob(JobTrait):
    """A torchrun-style job: the hosts ``serve()`` started, and the torchrun
    command to run on them with ``run_spmd()``.

    ``state().workers`` is the job's host mesh (one host per replica);
    ``kill()`` ends the hosts. Made by ``serve()``; one made directly knows
    no hosts, except for a local scheduler, where it runs on ``this_host()``.

    Args:
        handle: the name of the job on its scheduler.
        scheduler: the scheduler's name (``"local_cwd"``, ``"slurm"``, ...).
        workspace: the folder the job was served from.
        original_roles: the role to run, as ``{"entrypoint": ..., "args":
            [...]}`` (a list of one), holding the torchrun command.
        service_proc_ids: accepted for compatibility with Monarch, unused.
    """

    def __init__(
        self,
        handle: str,
        scheduler: str,
        workspace: str | None = None,
        original_roles: list[dict[str, Any]] | None = None,
        service_proc_ids: list[Any] | None = None,
    ) -> None:
        super().__init__()
        self._app_handle = handle
        self._scheduler = scheduler
        self._workspace = workspace
        self._original_roles = [dict(r) for r in original_roles or []]
        self._hosts: JobTrait | None = None
        self._env: dict[str, str] = {}

    def _create(self, client_script: str | None) -> None:
        if client_script is not None:
            raise JobError(
                "SPMDJob cannot run a client script: run the script yourself; it can call "
                "run_spmd() on the job serve() returned"
            )
        if self._hosts is not None and not self._hosts.active:
            self._hosts.apply()

    def _state(self) -> JobState:
        if self._hosts is not None:
            return JobState({_MESH: _only_mesh(self._hosts._state())})
        if self._scheduler in _LOCAL_SCHEDULERS:
            return JobState({_MESH: this_host()})
        raise JobError(
            f"this SPMDJob ({self._app_handle}) was not made by serve(), so its hosts on "
            f"{self._scheduler!r} are unknown here: start the job with serve()"
        )

    def can_run(self, spec: JobTrait) -> bool:
        """Tell whether this (running) job can stand in for ``spec``.

        It can when ``spec`` is an SPMD job with the same scheduler and
        command, and this job's hosts are still running.

        Args:
            spec: the job a script asks for.

        Returns:
            True if this job can stand in for ``spec``.
        """
        return (
            isinstance(spec, SPMDJob)
            and spec._scheduler == self._scheduler
            and spec._original_roles == self._original_roles
            and self._hosts is not None
            and self._hosts.active
            and self._hosts.can_run(self._hosts)
        )

    def _hosts_shut_down(self) -> None:
        if self._hosts is not None:
            self._hosts._hosts_shut_down()

    def _kill(self) -> None:
        if self._hosts is not None and self._hosts.active:
            self._hosts.kill()

    def run_spmd(self) -> None:
        """Run the job's training script on every rank, as torchrun would, and
        wait until every rank has finished it.

        Each host gets ``--nproc-per-node`` processes (a mesh of extent
        ``{"hosts": N, "gpus": nproc}``); each runs the script or module with
        ``sys.argv`` set to its arguments and torchrun's environment:
        ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
        ``GROUP_RANK``, ``GROUP_WORLD_SIZE``, ``ROLE_RANK``,
        ``ROLE_WORLD_SIZE``, ``ROLE_NAME`` and ``MASTER_ADDR``/``MASTER_PORT``
        (a free port on the first process's host), plus the role's ``env``.
        The processes stop when the script has ended everywhere.

        Raises:
            ValueError: the job's role is not a torchrun command.
            ActorError: the script failed on some rank (its error is the cause).
            JobError: the job's hosts cannot be reached.
        """
        if len(self._original_roles) != 1:
            raise ValueError(
                f"an SPMD job runs exactly one role, this one has {len(self._original_roles)}"
            )
        script, nproc = _parse_command(_command_of(self._original_roles[0]))
        workers = self.state(cached_path=None).workers
        procs = workers.spawn_procs(per_host={"gpus": nproc})
        try:
            if self._env:
                procs.spawn("_SPMDEnv", _SetEnv).update.call(self._env).get()
            actors: Any = procs.spawn("_SPMDActor", SPMDActor)
            first = actors.slice(**dict.fromkeys(procs.extent.labels, 0))
            addr, port = first.get_host_port.call_one(None).get()
            actors.main.call(addr, port, script).get()
        finally:
            try:
                procs.stop().get()
            except Exception as error:  # the script's own error matters more
                log.info("stopping the SPMD processes: %s", error)

    def __repr__(self) -> str:
        return f"SPMDJob(handle={self._app_handle!r}, scheduler={self._scheduler!r})"


def _only_mesh(state: JobState) -> HostMesh:
    return next(iter(state._hosts.values()))


# -- the store rendezvous ----------------------------------------------------------------


class _Store(Protocol):
    """What ``StoreJob.from_store`` needs of a ``torch.distributed.Store``."""

    def set(self, key: str, value: str | bytes) -> None: ...

    def get(self, key: str) -> bytes: ...


_TRANSPORTS = ("ipc", "tcp")


def _topology(value: int | None, name: str) -> int:
    if value is not None:
        return int(value)
    text = os.environ.get(name)
    if text is None:
        raise RuntimeError(
            f"StoreJob.from_store needs {name}: set by torchrun (RANK, LOCAL_RANK, WORLD_SIZE, "
            f"LOCAL_WORLD_SIZE), or pass {name.lower()}= yourself"
        )
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a number") from None


def _store_key(group_rank: int) -> str:
    return f"monarch/spmd/workers/{group_rank}"


def _worker_address(transport: str, port: int, name: str) -> str:
    if transport == "ipc":
        folder = tempfile.mkdtemp(prefix="monarch_worker_")
        atexit.register(shutil.rmtree, folder, True)
        return f"ipc://{folder}/{name}"
    return f"tcp://{socket.getfqdn()}:{port}"


class StoreJob(JobTrait):
    """A job whose hosts are the hosts of an SPMD job already running, found
    through its ``torch.distributed`` store.

    Call ``StoreJob.from_store(store)`` on every rank: the first rank of each
    host starts a worker there and publishes its address in the store; rank
    0 gets the job (every other rank gets None), whose ``state()`` attaches
    to the workers: ``state().<name>`` is a host mesh with one host per host
    of the SPMD job. The workers end with the rank that started them;
    ``kill()`` leaves them be.

    Args:
        worker_addrs: the workers' addresses, one per host.
        name: the name of the host mesh (an attribute of ``state()``).
    """

    _shutdown_on_kill = False  # the workers belong to the ranks that started them

    def __init__(self, worker_addrs: list[str], name: str) -> None:
        super().__init__()
        self._worker_addrs = list(worker_addrs)
        self._name = name

    @classmethod
    def from_store(
        cls,
        store: _Store,
        *,
        monarch_port: int = 0,
        name: str = "monarch_worker",
        transport: str = "ipc",
        rank: int | None = None,
        local_rank: int | None = None,
        world_size: int | None = None,
        local_world_size: int | None = None,
    ) -> StoreJob | None:
        """Start this host's worker (on its first rank) and, on rank 0, make the job.

        Every rank of the SPMD job must call it. The ranks' places default
        to torchrun's ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` and
        ``LOCAL_WORLD_SIZE``. With several hosts, every rank needs the same
        job secret (``MONARCH_JOB_SECRET`` or ``MONARCH_JOB_SECRET_FILE`` in
        its environment) so that rank 0 may talk to every worker.

        Args:
            store: the SPMD job's store (``torch.distributed.Store``, or
                anything with ``set(key, value)`` and ``get(key) -> bytes``,
                ``get`` waiting for the key).
            monarch_port: the port the workers listen on with ``"tcp"``
                (required there; unused with ``"ipc"``).
            name: the host mesh's name; the worker of host ``g`` is
                ``f"{name}_{g}"``.
            transport: ``"ipc"`` (Unix sockets: one host only) or ``"tcp"``.
            rank: this rank, instead of ``RANK``.
            local_rank: this rank on its host, instead of ``LOCAL_RANK``.
            world_size: the number of ranks, instead of ``WORLD_SIZE``.
            local_world_size: the number of ranks per host, instead of
                ``LOCAL_WORLD_SIZE``.

        Returns:
            The job on rank 0; None on every other rank.

        Raises:
            RuntimeError: a rank's place is neither in the environment nor given.
            ValueError: ``WORLD_SIZE`` is not a multiple of
                ``LOCAL_WORLD_SIZE``; the transport is unknown; ``"tcp"``
                without a ``monarch_port``.
            JobError: several hosts, and no job secret in the environment.
        """
        the_rank = _topology(rank, "RANK")
        the_local_rank = _topology(local_rank, "LOCAL_RANK")
        size = _topology(world_size, "WORLD_SIZE")
        local_size = _topology(local_world_size, "LOCAL_WORLD_SIZE")
        if local_size < 1 or size % local_size != 0:
            raise ValueError(
                f"WORLD_SIZE ({size}) must be divisible by LOCAL_WORLD_SIZE ({local_size})"
            )
        if transport not in _TRANSPORTS:
            raise ValueError(
                f"unsupported transport {transport!r}; expected one of "
                f"{', '.join(map(repr, _TRANSPORTS))}"
            )
        if transport == "tcp" and not (isinstance(monarch_port, int) and 0 < monarch_port < 65536):
            raise ValueError(
                f"monarch_port must be an explicit non-zero port for transport 'tcp', got "
                f"{monarch_port!r}: every host's worker listens on it"
            )
        hosts = size // local_size
        active = the_local_rank == 0 or the_rank == 0  # the others start and attach nothing
        if hosts > 1 and active and current_secret() is None:
            raise JobError(
                f"StoreJob across {hosts} hosts needs one job secret on every rank: set "
                f"{SECRET_ENV} (the same value everywhere, e.g. `export {SECRET_ENV}=$(openssl "
                "rand -hex 32)` before launching) or MONARCH_JOB_SECRET_FILE"
            )
        group_rank = the_rank // local_size
        if the_local_rank == 0:
            secret = secret_for_workers()
            address = _worker_address(transport, monarch_port, f"{name}_{group_rank}")
            proc = _spawn(address, {**os.environ, SECRET_ENV: secret}, None, True)
            _watch(proc, f"StoreJob worker {name}_{group_rank}", None)
            log.info("StoreJob worker %s_%d pid %d at %s", name, group_rank, proc.pid, address)
            store.set(_store_key(group_rank), address.encode())
        if the_rank != 0:
            return None
        addresses = [_decode(store.get(_store_key(g))) for g in range(hosts)]
        return cls(addresses, name)

    def state(self, cached_path: str | None = None) -> JobState:
        """Attach to the workers (at the first call) and return their host mesh.

        Args:
            cached_path: a job cache file to write; by default none, as the
                workers end with this SPMD job.

        Returns:
            The job's state: ``state().<name>`` is the host mesh.
        """
        return super().state(cached_path)

    def _create(self, client_script: str | None) -> None:
        if client_script is not None:
            raise JobError("StoreJob cannot run a client script: its ranks are the clients")

    def _state(self) -> JobState:
        mesh = attach_to_workers(
            name=self._name, ca="trust_all_connections", workers=self._worker_addrs
        )
        return JobState({self._name: mesh})

    def can_run(self, spec: JobTrait) -> bool:
        """Always False: a StoreJob's workers belong to the SPMD job that
        started them, so no cached one stands in for another.

        Args:
            spec: the job a script asks for (not consulted).

        Returns:
            False.
        """
        return False

    def _kill(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"StoreJob({self._worker_addrs!r}, name={self._name!r})"


def _decode(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
