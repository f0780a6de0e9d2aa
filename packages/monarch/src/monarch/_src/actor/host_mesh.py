"""``monarch._src.actor.host_mesh``: host meshes and this process's host.

Exists for Monarch compatibility: Monarch's own examples and tests import ``HostMesh``,
``default_bootstrap_cmd``, ``hosts_from_config``, ``this_host``, ``this_proc`` through
this internal path. The objects are the public ones of ``monarch.actor``; new code
should import from there.
"""

from monarch.actor import (
    HostMesh,
    default_bootstrap_cmd,
    hosts_from_config,
    this_host,
    this_proc,
)

__all__ = [
    "HostMesh",
    "default_bootstrap_cmd",
    "hosts_from_config",
    "this_host",
    "this_proc",
]
