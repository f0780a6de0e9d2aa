"""Looking at a running job of Monarch in Python: the mesh admin server (a
JSON API over the job's hosts, processes and actors), ``monarch-tui`` (the
terminal UI) and the web dashboard.

The runtime keeps what they show (per-actor counters and recent events);
this package only asks for it, so a job that never starts the admin pays
nothing for it.

Examples:
    >>> from monarch_admin import enable_admin, topology
    >>> from monarch_actor import this_host
    >>> procs = this_host().spawn_procs(per_host={"gpus": 2})
    >>> server = enable_admin("127.0.0.1:0", quiet=True)
    >>> topology()["summary"]["procs"]
    2
    >>> procs.stop().get()
"""

from ._collect import diagnostics, is_down, stacks, topology
from ._server import (
    AdminServer,
    admin_token,
    disable_admin,
    enable_admin,
    enable_dashboard,
    parse_addr,
)

__all__ = [
    "AdminServer",
    "admin_token",
    "diagnostics",
    "disable_admin",
    "enable_admin",
    "enable_dashboard",
    "is_down",
    "parse_addr",
    "stacks",
    "topology",
]
