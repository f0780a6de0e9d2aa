"""Monarch's settings that this runtime has no mechanism for.

Monarch 0.7.0's ``configure`` takes the settings of its Rust runtime (tokio
threads, acknowledgement windows, the mesh admin's bridges, ibverbs queue
pairs, ...). Scripts and test suites written for Monarch set them, so each is
accepted here with Monarch's kind, default and environment variable, checked,
stored and shown by ``get_global_config`` as Monarch shows it; none of them
changes anything, and each one's entry in the configuration reference says
why. Monarch's settings that this runtime does honour are declared by the
package whose behaviour they drive (``cleanup_timeout`` and
``enable_log_forwarding`` by monarch-actor, ``default_transport`` by
monarch-transport, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from ._kinds import Bool, Duration, Float, Int, Kind, Text
from ._registry import declare
from ._testing import Encoding

__all__ = ["EncodingKind"]

_OWNER: Final = "monarch-config"


@dataclass(frozen=True)
class EncodingKind(Kind):
    """One of Monarch's message encodings: an ``Encoding`` member (in the
    environment, its name: ``bincode``, ``json``, ``multipart``).

    Attributes:
        what: the kind in words.
    """

    what: str = "an Encoding (Encoding.Bincode, Encoding.Json, Encoding.Multipart)"

    def parse(self, text: str) -> Encoding:
        """A value from an environment variable's text (see ``Kind.parse``)."""
        for member in Encoding:
            if member.name.lower() == text.strip().lower():
                return member
        raise ValueError(f"{text!r} is not an encoding (bincode, json, multipart)")

    def check(self, value: Any) -> Encoding:
        """The value ``configure`` stores for ``value`` (see ``Kind.check``)."""
        if not isinstance(value, Encoding):
            raise TypeError(f"expected an Encoding, got {type(value).__name__} {value!r}")
        return value


def _d(text: str) -> float:
    return Duration(units_required=True).check(text)


_DURATION: Final = Duration(
    what="a duration with units ('30s', '5m', '1h 30m')", positive=False, units_required=True
)
_COUNT: Final = Int(minimum=0)
_NONZERO: Final = Int(minimum=1)

_CHANNEL: Final = (
    "messages here travel over this runtime's own transport (nng or plain sockets), which "
    "has no such mechanism."
)
_RUST: Final = "it tunes Monarch's Rust runtime, which this runtime does not have."
_ADMIN: Final = (
    "the mesh admin server here (monarch-admin) reads each process's exposed state "
    "directly, without Monarch's bridges and their timeouts."
)
_SPAWN: Final = (
    "procs here are forked by each host's fork server and report ready or failed on "
    "their own; a proc that dies is seen at once, and a silent one after "
    "`heartbeat_deadline`."
)
_RDMA: Final = (
    "the ibverbs backend here (monarch-rdma) registers each buffer on one device "
    "(`rdma_ibverbs_device`) with its own queue pairs; see the `rdma_*` settings of "
    "monarch-rdma for what it does take."
)
_TELEMETRY: Final = (
    "Monarch's own telemetry layers (its Rust tracing, recorder, SQLite and Scuba sinks) "
    "do not exist here; `otel_tracing` and `otel_metrics` turn on this runtime's "
    "OpenTelemetry export."
)

# name, kind, default, environment variable, what it does in Monarch, why it has no effect here
_SETTINGS: Final[tuple[tuple[str, Kind, Any, str, str, str], ...]] = (
    # messages and channels
    (
        "message_delivery_timeout",
        _DURATION,
        _d("30s"),
        "HYPERACTOR_MESSAGE_DELIVERY_TIMEOUT",
        "How long a message may go undelivered before its sender counts it failed.",
        "delivery here is over connections that fail as a whole: a lost peer is reported "
        "through supervision (`heartbeat_deadline`, `host_deadline`), and each call has its "
        "own timeout.",
    ),
    (
        "message_ack_time_interval",
        _DURATION,
        _d("500ms"),
        "HYPERACTOR_MESSAGE_ACK_TIME_INTERVAL",
        "How often a receiver acknowledges the messages it got.",
        _CHANNEL,
    ),
    (
        "message_ack_every_n_messages",
        _COUNT,
        1000,
        "HYPERACTOR_MESSAGE_ACK_EVERY_N_MESSAGES",
        "Acknowledge after this many messages.",
        _CHANNEL,
    ),
    (
        "message_ttl_default",
        _COUNT,
        64,
        "HYPERACTOR_MESSAGE_TTL_DEFAULT",
        "How many hops a message may take before it is dropped.",
        "messages here are forwarded down a multicast tree of bounded depth and never loop.",
    ),
    (
        "message_latency_sampling_rate",
        Float(),
        0.01,
        "HYPERACTOR_MESSAGE_LATENCY_SAMPLING_RATE",
        "The fraction of messages whose latency is recorded (0.0 to 1.0).",
        "this runtime records no per-message latency samples.",
    ),
    (
        "split_max_buffer_size",
        _COUNT,
        5,
        "HYPERACTOR_SPLIT_MAX_BUFFER_SIZE",
        "How many messages a split port buffers before it sends them on.",
        "ports here do not batch messages.",
    ),
    (
        "split_max_buffer_age",
        _DURATION,
        _d("50ms"),
        "HYPERACTOR_SPLIT_MAX_BUFFER_AGE",
        "How long a split port holds buffered messages.",
        "ports here do not batch messages.",
    ),
    (
        "default_encoding",
        EncodingKind(),
        Encoding.Multipart,
        "HYPERACTOR_DEFAULT_ENCODING",
        "The encoding of Monarch's messages.",
        "the codec here is always its own (msgpack headers, pickled payloads with out-of-band "
        "buffers).",
    ),
    (
        "channel_net_rx_buffer_full_check_interval",
        _DURATION,
        _d("5s"),
        "HYPERACTOR_CHANNEL_NET_RX_BUFFER_FULL_CHECK_INTERVAL",
        "How often a full receive buffer is checked again.",
        _CHANNEL,
    ),
    (
        "channel_tcp_congestion",
        Text(),
        "",
        "HYPERACTOR_CHANNEL_TCP_CONGESTION",
        "The TCP congestion control algorithm of channels (`cubic`, `reno`, `bbr`; empty: the "
        "host's default).",
        "TCP connections here keep the host's default algorithm.",
    ),
    (
        "channel_tcp_keepalive_idle",
        _DURATION,
        _d("1m"),
        "HYPERACTOR_CHANNEL_TCP_KEEPALIVE_IDLE",
        "How long a TCP channel may idle before keepalive probes start.",
        "a silent peer is detected here by heartbeats (`heartbeat_deadline`, `host_deadline`).",
    ),
    (
        "channel_reconnect_timeout",
        _DURATION,
        _d("1m"),
        "HYPERACTOR_CHANNEL_RECONNECT_TIMEOUT",
        "How long a channel keeps reconnecting to a peer before it gives up.",
        "a broken connection here means a lost peer, reported through supervision.",
    ),
    (
        "small_write_threshold",
        _COUNT,
        256,
        "HYPERACTOR_SMALL_WRITE_THRESHOLD",
        "Writes smaller than this many bytes are copied rather than sent as separate parts.",
        _CHANNEL,
    ),
    (
        "enable_dest_actor_reordering_buffer",
        Bool(),
        True,
        "HYPERACTOR_ENABLE_DEST_ACTOR_REORDERING_BUFFER",
        "Reorder messages at the receiving actor by their sender's sequence numbers.",
        "messages here are always delivered in send order per sender (`order_gap_wait` bounds "
        "how long a gap may hold later ones).",
    ),
    (
        "sequencer_max_locked_keys",
        _COUNT,
        128,
        "HYPERACTOR_SEQUENCER_MAX_LOCKED_KEYS",
        "How many keys Monarch's message sequencer holds at once.",
        _RUST,
    ),
    (
        "pending_actor_delivery_timeout",
        _DURATION,
        _d("30s"),
        "HYPERACTOR_PENDING_ACTOR_DELIVERY_TIMEOUT",
        "How long a message to an actor that is still starting is held.",
        "messages to an actor that is still starting wait here for as long as it takes to start "
        "(a failed start fails them).",
    ),
    (
        "forwarder_flush_timeout",
        _DURATION,
        _d("5s"),
        "HYPERACTOR_FORWARDER_FLUSH_TIMEOUT",
        "How long a proc's forwarder may take to flush when it stops.",
        _RUST,
    ),
    (
        "server_heartbeat_interval",
        _DURATION,
        _d("1s"),
        "HYPERACTOR_SERVER_HEARTBEAT_INTERVAL",
        "How often a channel server sends heartbeats.",
        "heartbeats here are sent every fifth of `heartbeat_deadline`.",
    ),
    (
        "max_cast_dimension_size",
        _COUNT,
        16,
        "HYPERACTOR_MESH_MAX_CAST_DIMENSION_SIZE",
        "The largest dimension a broadcast's routing splits a mesh's dimensions into.",
        "broadcast trees here are shaped by `max_cast_fanout` alone.",
    ),
    # processes and meshes
    (
        "host_spawn_ready_timeout",
        _DURATION,
        _d("30s"),
        "HYPERACTOR_HOST_SPAWN_READY_TIMEOUT",
        "How long a host may take to start and report ready.",
        _SPAWN,
    ),
    (
        "mesh_proc_spawn_max_idle",
        _DURATION,
        _d("30s"),
        "HYPERACTOR_MESH_PROC_SPAWN_MAX_IDLE",
        "How long spawning procs may go without progress.",
        _SPAWN,
    ),
    (
        "actor_spawn_max_idle",
        _DURATION,
        _d("30s"),
        "HYPERACTOR_MESH_ACTOR_SPAWN_MAX_IDLE",
        "How long spawning actors may go without progress.",
        "an actor's constructor here may take as long as it takes; its failure is reported "
        "when it raises.",
    ),
    (
        "get_actor_state_max_idle",
        _DURATION,
        _d("30s"),
        "HYPERACTOR_MESH_GET_ACTOR_STATE_MAX_IDLE",
        "How long a query of actors' states may go without progress.",
        _RUST,
    ),
    (
        "proc_stop_max_idle",
        _DURATION,
        _d("30s"),
        "HYPERACTOR_MESH_PROC_STOP_MAX_IDLE",
        "How long stopping procs may go without progress.",
        "stopping a proc here is bounded by `cleanup_timeout`, after which it is killed.",
    ),
    (
        "get_proc_state_max_idle",
        _DURATION,
        _d("1m"),
        "HYPERACTOR_MESH_GET_PROC_STATE_MAX_IDLE",
        "How long a query of procs' states may go without progress.",
        _RUST,
    ),
    (
        "supervision_watchdog_timeout",
        _DURATION,
        _d("2m"),
        "HYPERACTOR_MESH_SUPERVISION_WATCHDOG_TIMEOUT",
        "How long the supervision stream of an actor mesh may stay silent before the "
        "controller counts as unreachable.",
        "liveness here is judged by heartbeats (`heartbeat_deadline`, `host_deadline`).",
    ),
    (
        "mesh_orphan_timeout",
        _DURATION,
        _d("1m"),
        "HYPERACTOR_MESH_ORPHAN_TIMEOUT",
        "How long procs outlive a controller they no longer hear from.",
        "procs here stop when their owner's process or connection goes away (and a proc "
        "that stops hearing its owner's heartbeats stops within `heartbeat_deadline`).",
    ),
    (
        "mesh_terminate_concurrency",
        _COUNT,
        16,
        "HYPERACTOR_MESH_TERMINATE_CONCURRENCY",
        "How many procs are terminated at once at shutdown.",
        "each host agent here stops all its procs at once.",
    ),
    (
        "mesh_terminate_timeout",
        _DURATION,
        _d("10s"),
        "HYPERACTOR_MESH_TERMINATE_TIMEOUT",
        "How long each proc has to exit gracefully at shutdown.",
        "stopping a proc here is bounded by `cleanup_timeout`, after which it is killed.",
    ),
    (
        "process_exit_timeout",
        _DURATION,
        _d("10s"),
        "HYPERACTOR_PROCESS_EXIT_TIMEOUT",
        "How long a process has to exit once asked to.",
        "stopping a proc here is bounded by `cleanup_timeout`, after which it is killed.",
    ),
    (
        "stop_grace_period",
        _DURATION,
        _d("10s"),
        "HYPERACTOR_REMOTE_STOP_GRACE_PERIOD",
        "How long a remote process has to stop before it is killed.",
        "stopping a proc here is bounded by `cleanup_timeout`, after which it is killed.",
    ),
    (
        "mesh_bootstrap_enable_pdeathsig",
        Bool(),
        True,
        "HYPERACTOR_MESH_BOOTSTRAP_ENABLE_PDEATHSIG",
        "Ask the kernel to kill a spawned process when its parent dies.",
        "procs here always die with the fork server that made them.",
    ),
    (
        "use_direct_spawn",
        Bool(),
        False,
        "HYPERACTOR_MESH_USE_DIRECT_SPAWN",
        "Spawn procs directly rather than through Monarch's bootstrap process.",
        "procs here are always forked by each host's fork server.",
    ),
    (
        "proc_launcher_kind",
        Text(),
        "",
        "HYPERACTOR_MESH_PROC_LAUNCHER_KIND",
        "Which launcher starts procs (empty: the native one).",
        "procs here are always forked by each host's fork server.",
    ),
    (
        "mesh_attach_config_timeout",
        _DURATION,
        _d("1m"),
        "HYPERACTOR_MESH_ATTACH_CONFIG_TIMEOUT",
        "How long `attach_to_workers` waits for the workers to take the controller's "
        "configuration.",
        "the controller's settings here travel with each spawn, so there is nothing to wait for.",
    ),
    (
        "terminated_snapshot_retention",
        _COUNT,
        100,
        "HYPERACTOR_TERMINATED_SNAPSHOT_RETENTION",
        "How many terminated actors' last states are kept for introspection.",
        _RUST,
    ),
    (
        "process_memory_metric_interval",
        _DURATION,
        _d("5m"),
        "HYPERACTOR_PROCESS_MEMORY_METRIC_INTERVAL",
        "How often each process records its memory use as a metric.",
        "this runtime records no memory metric of its own.",
    ),
    (
        "tokio_worker_threads",
        Int(minimum=1, optional=True),
        None,
        "MONARCH_TOKIO_WORKER_THREADS",
        "Worker threads of Monarch's tokio runtime (unset: one per core).",
        "there is no tokio runtime here: each process runs one asyncio loop.",
    ),
    (
        "enable_unawaited_python_task_traceback",
        Bool(),
        False,
        "MONARCH_HYPERACTOR_ENABLE_UNAWAITED_PYTHON_TASK_TRACEBACK",
        "Record where each Python task was made, to report tasks never awaited.",
        "Python tasks here are asyncio's own, which warns of never-awaited coroutines itself.",
    ),
    # logs
    (
        "enable_file_capture",
        Bool(),
        False,
        "HYPERACTOR_MESH_ENABLE_FILE_CAPTURE",
        "Write each proc's stdout and stderr to files on its host.",
        "procs' output here goes to the terminal or, with `enable_log_forwarding`, to the "
        "controller.",
    ),
    (
        "tail_log_lines",
        _COUNT,
        0,
        "HYPERACTOR_MESH_TAIL_LOG_LINES",
        "How many of a proc's last output lines are kept to show when it fails.",
        "a failed proc's report here carries its exit status and error, not its last lines.",
    ),
    (
        "read_log_buffer",
        _COUNT,
        100,
        "HYPERACTOR_READ_LOG_BUFFER",
        "The buffer size for reading procs' output.",
        "procs' output here is read in 64 KiB chunks.",
    ),
    (
        "force_file_log",
        Bool(),
        False,
        "HYPERACTOR_FORCE_FILE_LOG",
        "Write Monarch's own log to a file whatever the environment.",
        "this runtime logs through Python's `logging` (loggers `monarch.*`), configured by the "
        "program.",
    ),
    (
        "file_log_level",
        Text(),
        "",
        "MONARCH_FILE_LOG",
        "The level of Monarch's log file (`debug`, `info`, `warn`, `error`; empty: `info`).",
        "this runtime logs through Python's `logging` (loggers `monarch.*`), configured by the "
        "program.",
    ),
    (
        "monarch_log_suffix",
        Text(),
        "",
        "MONARCH_LOG_SUFFIX",
        "A suffix for Monarch's log file names.",
        "this runtime writes no log files of its own.",
    ),
    # telemetry
    (
        "enable_otel_tracing",
        Bool(),
        True,
        "ENABLE_OTEL_TRACING",
        "Monarch's OpenTelemetry tracing layer.",
        _TELEMETRY,
    ),
    (
        "enable_otel_metrics",
        Bool(),
        True,
        "ENABLE_OTEL_METRICS",
        "Monarch's OpenTelemetry metrics layer.",
        _TELEMETRY,
    ),
    (
        "enable_recorder_tracing",
        Bool(),
        True,
        "ENABLE_RECORDER_TRACING",
        "Monarch's in-memory recorder of recent trace events.",
        _TELEMETRY,
    ),
    (
        "enable_sqlite_tracing",
        Bool(),
        False,
        "ENABLE_SQLITE_TRACING",
        "Monarch's SQLite trace sink.",
        _TELEMETRY,
    ),
    (
        "scuba_log_enter_exit",
        Bool(),
        False,
        "SCUBA_LOG_ENTER_EXIT",
        "Log span enter and exit events to Meta's Scuba.",
        _TELEMETRY,
    ),
    (
        "otel_metric_export_interval",
        _DURATION,
        _d("1s"),
        "",
        "How often Monarch's metrics are exported.",
        "metrics here (with `otel_metrics`) are exported by OpenTelemetry's SDK every "
        "`OTEL_METRIC_EXPORT_INTERVAL` milliseconds, the standard variable, which this "
        "setting therefore does not read.",
    ),
    # the mesh admin server
    (
        "mesh_admin_config_dump_bridge_timeout",
        _DURATION,
        _d("5s"),
        "HYPERACTOR_MESH_ADMIN_CONFIG_DUMP_BRIDGE_TIMEOUT",
        "How long the mesh admin waits for a process's configuration dump.",
        _ADMIN,
    ),
    (
        "mesh_admin_max_concurrent_resolves",
        _NONZERO,
        2,
        "HYPERACTOR_MESH_ADMIN_MAX_CONCURRENT_RESOLVES",
        "How many references the mesh admin resolves at once.",
        _ADMIN,
    ),
    (
        "mesh_admin_query_child_timeout",
        _DURATION,
        _d("100ms"),
        "HYPERACTOR_MESH_ADMIN_QUERY_CHILD_TIMEOUT",
        "How long the mesh admin waits for a child's answer.",
        _ADMIN,
    ),
    (
        "mesh_admin_resolve_actor_timeout",
        _DURATION,
        _d("200ms"),
        "HYPERACTOR_MESH_ADMIN_RESOLVE_ACTOR_TIMEOUT",
        "How long the mesh admin waits to resolve an actor.",
        _ADMIN,
    ),
    (
        "mesh_admin_single_host_timeout",
        _DURATION,
        _d("3s"),
        "HYPERACTOR_MESH_ADMIN_SINGLE_HOST_TIMEOUT",
        "How long the mesh admin waits for one host's answer.",
        _ADMIN,
    ),
    (
        "mesh_admin_tree_timeout",
        _DURATION,
        _d("10s"),
        "HYPERACTOR_MESH_ADMIN_TREE_TIMEOUT",
        "How long the mesh admin waits for the whole tree of a job.",
        _ADMIN,
    ),
    (
        "mesh_admin_pyspy_timeout",
        _DURATION,
        _d("10s"),
        "HYPERACTOR_MESH_ADMIN_PYSPY_TIMEOUT",
        "How long one py-spy dump may take.",
        "a py-spy dump here has its own fixed limit (20 s).",
    ),
    (
        "mesh_admin_pyspy_bridge_timeout",
        _DURATION,
        _d("13s"),
        "HYPERACTOR_MESH_ADMIN_PYSPY_BRIDGE_TIMEOUT",
        "How long the mesh admin waits for a py-spy dump relayed from a proc.",
        _ADMIN,
    ),
    (
        "mesh_admin_pyspy_client_timeout",
        _DURATION,
        _d("20s"),
        "HYPERACTOR_MESH_ADMIN_PYSPY_CLIENT_TIMEOUT",
        "How long an admin client waits for a py-spy dump.",
        _ADMIN,
    ),
    (
        "mesh_admin_pyspy_max_profile_duration",
        _DURATION,
        _d("5m"),
        "HYPERACTOR_MESH_ADMIN_PYSPY_MAX_PROFILE_DURATION",
        "The longest py-spy profile the mesh admin takes.",
        "the mesh admin here takes py-spy dumps, not profiles.",
    ),
    # RDMA
    (
        "rdma_ibverbs_target",
        Text(),
        "",
        "MONARCH_RDMA_IBVERBS_TARGET",
        "The ibverbs device of RDMA managers without one of their own (`cpu:<numa>`, "
        "`gpu:<ordinal>`, `nic:<name>`; empty: chosen automatically).",
        _RDMA,
    ),
    (
        "rdma_peer_device_affinity",
        Text(),
        "",
        "MONARCH_RDMA_PEER_DEVICE_AFFINITY",
        "Which peer NICs each local NIC may pair with (`any`, `match_name`, `groups:...`; "
        "empty: `any`).",
        _RDMA,
    ),
    (
        "rdma_max_nics_per_buffer",
        Int(minimum=1, optional=True),
        None,
        "MONARCH_RDMA_MAX_NICS_PER_BUFFER",
        "How many NICs a buffer is registered on, at most (unset: no limit).",
        _RDMA,
    ),
    (
        "rdma_min_stripe_size_kb",
        _COUNT,
        512,
        "MONARCH_RDMA_MIN_STRIPE_SIZE_KB",
        "The smallest stripe, in KiB, of a transfer spread over several NIC pairs.",
        _RDMA,
    ),
    (
        "rdma_qps_per_cq",
        _NONZERO,
        64,
        "MONARCH_RDMA_QPS_PER_CQ",
        "How many queue pairs share one completion queue.",
        _RDMA,
    ),
    (
        "rdma_qps_per_peer",
        _NONZERO,
        4,
        "MONARCH_RDMA_QPS_PER_PEER",
        "How many queue pairs connect to each peer.",
        _RDMA,
    ),
    (
        "rdma_qp_init_timeout",
        _DURATION,
        _d("30s"),
        "MONARCH_RDMA_QP_INIT_TIMEOUT",
        "How long setting up a queue pair may take.",
        _RDMA,
    ),
    (
        "rdma_cq_poller_per_device",
        Bool(),
        True,
        "MONARCH_RDMA_CQ_POLLER_PER_DEVICE",
        "Give each RDMA device its own completion-queue poller.",
        _RDMA,
    ),
    (
        "rdma_host_odp",
        Bool(),
        False,
        "MONARCH_RDMA_HOST_ODP",
        "Register host memory with on-demand paging.",
        _RDMA,
    ),
    (
        "rdma_runtime_worker_threads",
        _NONZERO,
        4,
        "MONARCH_RDMA_RUNTIME_WORKER_THREADS",
        "Worker threads of Monarch's RDMA data-plane runtime.",
        _RDMA,
    ),
    (
        "rdma_tcp_fallback_parallelism",
        _NONZERO,
        1,
        "MONARCH_RDMA_TCP_FALLBACK_PARALLELISM",
        "How many transfers Monarch's TCP fallback runs at once.",
        "the TCP backend here opens `rdma_tcp_streams` connections per transfer.",
    ),
)

for _name, _kind, _default, _env, _meaning, _why in _SETTINGS:
    declare(
        _name,
        _kind,
        _default,
        env=_env or (),
        doc=f"{_meaning} Accepted for compatibility; no effect here: {_why}",
        owner=_OWNER,
    )
