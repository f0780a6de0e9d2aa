"""``monarch._src.actor.bootstrap``: running and attaching to remote workers.

Exists for Monarch compatibility: Monarch's own examples and tests import
``attach_to_workers``, ``run_worker_loop_forever``, ``run_worker_loop_until_shutdown``,
``start_worker_loop_forever`` through this internal path. The objects are the public
ones of ``monarch.actor``; new code should import from there.
"""

from monarch.actor import (
    attach_to_workers,
    run_worker_loop_forever,
    run_worker_loop_until_shutdown,
    start_worker_loop_forever,
)

__all__ = [
    "attach_to_workers",
    "run_worker_loop_forever",
    "run_worker_loop_until_shutdown",
    "start_worker_loop_forever",
]
