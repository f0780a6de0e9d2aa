"""Supervision trees for Monarch in Python: the failure model, the owner of
every mesh, where failures go, and when a silent process counts as dead.

Logic only, with no processes or sockets: the actor runtime reports what
happens and carries out what this package decides. The example below fails
a rank of a mesh owned by the root client: the root is told once.

Examples:
    >>> from monarch_supervision import MeshFailure, SupervisionTree, ROOT
    >>> told = []
    >>> class Routes:
    ...     def to_actor(self, delivery): return False
    ...     def to_root(self, failure): told.append(failure)
    ...     def fail_actor(self, owner, reason, cause): told.append(owner)
    >>> tree = SupervisionTree(Routes())
    >>> tree.adopt("workers-1", ROOT, size=4)
    >>> _ = tree.fail("workers-1", [2], "<root>.<W workers{'gpus': 2/4}>", "boom")
    >>> told[0].crashed_ranks
    [2]
    >>> tree.fail("workers-1", [2], "<root>.<W workers{'gpus': 2/4}>", "boom") is None  # once
    True
"""

from ._errors import ActorError, MonarchError, SupervisionError
from ._events import (
    ActorFailed,
    ActorStarted,
    ActorStopped,
    HeartbeatMissed,
    LifecycleEvent,
    ProcExited,
)
from ._failure import ROOT_MESH, MeshFailure
from ._liveness import DEFAULT_HEARTBEAT_DEADLINE, HeartbeatMonitor, exit_reason
from ._tree import (
    ROOT,
    Delivery,
    OwnershipError,
    Routes,
    SupervisionTree,
    escalation_reason,
    root_cause,
    run_fault_hook,
)

__all__ = [
    "DEFAULT_HEARTBEAT_DEADLINE",
    "ROOT",
    "ROOT_MESH",
    "ActorError",
    "ActorFailed",
    "ActorStarted",
    "ActorStopped",
    "Delivery",
    "HeartbeatMissed",
    "HeartbeatMonitor",
    "LifecycleEvent",
    "MeshFailure",
    "MonarchError",
    "OwnershipError",
    "ProcExited",
    "Routes",
    "SupervisionError",
    "SupervisionTree",
    "escalation_reason",
    "exit_reason",
    "root_cause",
    "run_fault_hook",
]

__version__ = "0.1.0"
