"""A job starts the mesh admin server and the dashboard when asked, as in Monarch."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from monarch.job import LocalJob, MeshAdminConfig, TelemetryConfig
from monarch_admin import disable_admin


@pytest.fixture(autouse=True)
def _no_server_left():
    yield
    disable_admin()


def test_enable_admin_starts_the_server_with_the_jobs_state(capsys) -> None:
    job = LocalJob(("hosts",)).enable_admin(admin_addr="127.0.0.1:0")
    assert capsys.readouterr().out == ""  # nothing starts before state()
    state = job.state(cached_path=None)
    printed = capsys.readouterr().out
    url = re.fullmatch(
        r"Mesh admin server listening on (http://127\.0\.0\.1:\d+)/#token=([0-9a-f]{64})\n",
        printed,
    )
    assert url, printed
    procs = state.hosts.spawn_procs(per_host={"gpus": 2}, name="observed")
    procs.initialized.get(timeout=60)
    request = urllib.request.Request(
        f"{url.group(1)}/v1/topology", headers={"Authorization": f"Bearer {url.group(2)}"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        found = json.loads(answer.read())
    ours = [p for h in found["hosts"] for p in h["procs"] if p.get("mesh") == "observed"]
    assert len(ours) == 2  # the session may run other tests' procs too
    procs.stop().get(timeout=60)


def test_enable_telemetry_with_the_dashboard_prints_its_address(capsys) -> None:
    job = LocalJob(("hosts",)).enable_telemetry(
        TelemetryConfig(include_dashboard=True, dashboard_port=0),
        mesh_admin_config=MeshAdminConfig(admin_addr="127.0.0.1:0"),
    )
    job.state(cached_path=None)
    printed = capsys.readouterr().out
    dashboard = r"^Monarch Dashboard: http://127\.0\.0\.1:\d+/#token=[0-9a-f]{64}$"
    assert re.search(dashboard, printed, re.M), printed
    with pytest.raises(TypeError):
        LocalJob().enable_telemetry(include_dashbord=True)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_with_the_dashboard_the_admin_listens_where_enable_admin_asked(
    capsys, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("MONARCH_STATE_DIR", str(tmp_path / "state"))  # this test's records
    port = free_port()
    job = (
        LocalJob(("hosts",))
        .enable_admin(admin_addr=f"127.0.0.1:{port}")
        .enable_telemetry(TelemetryConfig(include_dashboard=True, dashboard_port=0))
    )
    state = job.state(cached_path=None)
    lines = capsys.readouterr().out.splitlines()
    url = rf"http://127\.0\.0\.1:{port}/#token=[0-9a-f]{{64}}"
    assert len(lines) == 2, lines
    assert re.fullmatch(rf"Mesh admin server listening on ({url})", lines[0]), lines
    assert re.fullmatch(rf"Monarch Dashboard: ({url})", lines[1]), lines
    printed = lines[0].removeprefix("Mesh admin server listening on ")
    assert state.admin_url == state.dashboard_url == printed  # one server, one address

    # monarch-tui with no argument finds it (the newest record of this user's jobs)
    done = subprocess.run(
        [sys.executable, "-m", "monarch_admin.tui", "--diagnose"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MONARCH_ADMIN_TOKEN": "", "MONARCH_JOB_SECRET": ""},
    )
    # it found the server and was let in (its exit status says whether every process
    # of the controller is healthy: this pytest session's controller also holds the
    # processes other tests killed on purpose)
    assert done.returncode in (0, 1), done.stderr
    assert json.loads(done.stdout)["server"] == f"http://127.0.0.1:{port}", done.stderr
    assert "token" not in done.stderr and "cannot reach" not in done.stderr, done.stderr


def test_the_dashboard_alone_listens_on_its_port_and_says_so_twice(capsys) -> None:
    port = free_port()
    job = LocalJob(("hosts",)).enable_telemetry(
        TelemetryConfig(include_dashboard=True, dashboard_port=port)
    )
    state = job.state(cached_path=None)
    lines = capsys.readouterr().out.splitlines()
    assert [line.rpartition(" ")[2] for line in lines] == [state.dashboard_url] * 2, lines
    assert state.dashboard_url.startswith(f"http://127.0.0.1:{port}/#token=")


def test_state_dashboard_url_is_monarchs_way_to_find_the_dashboard(capsys) -> None:
    plain = LocalJob(("hosts",)).state(cached_path=None)
    assert plain.dashboard_url is None and plain.admin_url is None
    assert plain.telemetry_url is None and plain.query_engine_client is None
    assert plain.hosts is not None  # the meshes still by name
    job = LocalJob(("hosts",)).enable_telemetry(include_dashboard=True, dashboard_port=0)
    state = job.state(cached_path=None)
    printed = capsys.readouterr().out
    assert f"Monarch Dashboard: {state.dashboard_url}\n" in printed, printed
    token = state.dashboard_url.partition("#token=")[2]
    request = urllib.request.Request(
        state.dashboard_url.partition("#")[0] + "v1/topology",
        headers={"Authorization": f"Bearer {token}"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert json.loads(answer.read())["summary"]["hosts"] >= 1


DOCS = Path(__file__).resolve().parents[3]
WORKING = ("enable_admin", "enable_telemetry", "monarch-tui", "monarch.config", "dashboard")


def test_the_docs_do_not_call_what_works_unavailable() -> None:
    pages = [
        *DOCS.glob("docs/**/*.md"),
        DOCS / "README.md",
        *DOCS.glob("packages/*/README.md"),
    ]
    wrong = []
    for page in pages:
        for paragraph in re.split(r"\n\s*\n|\n(?=- |\| )", page.read_text()):
            says_unavailable = re.search(
                r"Unsupported|[Nn]ot available|not here|not offered|\bplanned\b", paragraph
            )
            if says_unavailable and any(name in paragraph for name in WORKING):
                wrong.append(f"{page.relative_to(DOCS)}: {paragraph.strip()[:200]}")
    assert not wrong, "\n\n".join(wrong)
