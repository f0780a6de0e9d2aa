"""``monarch.job``: getting hosts, as in Monarch (jobs on this machine, local
worker processes, Slurm; ``monarch.job.kubernetes`` for Kubernetes),
re-exported from ``monarch_launcher``."""

from monarch_launcher import (
    DEFAULT_JOB_PATH,
    JobState,
    JobTrait,
    LocalJob,
    MeshAdminConfig,
    PortForwarder,
    ProcessJob,
    SlurmJob,
    TelemetryConfig,
    exec_command,
    hosts_from_config,
    job_load,
    job_loads,
    load_current_job,
    set_current_job,
    shell,
)

__all__ = [
    "DEFAULT_JOB_PATH",
    "JobState",
    "JobTrait",
    "LocalJob",
    "MeshAdminConfig",
    "PortForwarder",
    "ProcessJob",
    "SlurmJob",
    "TelemetryConfig",
    "exec_command",
    "hosts_from_config",
    "job_load",
    "job_loads",
    "load_current_job",
    "set_current_job",
    "shell",
]
