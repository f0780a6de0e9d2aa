"""``monarch.job``'s names: jobs that get hosts from this machine, local
worker processes, Slurm or Kubernetes, and the functions around them."""

from ._config import hosts_from_config
from ._current import load_current_job, set_current_job
from ._exec import exec_command
from ._job import DEFAULT_JOB_PATH, JobState, JobTrait, LocalJob, job_load, job_loads
from ._kubernetes import ImageSpec, KubeConfig, KubernetesJob
from ._process import ProcessJob
from ._shell import shell
from ._slurm import SlurmJob

__all__ = [
    "DEFAULT_JOB_PATH",
    "ImageSpec",
    "JobState",
    "JobTrait",
    "KubeConfig",
    "KubernetesJob",
    "LocalJob",
    "ProcessJob",
    "SlurmJob",
    "exec_command",
    "hosts_from_config",
    "job_load",
    "job_loads",
    "load_current_job",
    "set_current_job",
    "shell",
]
