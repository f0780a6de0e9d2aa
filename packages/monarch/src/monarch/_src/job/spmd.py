"""``monarch._src.job.spmd``: torchrun-style jobs.

Exists for Monarch compatibility: Monarch's own examples and tests import ``SPMDJob``,
``StoreJob`` and ``serve`` through this internal path. The objects are the public ones
of ``monarch.job.spmd``; new code should import from there.
"""

from monarch.job.spmd import SPMDJob, StoreJob, serve

__all__ = ["SPMDJob", "StoreJob", "serve"]
