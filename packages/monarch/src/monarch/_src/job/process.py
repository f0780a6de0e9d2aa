"""``monarch._src.job.process``: jobs of local worker processes.

Exists for Monarch compatibility: Monarch's own examples and tests import ``ProcessJob``
through this internal path. The objects are the public ones of ``monarch.job``; new code
should import from there.
"""

from monarch.job import (
    ProcessJob,
)

__all__ = [
    "ProcessJob",
]
