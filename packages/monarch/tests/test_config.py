"""``monarch.config``: Monarch's functions over one registry of every package's
settings, and what ``configure`` set reaching the processes spawned afterwards."""

from __future__ import annotations

import subprocess
import sys

import pytest

import monarch
import monarch.config
import monarch_config
from monarch.actor import Actor, endpoint, this_host


class Settings(Actor):
    @endpoint
    def value(self, key: str) -> object:
        return monarch_config.get_global_config()[key]

    @endpoint
    def where(self) -> str | None:
        from monarch_actor.extension import process_address

        return process_address()


@pytest.fixture(autouse=True)
def _runtime_layer_restored():
    with monarch_config.configured():
        yield


def test_monarchs_names_are_the_registrys_functions() -> None:
    for name in monarch.config.__all__:
        assert getattr(monarch.config, name) is getattr(monarch_config, name)
        if name.islower() and not name.startswith(
            "parametrize"
        ):  # Monarch's top level has the functions
            assert getattr(monarch, name) is getattr(monarch_config, name)
    with pytest.raises(ValueError, match="invalid configuration key: `nonexistent_key`"):
        monarch.configure(nonexistent_key=1)
    with pytest.raises(TypeError, match="invalid value `'many'` for configuration key"):
        monarch.configure(max_cast_fanout="many")


def test_channel_transport_is_reachable_where_monarchs_scripts_import_it() -> None:
    from monarch.config import ChannelTransport  # as Monarch's own tests do
    from monarch_transport import BindSpec

    with monarch.config.configured(default_transport=ChannelTransport.Unix) as config:
        assert config["default_transport"] == BindSpec(ChannelTransport.Unix)


def test_every_installed_packages_settings_are_known_before_it_is_imported() -> None:
    probe = (
        "import monarch_config\n"
        "config = monarch_config.get_global_config()\n"
        "keys = 'rdma_allow_tcp_fallback', 'tensor_wait', 'cleanup_timeout'\n"
        "print(*(config[k] for k in keys))\n"
        "monarch_config.configure(rdma_backend='tcp')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == ["True", "5m", "3s"]


def test_what_configure_set_reaches_processes_spawned_afterwards() -> None:
    monarch.configure(cleanup_timeout="7s", rdma_tcp_streams=3)
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        probe = procs.spawn("settings", Settings)
        assert set(probe.value.call("cleanup_timeout").get(timeout=60).values()) == {"7s"}
        assert set(probe.value.call("rdma_tcp_streams").get(timeout=60).values()) == {3}
    finally:
        procs.stop().get(timeout=60)


def test_a_bad_environment_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONARCH_HEARTBEAT_DEADLINE", "soon")
    with pytest.raises(ValueError, match="MONARCH_HEARTBEAT_DEADLINE='soon' is not a valid value"):
        monarch.config.get_global_config()


# -- parametrize_config / parametrize_config_pointwise / Encoding (as in Monarch) ------


_seen: list[tuple[str, str]] = []


@monarch.config.parametrize_config(cleanup_timeout={"7s", "9s"}, attach_timeout={"1m"})
def test_parametrize_config_runs_each_combination_under_configured() -> None:
    config = monarch.config.get_global_config()
    _seen.append((config["cleanup_timeout"], config["attach_timeout"]))


@monarch.config.parametrize_config_pointwise(cleanup_timeout=["3s", "4s"])
def test_parametrize_config_pointwise_runs_each_position() -> None:
    _seen.append((monarch.config.get_global_config()["cleanup_timeout"], "pointwise"))


def test_the_parametrized_runs_saw_their_settings() -> None:
    assert sorted(_seen) == sorted(
        [("7s", "1m"), ("9s", "1m"), ("3s", "pointwise"), ("4s", "pointwise")]
    )
    assert monarch.config.get_global_config()["cleanup_timeout"] == "3s"  # restored after each run


def test_parametrize_config_checks_its_options() -> None:
    with pytest.raises(ValueError, match="at least one"):
        monarch.config.parametrize_config()
    with pytest.raises(ValueError, match="same number"):
        monarch.config.parametrize_config_pointwise(cleanup_timeout=["1s"], attach_timeout=[])
    assert [e.name for e in monarch.config.Encoding] == ["Bincode", "Json", "Multipart"]


# -- Monarch's settings that drive this runtime ----------------------------------------


class Talker(Actor):
    @endpoint
    def say(self, text: str) -> None:
        print(text, flush=True)


def test_default_transport_is_a_bindspec_and_chooses_where_procs_listen() -> None:
    from monarch_transport import BindSpec, ChannelTransport, default_listen_address

    assert monarch.config.get_global_config()["default_transport"] == BindSpec(
        ChannelTransport.Unix
    )
    with monarch.config.configured(default_transport="tcp") as config:
        assert config["default_transport"] == BindSpec(ChannelTransport.TcpWithHostname)
    with pytest.raises(TypeError, match="default_transport"):
        monarch.configure(default_transport=42)
    with pytest.raises(ValueError, match="invalid bind spec"):
        monarch.configure(default_transport="random_string")
    monarch.configure(default_transport=ChannelTransport.TcpWithLocalhost)
    assert default_listen_address().scheme == "tcp"
    procs = this_host().spawn_procs()
    try:
        probe = procs.spawn("settings", Settings)
        assert probe.value.call_one("default_transport").get(timeout=60) == BindSpec(
            ChannelTransport.TcpWithLocalhost
        )
        assert probe.where.call_one().get(timeout=60).startswith("tcp://127.0.0.1:")
    finally:
        procs.stop().get(timeout=60)


def test_enable_log_forwarding_sends_procs_output_to_the_controller(
    capfd: pytest.CaptureFixture[str],
) -> None:
    monarch.configure(enable_log_forwarding=True)
    procs = this_host().spawn_procs()
    try:
        procs.spawn("talker", Talker).say.call_one("forwarded-line-1").get(timeout=60)
    finally:
        procs.stop().get(timeout=60)  # a proc hands on its last lines before it stops
    out = capfd.readouterr().out
    assert any(
        line.endswith("[0] forwarded-line-1") and line.startswith("[") for line in out.splitlines()
    ), out


def test_prefix_with_rank_off_forwards_lines_as_written(capfd: pytest.CaptureFixture[str]) -> None:
    monarch.configure(enable_log_forwarding=True, prefix_with_rank=False)
    procs = this_host().spawn_procs()
    try:
        procs.spawn("talker", Talker).say.call_one("forwarded-line-2").get(timeout=60)
    finally:
        procs.stop().get(timeout=60)
    lines = capfd.readouterr().out.splitlines()
    assert "forwarded-line-2" in lines
    assert not any(line.endswith("] forwarded-line-2") for line in lines)
