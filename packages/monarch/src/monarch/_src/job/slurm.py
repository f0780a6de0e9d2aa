"""``monarch._src.job.slurm``: Slurm jobs.

Exists for Monarch compatibility: Monarch's own examples and tests import ``SlurmJob``
through this internal path. The objects are the public ones of ``monarch.job``; new code
should import from there.
"""

from monarch.job import (
    SlurmJob,
)

__all__ = [
    "SlurmJob",
]
