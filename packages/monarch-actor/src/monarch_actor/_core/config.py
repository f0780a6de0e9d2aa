"""The actor runtime's settings, declared in the registry of ``monarch_config``
(Monarch's key and environment variable where Monarch has the setting)."""

from __future__ import annotations

from typing import Final

from monarch_config import Bool, Choice, Duration, Int, Text, declare
from monarch_supervision import DEFAULT_HEARTBEAT_DEADLINE

__all__ = [
    "INSECURE_PUBLIC_SECRET",
    "PRELOAD",
    "SHARE_GPUS",
    "PROGRESS",
    "attach_timeout",
    "cast_fanout",
    "cleanup_timeout",
    "debug_server_address",
    "log_forwarding",
    "prefix_with_rank",
    "pyspy_bin",
    "heartbeat_deadline",
    "host_deadline",
    "order_gap_wait",
    "otel_metrics",
    "otel_tracing",
]

_OWNER: Final = "monarch-actor"

_CAST_FANOUT = declare(
    "max_cast_fanout",
    Int(minimum=1),
    16,
    env=("MONARCH_CAST_FANOUT", "HYPERACTOR_MESH_MAX_CAST_FANOUT"),
    doc="Children per node of a broadcast's multicast tree.",
    owner=_OWNER,
)
_HEARTBEAT_DEADLINE = declare(
    "heartbeat_deadline",
    Duration(),
    DEFAULT_HEARTBEAT_DEADLINE,
    env="MONARCH_HEARTBEAT_DEADLINE",
    doc="How long a process may stay silent before its owner counts it dead (it "
    "sends a heartbeat every fifth of this).",
    owner=_OWNER,
)
_HOST_DEADLINE = declare(
    "host_deadline",
    Duration(),
    5.0,
    env="MONARCH_HOST_DEADLINE",
    doc="How long a worker host may stay silent before its procs' callers are told "
    "the host is lost.",
    owner=_OWNER,
)
_ATTACH_TIMEOUT = declare(
    "attach_timeout",
    Duration(),
    60.0,
    env="MONARCH_ATTACH_TIMEOUT",
    doc="How long `attach_to_workers` keeps trying a worker that is not up yet.",
    owner=_OWNER,
)
_CLEANUP_TIMEOUT = declare(
    "cleanup_timeout",
    Duration(),
    3.0,
    env=("MONARCH_CLEANUP_TIMEOUT", "HYPERACTOR_CLEANUP_TIMEOUT"),
    doc="How long an actor's `__cleanup__` (and stopping the meshes it owns) may take.",
    owner=_OWNER,
)
_STOP_ACTOR_TIMEOUT = declare(
    "stop_actor_timeout",
    Duration(what="a duration with units ('30s', '5m')", positive=False, units_required=True),
    10.0,
    env="HYPERACTOR_STOP_ACTOR_TIMEOUT",
    doc="How long a request to stop an actor waits for the actor's thread (busy in "
    "`__init__`, or in a message that does not return) before the actor is stopped "
    "without it; its `__cleanup__` then does not run.",
    owner=_OWNER,
)
_ORDER_GAP_WAIT = declare(
    "order_gap_wait",
    Duration(),
    30.0,
    env="MONARCH_ORDER_GAP_WAIT",
    doc="How long a missing message may hold up later ones from the same sender to "
    "the same actor (only a message lost with a forwarding process goes missing).",
    owner=_OWNER,
)
_OTEL_TRACING = declare(
    "otel_tracing",
    Bool(),
    False,
    env="ENABLE_OTEL_TRACING",
    doc="Export the spans of `traced`, `span` and instrumented endpoints: each process "
    "(the controller and every proc) sets up OpenTelemetry's SDK with an OTLP exporter "
    "for other code's spans, and Monarch's own span recorder (a few µs a span) for these, "
    "both sending to `OTEL_EXPORTER_OTLP_ENDPOINT` by the standard `OTEL_EXPORTER_OTLP_*`, "
    "`OTEL_TRACES_SAMPLER` and `OTEL_BSP_*` variables (needs `monarch-actor[otel]`; global "
    "providers the program set itself are left alone, and get Monarch's spans too).",
    owner=_OWNER,
)
_OTEL_METRICS = declare(
    "otel_metrics",
    Bool(),
    False,
    env="ENABLE_OTEL_METRICS",
    doc="Export the metrics of `get_meter()`: each process sets up OpenTelemetry's SDK "
    "with a periodic OTLP exporter, sending to `OTEL_EXPORTER_OTLP_ENDPOINT` every "
    "`OTEL_METRIC_EXPORT_INTERVAL` milliseconds (needs `monarch-actor[otel]`).",
    owner=_OWNER,
)
SHARE_GPUS = declare(
    "share_gpus",
    Bool(),
    False,
    env="MONARCH_SHARE_GPUS",
    doc="Let a host run more processes along a `gpus`/`gpu` dimension than it has GPUs, "
    "several on each GPU (round robin), instead of refusing the spawn. For tests on a "
    "machine with few GPUs: NCCL cannot put two ranks on one GPU, so collectives over CUDA "
    "tensors then run over gloo.",
    owner=_OWNER,
)
PRELOAD = declare(
    "preload",
    Text(what="module names, comma-separated; auto; none"),
    "auto",
    env="MONARCH_PRELOAD",
    doc="Modules each host's fork server imports before forking procs, so every "
    "proc starts with them: `auto` is torch when the script has imported it, "
    "`none` is nothing. A worker (`run_worker_loop_forever`) starts its fork server "
    "when it starts: its `auto` is what each attaching script's `auto` names; set "
    "`torch` on a worker to import torch before any script attaches.",
    owner=_OWNER,
)

INSECURE_PUBLIC_SECRET = declare(
    "insecure_public_secret",
    Bool(),
    False,
    env="MONARCH_INSECURE_PUBLIC_SECRET",
    doc='Let `ca="trust_all_connections"` with no job secret and no certificates fall '
    "back to a public secret (as Monarch runs with no authentication at all): anyone who "
    "can reach a worker's port can then run code on its host. Off, such a worker or "
    "`attach_to_workers` refuses to start and says what to set.",
    owner=_OWNER,
)

PROGRESS = declare(
    "progress",
    Choice(choices=("auto", "always", "never")),
    "auto",
    env="MONARCH_PROGRESS",
    doc="Progress lines for long waits (a large mesh starting, a job in a scheduler's "
    "queue, a large RDMA transfer): `auto` shows them when standard error is a terminal.",
    owner=_OWNER,
)

_DEBUG_SERVER_HOST = declare(
    "debug_server_host",
    Text(),
    "localhost",
    env="MONARCH_DEBUG_SERVER_HOST",
    doc="Where the controller's debug server listens for `monarch debug` (it serves the "
    "pdb sessions `breakpoint()` opens in actors). A host beyond the loopback interface "
    "makes clients prove the job's secret (`MONARCH_JOB_SECRET`).",
    owner=_OWNER,
)
_DEBUG_SERVER_PORT = declare(
    "debug_server_port",
    Int(minimum=0),
    27000,
    env="MONARCH_DEBUG_SERVER_PORT",
    doc="The debug server's TCP port (0: one the system picks; "
    "`debug_controller().server_address` tells which).",
    owner=_OWNER,
)

_LOG_FORWARDING = declare(
    "enable_log_forwarding",
    Bool(),
    False,
    env="HYPERACTOR_MESH_ENABLE_LOG_FORWARDING",
    doc="Procs spawned afterwards send their stdout and stderr to the process that spawned "
    "them, which writes each line with the proc's rank (as "
    "`ProcMesh.logging_option(stream_to_client=True)` does later); off, their output goes "
    "to the terminal they inherited.",
    owner=_OWNER,
)
_PREFIX_WITH_RANK = declare(
    "prefix_with_rank",
    Bool(),
    True,
    env="HYPERACTOR_PREFIX_WITH_RANK",
    doc="Start each output line forwarded from a proc with its host, proc name and rank "
    "(`[host proc] [rank] line`); off, the line is written as the proc wrote it.",
    owner=_OWNER,
)
_PYSPY_BIN = declare(
    "pyspy_bin",
    Text(what="a path; empty: `py-spy` on PATH"),
    "",
    env="PYSPY_BIN",
    doc="The py-spy program that stack dumps (`monarch debug`, the admin API) run, tried "
    "before `py-spy` on PATH; read in the proc being dumped.",
    owner=_OWNER,
)


def cast_fanout() -> int:
    """Children per node of a broadcast's multicast tree."""
    return _CAST_FANOUT.get()


def heartbeat_deadline() -> float:
    """Seconds a process may stay silent before its owner counts it dead."""
    return _HEARTBEAT_DEADLINE.get()


def host_deadline() -> float:
    """Seconds a worker may stay silent before its host counts as lost."""
    return _HOST_DEADLINE.get()


def attach_timeout() -> float:
    """Seconds ``attach_to_workers`` keeps trying a worker that is not up yet."""
    return _ATTACH_TIMEOUT.get()


def cleanup_timeout() -> float:
    """Seconds an actor's ``__cleanup__`` (and stopping the meshes it owns) may take."""
    return _CLEANUP_TIMEOUT.get()


def stop_actor_timeout() -> float:
    """Seconds a stop request waits for the actor's thread (Monarch's ``stop_actor_timeout``)."""
    return _STOP_ACTOR_TIMEOUT.get()


def order_gap_wait() -> float:
    """Seconds a missing message may hold up later ones from the same sender
    to the same actor."""
    return _ORDER_GAP_WAIT.get()


def otel_tracing() -> bool:
    """Whether this process exports spans through OpenTelemetry's SDK."""
    return _OTEL_TRACING.get()


def otel_metrics() -> bool:
    """Whether this process exports metrics through OpenTelemetry's SDK."""
    return _OTEL_METRICS.get()


def debug_server_address() -> tuple[str, int]:
    """Where the controller's debug server listens: (host, port)."""
    return _DEBUG_SERVER_HOST.get(), _DEBUG_SERVER_PORT.get()


def log_forwarding() -> bool:
    """Whether procs spawned from here send their output to this process."""
    return _LOG_FORWARDING.get()


def prefix_with_rank() -> bool:
    """Whether forwarded output lines start with their proc's host, name and rank."""
    return _PREFIX_WITH_RANK.get()


def pyspy_bin() -> str:
    """The py-spy program to try before ``py-spy`` on PATH (empty: PATH only)."""
    return _PYSPY_BIN.get()
