"""The mesh admin server over a real job: topology, counters and events,
probes, stacks, failures and history, and credentials off loopback."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

import pytest

from monarch_actor import Actor, current_rank, endpoint, this_host
from monarch_admin import admin_token, diagnostics, disable_admin, enable_admin, topology


class Worker(Actor):
    @endpoint
    def double(self, x: int) -> int:
        return 2 * x

    @endpoint
    def hold(self, fifo: str) -> None:
        """Busy until the test writes a line to this rank's FIFO."""
        with open(f"{fifo}-{current_rank().rank}") as gate:
            gate.readline()

    @endpoint
    def explode(self) -> None:
        raise RuntimeError("worker exploded on purpose")


def get(url: str, token: str | None = None) -> Any:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


MESH = "admin-server-test"  # this test's procs: the session's controller has others too


@pytest.fixture
def job():
    procs = this_host().spawn_procs(per_host={"gpus": 2}, name=MESH)
    workers = procs.spawn("workers", Worker)
    workers.initialized.get(timeout=60)
    yield procs, workers
    procs.stop().get(timeout=60)


@pytest.fixture
def server():
    admin = enable_admin("127.0.0.1:0", quiet=True)
    yield admin
    disable_admin()


def mine(found: dict[str, Any]) -> list[dict[str, Any]]:
    """This test's processes in a topology."""
    return [proc for host in found["hosts"] for proc in host["procs"] if proc.get("mesh") == MESH]


def actors_of(found: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [actor for proc in mine(found) for actor in proc["actors"] if actor["name"] == name]


def my_probes(found: dict[str, Any]) -> list[dict[str, Any]]:
    """This test's processes in the diagnostics."""
    return [node for node in found["nodes"] if node["mesh"] == MESH]


def test_topology_shows_every_proc_and_actor_with_its_counters(job, server) -> None:
    _, workers = job
    for i in range(3):
        workers.double.call(i).get(timeout=30)
    found = get(f"{server.url}/v1/topology?events=1")
    assert len(mine(found)) == 2 and found["summary"]["procs"] >= 2
    workers_seen = actors_of(found, "workers")
    ranks = sorted((a["rank"], a["messages"], a["last_handler"]) for a in workers_seen)
    assert ranks == [(0, 3, "double"), (1, 3, "double")]
    events = actors_of(found, "workers")[0]["events"]
    assert [e["event"] for e in events] == ["started", "handled", "handled", "handled"]
    assert {p["status"] for p in mine(found)} == {"running"}
    assert all(p["pid"] for p in mine(found))


def test_a_busy_actor_shows_its_handler_and_mailbox(job, server, tmp_path) -> None:
    _, workers = job
    fifo = str(tmp_path / "gate")
    for rank in (0, 1):
        os.mkfifo(f"{fifo}-{rank}")
    held = workers.hold.call(fifo)
    queued = workers.double.call(1)  # waits behind hold
    for _ in range(200):  # bounded: until both ranks are inside hold with one queued
        busy = [a for a in actors_of(topology(), "workers") if a["current"] == "hold"]
        if len(busy) == 2 and all(a["mailbox"] >= 1 for a in busy):
            break
    else:
        pytest.fail(f"the actors never showed hold running: {actors_of(topology(), 'workers')}")
    assert {a["status"] for a in busy} == {"busy"}
    for rank in (0, 1):
        with open(f"{fifo}-{rank}", "w") as gate:
            gate.write("go\n")
    held.get(timeout=30)
    assert set(queued.get(timeout=30).values()) == {2}


def test_diagnostics_probe_every_process(job, server) -> None:
    found = get(f"{server.url}/v1/diagnostics")
    probes = my_probes(found)
    assert len(probes) == 2 and all(node["ok"] for node in probes)
    assert all(node["latency_ms"] >= 0 for node in probes)
    controller = [node for node in found["nodes"] if node["mesh"] is None]
    assert len(controller) == 1 and controller[0]["ok"]


def test_a_failed_actor_is_shown_and_remembered(job, server, failures) -> None:
    _, workers = job
    workers.explode.broadcast()  # an endpoint raising in a broadcast fails the actor
    for _ in range(300):  # bounded: until the failure has been seen
        listed = [
            f
            for f in get(f"{server.url}/v1/failures")["failures"]
            if f["kind"] == "actor" and MESH in f["proc"]
        ]
        if len(listed) == 2:
            break
        server.sample()
    assert {f["kind"] for f in listed} == {"actor"}
    assert all("worker exploded on purpose" in f["reason"] for f in listed)
    assert {a["status"] for a in actors_of(topology(), "workers")} == {"failed"}
    assert get(f"{server.url}/v1/history")["samples"]


def test_stacks_of_a_proc(job, server) -> None:
    found = topology()
    address = mine(found)[0]["address"]
    stacks = get(f"{server.url}/v1/stacks?address={urllib.request.quote(address)}")
    assert stacks["source"] in ("py-spy", "python")
    assert "Thread" in stacks["text"] or "thread" in stacks["text"].lower()
    with pytest.raises(urllib.error.HTTPError) as missing:
        get(f"{server.url}/v1/stacks")
    assert missing.value.code == 400


def test_off_loopback_the_job_token_is_required(job) -> None:
    admin = enable_admin("0.0.0.0:0", quiet=True)
    try:
        url = f"http://127.0.0.1:{admin.port}/v1/diagnostics"
        with pytest.raises(urllib.error.HTTPError) as refused:
            get(url)
        assert refused.value.code == 401
        with pytest.raises(urllib.error.HTTPError):
            get(url, token="0" * 64)
        assert len(my_probes(get(url, token=admin_token()))) == 2
        assert len(my_probes(get(f"{url}?token={admin_token()}"))) == 2
    finally:
        disable_admin()


def test_enable_admin_prints_the_address_and_is_one_per_process(capsys) -> None:
    admin = enable_admin("127.0.0.1:0")
    try:
        assert enable_admin() is admin
        assert capsys.readouterr().out == f"Mesh admin server listening on {admin.url}\n"
        assert [n["ok"] for n in diagnostics()["nodes"] if n["mesh"] is None] == [True]
        with pytest.raises(urllib.error.HTTPError) as unknown:
            get(f"{admin.url}/v1/nothing")
        assert unknown.value.code == 404
    finally:
        disable_admin()
    with pytest.raises(ValueError, match="HOST:PORT"):
        enable_admin("localhost")
