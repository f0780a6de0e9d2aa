"""``monarch._src.job.port_forward``: TCP port forwarding between proc meshes.

Exists for Monarch compatibility: Monarch's own examples and tests import
``PortForwarder`` through this internal path. The object is the public one of
``monarch.job``; new code should import from there.
"""

from monarch.job import PortForwarder

__all__ = [
    "PortForwarder",
]
