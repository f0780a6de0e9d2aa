"""``monarch._src.job.job``: the job interface and jobs on this machine.

Exists for Monarch compatibility: Monarch's own examples and tests import these names
through this internal path. The objects are the public ones of ``monarch.job``; new code
should import from there.
"""

from monarch.job import (
    DEFAULT_JOB_PATH,
    JobState,
    JobTrait,
    LocalJob,
    MeshAdminConfig,
    TelemetryConfig,
    exec_command,
    job_load,
    job_loads,
)

__all__ = [
    "DEFAULT_JOB_PATH",
    "JobState",
    "JobTrait",
    "LocalJob",
    "MeshAdminConfig",
    "TelemetryConfig",
    "exec_command",
    "job_load",
    "job_loads",
]
