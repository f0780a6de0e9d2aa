"""Getting hosts for Monarch in Python.

A *job* says which named host meshes a program needs and where they come
from; ``job.state()`` starts it if needed and returns its host meshes::

    from monarch_launcher import ProcessJob
    state = ProcessJob({"trainers": 2}).state(cached_path=None)
    procs = state.trainers.spawn_procs(per_host={"gpus": 2})

Jobs: ``LocalJob`` (this machine), ``ProcessJob`` (worker processes on this
machine), ``SlurmJob`` (one Slurm allocation), ``KubernetesJob`` (pods).
Every host runs a worker (``monarch worker --address tcp://HOST:PORT``);
``hosts_from_config(name)`` attaches to the workers a deployment lists.
Monarch's ``monarch.job`` re-exports these names.
"""

from ._config import hosts_from_config, parse_worker_list
from ._current import load_current_job, set_current_job
from ._errors import JobError, LauncherError, Unsupported, WorkerAddressError
from ._exec import exec_command
from ._job import (
    BATCH_ENV,
    DEFAULT_JOB_PATH,
    JOB_CACHE_ENV,
    JobState,
    JobTrait,
    LocalJob,
    job_file,
    job_load,
    job_loads,
)
from ._kubernetes import ImageSpec, KubeConfig, KubernetesJob
from ._observe import MeshAdminConfig, TelemetryConfig
from ._port_forward import PortForwarder
from ._process import ProcessJob
from ._shell import shell
from ._slurm import SlurmJob
from ._worker import check_worker_address, worker_command

__all__ = [
    "BATCH_ENV",
    "DEFAULT_JOB_PATH",
    "JOB_CACHE_ENV",
    "ImageSpec",
    "JobError",
    "JobState",
    "JobTrait",
    "KubeConfig",
    "KubernetesJob",
    "LauncherError",
    "LocalJob",
    "MeshAdminConfig",
    "PortForwarder",
    "ProcessJob",
    "SlurmJob",
    "TelemetryConfig",
    "Unsupported",
    "WorkerAddressError",
    "check_worker_address",
    "exec_command",
    "hosts_from_config",
    "job_file",
    "job_load",
    "job_loads",
    "load_current_job",
    "parse_worker_list",
    "set_current_job",
    "shell",
    "worker_command",
]

__version__ = "0.1.0"
