"""Monarch 0.7.0's settings: every key its ``configure`` takes is accepted here,
with its kind, default and environment variable, and shown as Monarch shows it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from monarch_config import (
    Encoding,
    Float,
    clear_runtime_config,
    configure,
    configured,
    get_global_config,
    get_runtime_config,
    settings,
)

# Monarch 0.7.0's get_global_config(), less the keys other packages declare
# (monarch-actor, -transport, -rdma, -admin), which their own tests cover.
MONARCH_DEFAULTS = {
    "actor_spawn_max_idle": "30s",
    "channel_net_rx_buffer_full_check_interval": "5s",
    "channel_reconnect_timeout": "1m",
    "channel_tcp_congestion": "",
    "channel_tcp_keepalive_idle": "1m",
    "default_encoding": Encoding.Multipart,
    "enable_dest_actor_reordering_buffer": True,
    "enable_file_capture": False,
    "enable_otel_metrics": True,
    "enable_otel_tracing": True,
    "enable_recorder_tracing": True,
    "enable_sqlite_tracing": False,
    "enable_unawaited_python_task_traceback": False,
    "file_log_level": "",
    "force_file_log": False,
    "forwarder_flush_timeout": "5s",
    "get_actor_state_max_idle": "30s",
    "get_proc_state_max_idle": "1m",
    "host_spawn_ready_timeout": "30s",
    "max_cast_dimension_size": 16,
    "mesh_admin_config_dump_bridge_timeout": "5s",
    "mesh_admin_max_concurrent_resolves": 2,
    "mesh_admin_pyspy_bridge_timeout": "13s",
    "mesh_admin_pyspy_client_timeout": "20s",
    "mesh_admin_pyspy_max_profile_duration": "5m",
    "mesh_admin_pyspy_timeout": "10s",
    "mesh_admin_query_child_timeout": "100ms",
    "mesh_admin_resolve_actor_timeout": "200ms",
    "mesh_admin_single_host_timeout": "3s",
    "mesh_admin_tree_timeout": "10s",
    "mesh_attach_config_timeout": "1m",
    "mesh_bootstrap_enable_pdeathsig": True,
    "mesh_orphan_timeout": "1m",
    "mesh_proc_spawn_max_idle": "30s",
    "mesh_terminate_concurrency": 16,
    "mesh_terminate_timeout": "10s",
    "message_ack_every_n_messages": 1000,
    "message_ack_time_interval": "500ms",
    "message_delivery_timeout": "30s",
    "message_latency_sampling_rate": 0.01,
    "message_ttl_default": 64,
    "monarch_log_suffix": "",
    "otel_metric_export_interval": "1s",
    "pending_actor_delivery_timeout": "30s",
    "proc_launcher_kind": "",
    "proc_stop_max_idle": "30s",
    "process_exit_timeout": "10s",
    "process_memory_metric_interval": "5m",
    "rdma_cq_poller_per_device": True,
    "rdma_host_odp": False,
    "rdma_ibverbs_target": "",
    "rdma_max_nics_per_buffer": None,
    "rdma_min_stripe_size_kb": 512,
    "rdma_peer_device_affinity": "",
    "rdma_qp_init_timeout": "30s",
    "rdma_qps_per_cq": 64,
    "rdma_qps_per_peer": 4,
    "rdma_runtime_worker_threads": 4,
    "rdma_tcp_fallback_parallelism": 1,
    "read_log_buffer": 100,
    "scuba_log_enter_exit": False,
    "sequencer_max_locked_keys": 128,
    "server_heartbeat_interval": "1s",
    "small_write_threshold": 256,
    "split_max_buffer_age": "50ms",
    "split_max_buffer_size": 5,
    "stop_grace_period": "10s",
    "supervision_watchdog_timeout": "2m",
    "tail_log_lines": 0,
    "terminated_snapshot_retention": 100,
    "tokio_worker_threads": None,
    "use_direct_spawn": False,
}


@pytest.fixture(autouse=True)
def _clean_runtime_layer() -> Iterator[None]:
    yield
    clear_runtime_config()


def test_monarchs_keys_have_its_defaults_and_types() -> None:
    config = get_global_config()
    for key, default in MONARCH_DEFAULTS.items():
        assert config[key] == default, key
        assert type(config[key]) is type(default), key


def test_each_is_documented_as_having_no_effect() -> None:
    for key in MONARCH_DEFAULTS:
        setting = settings()[key]
        assert setting.owner == "monarch-config"
        assert "Accepted for compatibility; no effect here:" in setting.doc, key


def test_they_are_stored_returned_and_restored() -> None:
    values = {
        "host_spawn_ready_timeout": "5m",
        "message_delivery_timeout": "1m 30s",
        "tail_log_lines": 100,
        "enable_file_capture": True,
        "message_latency_sampling_rate": 0.5,
        "default_encoding": Encoding.Json,
        "rdma_max_nics_per_buffer": 4,
        "tokio_worker_threads": 8,
        "channel_tcp_congestion": "bbr",
    }
    with configured(**values) as config:
        for key, value in values.items():
            assert config[key] == value
        assert get_runtime_config() == values
    assert {key: get_global_config()[key] for key in values} == {
        key: MONARCH_DEFAULTS[key] for key in values
    }


@pytest.mark.parametrize(
    ("text", "shown"),
    [("300s", "5m"), ("90s", "1m 30s"), ("1h30m", "1h 30m"), ("2h", "2h"), ("0s", "0s")],
)
def test_durations_are_text_with_units_shown_as_monarch_shows_them(text: str, shown: str) -> None:
    configure(host_spawn_ready_timeout=text)
    assert get_global_config()["host_spawn_ready_timeout"] == shown


@pytest.mark.parametrize("value", [30, 30.5, "30", "invalid", "abc123"])
def test_a_duration_without_units_is_a_type_error_as_in_monarch(value: object) -> None:
    with pytest.raises(TypeError, match="message_delivery_timeout"):
        configure(message_delivery_timeout=value)
    if isinstance(value, str):
        with pytest.raises(TypeError, match="Invalid duration format"):
            configure(message_delivery_timeout=value)


@pytest.mark.parametrize(
    ("key", "value", "error"),
    [
        ("message_ack_every_n_messages", "100", TypeError),
        ("enable_dest_actor_reordering_buffer", "true", TypeError),
        ("message_latency_sampling_rate", "0.5", TypeError),
        ("default_encoding", "bincode", TypeError),
        ("default_encoding", 123, TypeError),
        ("rdma_max_nics_per_buffer", 0, ValueError),
        ("tokio_worker_threads", 0, ValueError),
        ("tail_log_lines", -1, ValueError),
        ("channel_tcp_congestion", 3, TypeError),
    ],
)
def test_wrong_values_name_the_key_and_the_kind(key: str, value: object, error: type) -> None:
    with pytest.raises(error, match=rf"configuration key `{key}`.*expected"):
        configure(**{key: value})
    assert key not in get_runtime_config()


def test_environment_variables_are_monarchs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYPERACTOR_MESH_ORPHAN_TIMEOUT", "5m")
    monkeypatch.setenv("HYPERACTOR_DEFAULT_ENCODING", "json")
    monkeypatch.setenv("MONARCH_TOKIO_WORKER_THREADS", "3")
    monkeypatch.setenv("HYPERACTOR_MESSAGE_LATENCY_SAMPLING_RATE", "0.25")
    config = get_global_config()
    assert config["mesh_orphan_timeout"] == "5m"
    assert config["default_encoding"] is Encoding.Json
    assert config["tokio_worker_threads"] == 3
    assert config["message_latency_sampling_rate"] == 0.25
    monkeypatch.setenv("HYPERACTOR_MESH_ORPHAN_TIMEOUT", "60")
    with pytest.raises(ValueError, match="HYPERACTOR_MESH_ORPHAN_TIMEOUT='60'"):
        get_global_config()


def test_float_kind() -> None:
    rate = Float(minimum=0.0, maximum=1.0)
    assert rate.check(1) == 1.0 and rate.parse(" 0.5 ") == 0.5
    with pytest.raises(TypeError):
        rate.check(True)
    with pytest.raises(ValueError, match=r"at most 1\.0"):
        rate.check(1.5)
    with pytest.raises(ValueError, match="finite"):
        rate.check(float("nan"))
    with pytest.raises(ValueError, match="not a number"):
        rate.parse("half")
