"""``SlurmJob``: hosts from a Slurm allocation. ``apply`` submits one batch
job for every mesh (one allocation of as many nodes as the meshes have in
all, as Monarch does); its script runs one worker per node with ``srun``; the
controller waits for the allocation to run, learns its nodes, gives each
mesh its share in node-list order and attaches to each node's worker at
``tcp://NODEADDR:PORT`` (the node's address as Slurm reaches it)."""

from __future__ import annotations

import copy
import logging
import os
import shlex
import shutil
import subprocess
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from monarch_actor import HostMesh, attach_to_workers
from monarch_actor.extension import Progress, progress

from ._errors import JobError, Unsupported
from ._job import BATCH_ENV, JOB_CACHE_ENV, JobState, JobTrait
from ._process import check_meshes
from ._secret import SECRET_ENV, SECRET_FILE_ENV, adopt_secret, current_secret, secret_for_workers

__all__ = [
    "SlurmJob",
    "TERMINAL_STATES",
    "node_addresses",
    "slurm_worker_address",
    "slurm_worker_addresses",
]

log = logging.getLogger("monarch.launcher.slurm")

TERMINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)
"""Slurm job states after which the job's workers are gone."""

_PROGRESS_EVERY = 30.0  # seconds between "still waiting" lines
_COMMAND_TIMEOUT = 120.0  # seconds a Slurm command may take (it retries an unreachable slurmctld)
_WORKERS_UP = frozenset({"RUNNING", "CONFIGURING"})  # job states in which workers can answer
_NEVER_FITS = frozenset({"PartitionNodeLimit", "PartitionConfig"})  # reasons worth checking


def _run(
    cmd: list[str], *, what: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    if shutil.which(cmd[0]) is None:
        raise JobError(
            f"{what} needs the Slurm command {cmd[0]!r}, which is not on PATH: run this on a "
            "machine of the Slurm cluster (a login node) or add Slurm's bin folder to PATH"
        )
    try:
        return subprocess.run(
            cmd,
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=_COMMAND_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        raise JobError(
            f"{what}: `{shlex.join(cmd)}` did not finish within {_COMMAND_TIMEOUT:g} s: is the "
            "Slurm controller (slurmctld) up and reachable from here? `sinfo` tells"
        ) from None


def expand_nodelist(nodelist: str) -> list[str]:
    """The node names of a Slurm node list such as ``n[0-3],gpu7``."""
    done = _run(["scontrol", "show", "hostnames", nodelist], what="SlurmJob")
    if done.returncode != 0:
        raise JobError(f"scontrol could not expand the node list {nodelist!r}: {done.stderr}")
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def node_addresses(nodes: Sequence[str]) -> dict[str, str]:
    """Each node's address as Slurm reaches it (NodeAddr, from one ``scontrol
    show node`` call); a node Slurm does not describe keeps its name."""
    if not nodes:
        return {}
    done = _run(["scontrol", "show", "node", "-o", ",".join(nodes)], what="SlurmJob")
    found: dict[str, str] = {}
    for line in done.stdout.splitlines():
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        if "NodeName" in fields and fields.get("NodeAddr"):
            found[fields["NodeName"]] = fields["NodeAddr"]
    if done.returncode != 0:
        log.warning("scontrol show node failed (%s): dialing nodes by name", done.stderr.strip())
    return {node: found.get(node, node) for node in nodes}


def slurm_worker_addresses(nodes: Sequence[str], addresses: dict[str, str], port: int) -> list[str]:
    """Where each node's worker serves: ``tcp://NODEADDR:port``. Nodes that
    share an address (several Slurm nodes on one machine, as in a test
    cluster) take the next ports in node order, so their workers do not
    collide; on a real cluster every node has its own address and ``port``."""
    seen: dict[str, int] = {}
    result = []
    for node in nodes:
        host = addresses.get(node, node)
        offset = seen.get(host, 0)
        seen[host] = offset + 1
        shown = f"[{host}]" if ":" in host else host
        result.append(f"tcp://{shown}:{port + offset}")
    return result


def slurm_worker_address(port: int, bind: str | None = None) -> str:
    """This Slurm task's worker address (``monarch worker --slurm-port``):
    its node's entry of ``slurm_worker_addresses`` for the job's node list,
    listening on ``bind`` (an interface such as ``0.0.0.0``) if given."""
    try:
        nodelist = os.environ["SLURM_JOB_NODELIST"]
        me = os.environ["SLURMD_NODENAME"]
    except KeyError as missing:
        raise JobError(
            f"--slurm-port works only in a Slurm job step (srun): {missing.args[0]} is not set"
        ) from None
    nodes = expand_nodelist(nodelist)
    if me not in nodes:
        raise JobError(f"this node {me!r} is not in the job's node list {nodelist!r}")
    dial = slurm_worker_addresses(nodes, node_addresses(nodes), port)[nodes.index(me)]
    if bind is None:
        return dial
    return f"{dial}@tcp://{bind}:{dial.rsplit(':', 1)[1]}"


class SlurmJob(JobTrait):
    """A job whose hosts are the nodes of one Slurm allocation.

    ``SlurmJob({"trainers": 4, "dataloaders": 1})`` asks for 5 nodes; each
    runs ``python -m monarch_launcher worker --slurm-port monarch_port``,
    serving at ``tcp://NODEADDR:monarch_port`` (the node's address as Slurm
    reaches it; Slurm nodes that share one machine take consecutive ports).
    The workers get the job secret through the environment ``sbatch``
    passes on (``--export=ALL``, Slurm's default). The arguments are
    Monarch's.

    Args:
        meshes: each mesh's name (a Python identifier) and its number of nodes.
        python_exe: the Python on the nodes, with ``monarch_launcher`` installed.
        slurm_args: extra ``#SBATCH`` options, such as ``["--constraint=h100"]``;
            an ``--export`` must pass ``MONARCH_JOB_SECRET`` on.
        monarch_port: the TCP port each worker listens on.
        job_name: the Slurm job's name; this script's pid is appended.
        ntasks_per_node: the allocation's ``--ntasks-per-node`` (one worker
            runs per node regardless).
        time_limit: the allocation's time limit (``HH:MM:SS``).
        partition: the Slurm partition.
        log_dir: where the job's output files go (default: the current
            directory).
        exclusive: ask for whole nodes (``--exclusive``).
        gpus_per_node: GPUs per node, for the allocation and the workers.
        cpus_per_task: the allocation's ``--cpus-per-task``.
        mem: the allocation's ``--mem``, such as ``"64G"``.
        job_start_timeout: seconds to wait for the allocation to run before
            cancelling it; None waits as long as it queues.
        account: the Slurm account to charge.
        qos: the Slurm quality of service.
        out_of_cluster: reaching the workers through a gateway: not supported.
        attach_to: a gateway address: not supported.
        bind_to: the interface the workers listen on (e.g. ``"0.0.0.0"``)
            when the node name resolves to another address on the node itself.

    Raises:
        Unsupported: ``out_of_cluster`` or ``attach_to`` is set; the
            controller must reach the nodes directly.
        ValueError: ``meshes``, ``monarch_port``, ``ntasks_per_node`` or an
            ``--export`` in ``slurm_args`` is not usable.
        TypeError: ``slurm_args`` is a string rather than a list.
    """

    def __init__(
        self,
        meshes: dict[str, int],
        python_exe: str = "python",
        slurm_args: Sequence[str] = (),
        monarch_port: int = 22222,
        job_name: str = "monarch_job",
        ntasks_per_node: int = 1,
        time_limit: str | None = None,
        partition: str | None = None,
        log_dir: str | None = None,
        exclusive: bool = True,
        gpus_per_node: int | None = None,
        cpus_per_task: int | None = None,
        mem: str | None = None,
        job_start_timeout: int | None = None,
        account: str | None = None,
        qos: str | None = None,
        out_of_cluster: bool = False,
        attach_to: str | None = None,
        bind_to: str | None = None,
    ) -> None:
        if out_of_cluster or attach_to is not None:
            raise Unsupported(
                "SlurmJob(out_of_cluster=..., attach_to=...) is not supported: run the controller "
                "where it reaches the nodes directly (a login node or a node of the allocation)"
            )
        self._meshes = check_meshes(meshes, "SlurmJob")
        if isinstance(slurm_args, str):
            raise TypeError(f"slurm_args is a list of options, not a str: use [{slurm_args!r}]")
        if not isinstance(monarch_port, int) or not 0 < monarch_port < 65536:
            raise ValueError(
                f"SlurmJob: monarch_port must be a TCP port (1-65535), got {monarch_port!r}"
            )
        if ntasks_per_node < 1:
            raise ValueError(f"SlurmJob: ntasks_per_node must be at least 1, got {ntasks_per_node}")
        self._python_exe = python_exe
        self._slurm_args = tuple(slurm_args)
        self._check_export(self._slurm_args)
        self._port = monarch_port
        self._job_name = job_name
        self._ntasks_per_node = ntasks_per_node
        self._time_limit = time_limit
        self._partition = partition
        self._log_dir = log_dir if log_dir is not None else os.getcwd()
        self._exclusive = exclusive
        self._gpus_per_node = gpus_per_node
        self._cpus_per_task = cpus_per_task
        self._mem = mem
        self._job_start_timeout = job_start_timeout
        self._account = account
        self._qos = qos
        self._bind_to = bind_to
        self._slurm_job_id: str | None = None
        self._hostnames: list[str] = []
        self._secret: str | None = None
        self._batch = False
        self._fresh = False
        super().__init__()

    @staticmethod
    def _check_export(args: Sequence[str]) -> None:
        for arg in args:
            if arg.startswith("--export"):
                value = arg.partition("=")[2]
                names = {part.split("=", 1)[0] for part in value.split(",")}
                if "ALL" not in names and SECRET_ENV not in names:
                    raise ValueError(
                        f"slurm_args {arg!r} would keep the job secret from the workers: add "
                        f"{SECRET_ENV} to the list (e.g. --export={SECRET_ENV},...) or use "
                        "--export=ALL"
                    )

    # -- the spec -----------------------------------------------------------------------

    def add_mesh(self, name: str, num_nodes: int) -> None:
        """Ask for one more mesh (before ``apply``).

        Args:
            name: the mesh's name, a Python identifier.
            num_nodes: how many nodes it gets.

        Raises:
            ValueError: the name or the count is not valid.
        """
        self._meshes = check_meshes({**self._meshes, name: num_nodes}, "SlurmJob")

    def share_node(self, tasks_per_node: int, gpus_per_task: int, partition: str) -> None:
        """Not available: Monarch sizes shared nodes with ``clusterscope``.

        Pass ``exclusive=False`` with ``cpus_per_task``, ``mem`` and
        ``gpus_per_node`` to the constructor instead.

        Args:
            tasks_per_node: tasks to place on each shared node (not used).
            gpus_per_task: GPUs each task gets (not used).
            partition: the partition of the shared nodes (not used).

        Raises:
            Unsupported: always.
        """
        raise Unsupported(
            "share_node() is not available in Monarch in Python: pass exclusive=False with "
            "cpus_per_task=, mem= and gpus_per_node= instead"
        )

    @property
    def num_nodes(self) -> int:
        """How many nodes the job asks for: the meshes' sizes added up."""
        return sum(self._meshes.values())

    @property
    def slurm_job_id(self) -> str | None:
        """The Slurm job id once submitted (``$SLURM_JOB_ID`` inside a batch run);
        for a spec that ``state()`` matched to a cached job, that job's id."""
        if self._slurm_job_id is not None:
            return self._slurm_job_id
        running = self._running
        if isinstance(running, SlurmJob) and running is not self:
            return running.slurm_job_id
        return os.environ.get("SLURM_JOB_ID") if self._batch and _in_batch() else None

    def worker_addresses(self, nodes: Sequence[str]) -> list[str]:
        """The addresses the controller dials for the workers on some nodes.

        Each is the node's address as Slurm knows it (NodeAddr), at
        ``monarch_port``; nodes that share one address take consecutive ports.

        Args:
            nodes: the allocation's node names, in order.

        Returns:
            One ``tcp://`` address per node, in the same order.
        """
        return slurm_worker_addresses(nodes, node_addresses(nodes), self._port)

    def _log_paths(self, unique_name: str) -> tuple[str, str]:
        return (
            os.path.join(self._log_dir, f"slurm_%j_{unique_name}.out"),
            os.path.join(self._log_dir, f"slurm_%j_{unique_name}.err"),
        )

    def batch_script(
        self, client_script: str | None = None, *, unique_name: str | None = None
    ) -> str:
        """The script ``apply`` hands to ``sbatch``.

        It holds the ``#SBATCH`` options for one allocation of ``num_nodes``
        nodes, then starts one worker per node (``srun``).

        Args:
            client_script: a client the batch script also runs, on the first
                node, with ``MONARCH_BATCH_JOB=1``, ending the workers when it
                exits; a ``.py`` file runs with ``python_exe``, anything else
                as a shell command.
            unique_name: the Slurm job's name, also in its output file names
                (default: ``job_name`` and this script's pid).

        Returns:
            The batch script's text.
        """
        name = unique_name or f"{self._job_name}_{os.getpid()}"
        out, err = self._log_paths(name)
        nodes = self.num_nodes
        lines = [
            "#!/bin/bash",
            f"#SBATCH --job-name={name}",
            f"#SBATCH --nodes={nodes}",
            f"#SBATCH --ntasks-per-node={self._ntasks_per_node}",
            f"#SBATCH --output={out}",
            f"#SBATCH --error={err}",
        ]
        optional = [
            ("--time", self._time_limit),
            ("--gpus-per-node", self._gpus_per_node),
            ("--cpus-per-task", self._cpus_per_task),
            ("--mem", self._mem),
            ("--partition", self._partition),
            ("--account", self._account),
            ("--qos", self._qos),
        ]
        lines += [f"#SBATCH {flag}={value}" for flag, value in optional if value is not None]
        if self._exclusive:
            lines.append("#SBATCH --exclusive")
        lines += [f"#SBATCH {arg}" for arg in self._slurm_args if arg.startswith("-")]
        worker = [
            shlex.quote(self._python_exe),
            "-m",
            "monarch_launcher",
            "worker",
            "--slurm-port",
            str(self._port),
        ]
        if self._bind_to is not None:
            worker += ["--slurm-bind", shlex.quote(self._bind_to)]
        srun = [
            "srun",
            f"--nodes={nodes}",
            f"--ntasks={nodes}",
            "--ntasks-per-node=1",
            "--kill-on-bad-exit=1",
        ]
        if self._gpus_per_node is not None:
            srun.append(f"--gpus-per-node={self._gpus_per_node}")
        lines += [
            "",
            "# one worker per node, with every resource of its node where srun allows (--whole)",
            "WHOLE=$(srun --help 2>&1 | grep -q -- '--whole' && echo --whole)",
            f"{' '.join(srun)} $WHOLE {' '.join(worker)}"
            + (" &" if client_script is not None else ""),
        ]
        if client_script is not None:
            first = shlex.split(client_script)[0] if client_script.strip() else ""
            client = (
                f"{shlex.quote(self._python_exe)} {client_script}"
                if first.endswith(".py")
                else client_script
            )
            lines += [
                "WORKERS=$!",
                "trap 'kill $WORKERS 2>/dev/null; wait $WORKERS' EXIT",
                f"{BATCH_ENV}=1 {client}",
                "STATUS=$?",
                "exit $STATUS",
            ]
        return "\n".join(lines) + "\n"

    # -- the lifecycle ------------------------------------------------------------------

    def _create(self, client_script: str | None) -> None:
        self._secret = secret_for_workers()
        unique = f"{self._job_name}_{os.getpid()}"
        os.makedirs(self._log_dir, exist_ok=True)
        env = {**os.environ, SECRET_ENV: self._secret}
        if client_script is not None:
            batch = copy.copy(self)
            batch._batch = True
            batch._status = "running"
            batch._apply_id = str(uuid.uuid4())
            # the client, in the allocation, finds its job here: beside the job's
            # logs, which Slurm's nodes reach (the submitter's state folder may be
            # local to this machine); job_load checks it is this user's alone
            cache = os.path.join(os.path.abspath(self._log_dir), f".{unique}.job.pkl")
            batch.dump(cache)
            env[JOB_CACHE_ENV] = cache
        script = self.batch_script(client_script, unique_name=unique)
        env.pop(SECRET_FILE_ENV, None)
        log.info("submitting a Slurm job for %d nodes (%s)", self.num_nodes, self._meshes)
        done = _run(["sbatch", "--parsable"], what="SlurmJob.apply()", stdin=script, env=env)
        if done.returncode != 0:
            raise JobError(
                f"sbatch refused the job (exit status {done.returncode}): "
                f"{done.stderr.strip() or done.stdout.strip()}. Check the partition, account, "
                "qos and node count against `sinfo` and your limits (`sacctmgr show assoc`)"
            )
        job_id = done.stdout.strip().split(";")[0].strip()
        if not job_id.isdigit() and not job_id.replace("_", "").isdigit():
            raise JobError(f"could not read a job id from sbatch's output {done.stdout!r}")
        self._slurm_job_id = job_id
        self._hostnames = []
        self._fresh = True  # submitted here, its workers not reached yet
        out, _ = self._log_paths(unique)
        log.info("Slurm job %s submitted; its output goes to %s", job_id, out.replace("%j", job_id))

    def _query(self, job_id: str) -> tuple[str, str, str] | None:
        """(state, node list, reason) of the job, or None once Slurm forgot it."""
        done = _run(["squeue", "-h", "-j", job_id, "-o", "%T|%N|%r"], what="SlurmJob")
        if done.returncode != 0:
            if "Invalid job id" in done.stderr:
                return None
            raise JobError(f"squeue could not report job {job_id}: {done.stderr.strip()}")
        line = done.stdout.strip().splitlines()[0] if done.stdout.strip() else ""
        if not line:
            return None
        state, nodes, reason = [*line.split("|"), "", ""][:3]
        return state.strip(), nodes.strip(), reason.strip()

    def _final_state(self, job_id: str) -> str:
        """How the job ended, as Slurm tells: ``FAILED, NonZeroExitCode, exit
        code 2:0`` from ``scontrol show job`` (which keeps a job for
        MinJobAge seconds after it ends), else from ``sacct``, else ``finished``."""
        done = _run(["scontrol", "show", "job", "-o", job_id], what="SlurmJob")
        fields = dict(part.split("=", 1) for part in done.stdout.split() if "=" in part)
        if done.returncode == 0 and fields.get("JobState"):
            said = [fields["JobState"]]
            if fields.get("Reason") not in (None, "", "None"):
                said.append(fields["Reason"])
            if fields.get("ExitCode") not in (None, "", "0:0"):
                said.append(f"exit code {fields['ExitCode']}")
            return ", ".join(said)
        if shutil.which("sacct") is None:
            return "finished"
        done = _run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State"], what="SlurmJob")
        state = done.stdout.strip().splitlines()[0].strip() if done.stdout.strip() else ""
        return state if done.returncode == 0 and state else "finished"

    def _ended(self, job_id: str) -> JobError:
        """The error for a job that ended before its workers answered: how it
        ended, as Slurm tells, and the end of its error output."""
        return JobError(
            f"Slurm job {job_id} ended ({self._final_state(job_id)}) before its workers "
            f"answered{self._error_output(job_id)}"
        )

    def _error_output(self, job_id: str) -> str:
        pattern = f"slurm_{job_id}_"
        try:
            found = sorted(Path(self._log_dir).glob(f"{pattern}*.err"))
        except OSError:
            return ""
        if not found:
            return ""
        try:
            tail = found[-1].read_text(errors="replace").strip().splitlines()[-10:]
        except OSError:
            return ""
        return f"\n  {found[-1]}:\n    " + "\n    ".join(tail) if tail else ""

    def _wait_for_nodes(self) -> list[str]:
        job_id = self.slurm_job_id
        if job_id is None:
            raise JobError("this SlurmJob has no Slurm job: apply() it first")
        with progress(f"Slurm job {job_id}: waiting for its nodes") as line:
            return self._poll_for_nodes(job_id, line)

    def _poll_for_nodes(self, job_id: str, line: Progress) -> list[str]:
        timeout = self._job_start_timeout
        started = time.monotonic()
        last_report = started
        last_state = ""
        delay = 0.25
        while True:
            found = self._query(job_id)
            if found is None:
                raise self._ended(job_id)
            state, nodelist, reason = found
            if state == "RUNNING":
                nodes = expand_nodelist(nodelist)
                if len(nodes) != self.num_nodes:
                    raise JobError(
                        f"Slurm job {job_id} runs on {len(nodes)} nodes, not the "
                        f"{self.num_nodes} asked for"
                    )
                log.info("Slurm job %s runs on %s", job_id, ", ".join(nodes))
                return nodes
            if state in TERMINAL_STATES or state.split()[0] in TERMINAL_STATES:
                raise self._ended(job_id)
            now = time.monotonic()
            waiting = f" ({reason})" if reason and reason != "None" else ""
            line.update(description=f"Slurm job {job_id} is {state}{waiting}")
            if state != last_state or now - last_report >= _PROGRESS_EVERY:
                log.info(
                    "Slurm job %s is %s%s (waited %.0f s)",
                    job_id,
                    state,
                    f" ({reason})" if reason and reason != "None" else "",
                    now - started,
                )
                last_state, last_report = state, now
            if state == "PENDING" and reason in _NEVER_FITS:
                self._check_fits(job_id, reason)
            if timeout is not None and now - started >= timeout:
                self._kill()
                raise JobError(
                    f"Slurm job {job_id} did not start within job_start_timeout={timeout} s "
                    f"(it was {state}{', ' + reason if reason else ''}); it was cancelled. "
                    "Ask for fewer nodes, another partition, or a longer timeout"
                )
            time.sleep(delay)
            delay = min(delay * 2, 5.0)

    def _check_fits(self, job_id: str, reason: str) -> None:
        """A job pending on its partition's node limit that asks for more
        nodes than the partition has will never start: say so now."""
        done = _run(["squeue", "-h", "-j", job_id, "-o", "%P"], what="SlurmJob")
        partition = done.stdout.strip()
        if done.returncode != 0 or not partition:
            return
        done = _run(["sinfo", "-h", "-p", partition, "-o", "%D"], what="SlurmJob")
        counts = [int(n) for n in done.stdout.split() if n.isdigit()]
        if done.returncode != 0 or not counts or self.num_nodes <= sum(counts):
            return  # the limit may be nodes down or drained for now: keep waiting
        self._kill()
        raise JobError(
            f"Slurm job {job_id} asks for {self.num_nodes} nodes, but partition {partition!r} "
            f"has {sum(counts)} (Slurm keeps it PENDING, {reason}): it can never start, so it "
            "was cancelled. Ask for fewer nodes (the meshes' sizes add up) or pick a larger "
            "partition"
        )

    def _state(self) -> JobState:
        if not self._hostnames:
            self._hostnames = self._wait_for_nodes()
        if self._batch and _in_batch():
            adopt_secret(current_secret() or self._secret, "this SlurmJob")
        else:
            adopt_secret(self._secret, "this SlurmJob")
        addresses = self.worker_addresses(self._hostnames)
        meshes: dict[str, HostMesh] = {}
        shares: dict[str, list[str]] = {}
        at = 0
        for mesh, count in self._meshes.items():
            at += count
            shares[mesh] = addresses[at - count : at]
            meshes[mesh] = attach_to_workers(
                name=mesh, ca="trust_all_connections", workers=shares[mesh]
            )
        self._await_workers(meshes, shares)
        self._fresh = False
        return JobState(meshes)

    def _await_workers(self, meshes: dict[str, HostMesh], shares: dict[str, list[str]]) -> None:
        """Wait until every worker answered, watching the Slurm job meanwhile:
        a job that stops running first (its workers failed, or someone
        cancelled it) is an error naming how it ended, with the end of its
        error output, instead of a wait for MONARCH_ATTACH_TIMEOUT."""
        job_id = self.slurm_job_id
        if job_id is None:
            raise JobError("this SlurmJob has no Slurm job: apply() it first")
        for name, hosts in meshes.items():
            ready = hosts.initialized
            delay = 0.1
            while True:
                try:
                    failed = ready.exception(timeout=delay)
                except TimeoutError:
                    found = self._query(job_id)
                    if found is None or found[0] not in _WORKERS_UP:
                        raise self._ended(job_id) from None
                    delay = min(delay * 2, 2.0)
                    continue
                if failed is None:
                    break
                raise JobError(
                    f"the workers of Slurm job {job_id} for mesh {name!r} (at "
                    f"{', '.join(shares[name])}) could not be reached: {failed}. "
                    f"{self._give_up(job_id)}{self._error_output(job_id)}"
                ) from failed

    def _give_up(self, job_id: str) -> str:
        """End a job this object submitted whose workers were never reached (so
        that its allocation does not outlive the error); say what was done."""
        if getattr(self, "_fresh", False) and not (self._batch and _in_batch()):
            self._kill()
            return (
                "The job was cancelled. Check that this machine reaches the nodes at those "
                "addresses (NodeAddr and monarch_port; bind_to= if a node listens on another "
                "interface), or raise MONARCH_ATTACH_TIMEOUT if the workers start slowly"
            )
        return (
            "The job still runs: kill() it (or `monarch job kill`) if it is of no use, or "
            "check that this machine reaches the nodes at those addresses"
        )

    def _spec(self) -> tuple[Any, ...]:
        return (
            self._meshes,
            self._python_exe,
            self._slurm_args,
            self._port,
            self._job_name,
            self._ntasks_per_node,
            self._time_limit,
            self._partition,
            self._exclusive,
            self._gpus_per_node,
            self._cpus_per_task,
            self._mem,
            self._job_start_timeout,
            self._account,
            self._qos,
            self._bind_to,
        )

    def can_run(self, spec: JobTrait) -> bool:
        """Tell whether this submitted job can serve ``spec``.

        It can with the same options and meshes while the Slurm job is still
        queued or running (inside its own batch run: whenever the allocation
        is found).

        Args:
            spec: the job a script asks for.

        Returns:
            True if this job can stand in for ``spec``.
        """
        if not (isinstance(spec, SlurmJob) and spec._spec() == self._spec()):
            return False
        if not (self.active or (self._batch and _in_batch())):
            return False
        mine = current_secret()
        if not self._batch and mine is not None and mine != self._secret:
            return False
        return self._job_active()

    def _job_active(self) -> bool:
        job_id = self.slurm_job_id
        if job_id is None:
            return False
        try:
            found = self._query(job_id)
        except JobError as error:
            log.warning("%s", error)
            return False
        return found is not None and found[0] not in TERMINAL_STATES

    def _kill(self) -> None:
        if self._batch and _in_batch():
            return  # the batch script ends its own workers when the client exits
        job_id = self._slurm_job_id
        if job_id is not None:
            done = _run(["scancel", job_id], what="SlurmJob.kill()")
            if done.returncode != 0:
                log.warning("scancel %s failed: %s", job_id, done.stderr.strip())
            else:
                log.info("cancelled Slurm job %s", job_id)
        self._slurm_job_id = None
        self._hostnames = []

    def __repr__(self) -> str:
        return f"SlurmJob({self._meshes!r}, job id {self._slurm_job_id})"


def _in_batch() -> bool:
    return os.environ.get(BATCH_ENV) == "1"
