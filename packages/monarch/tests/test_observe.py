"""A job starts the mesh admin server and the dashboard when asked, as in Monarch."""

from __future__ import annotations

import json
import re
import urllib.request

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
