"""The mesh admin server over a real job: topology, counters and events,
probes, stacks, failures and history; and who may ask: the token on loopback
too, only in the ``Authorization`` header, never to another local user, a
rebound DNS name or another site's page, and no dial to an address a client
names."""

from __future__ import annotations

import json
import os
import signal
import socket
import urllib.error
import urllib.request
from typing import Any

import pytest

from monarch_actor import Actor, current_rank, endpoint, this_host
from monarch_actor.extension import read_records
from monarch_actor.testing import blocks_ctrl_c, threads_named
from monarch_admin import admin_token, diagnostics, disable_admin, enable_admin, topology
from monarch_transport.testing import other_user_unavailable, run_as_other_user


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


def get(
    url: str,
    token: str | None = None,
    *,
    method: str = "GET",
    headers: dict[str, str] | None = None,
) -> Any:
    """One request with the job's token (``token=""``: none), decoded."""
    request = urllib.request.Request(
        url, method=method, data=b"" if method == "POST" else None, headers=headers or {}
    )
    token = admin_token() if token is None else token
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def refused(url: str, **options: Any) -> tuple[int, str]:
    """The status and error of a request the server must refuse."""
    with pytest.raises(urllib.error.HTTPError) as error:
        get(url, **options)
    return error.value.code, json.loads(error.value.read())["error"]


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
    found = get(f"{server.url}/v1/diagnostics", method="POST")
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
    url = f"{server.url}/v1/stacks?address={urllib.request.quote(address)}"
    stacks = get(url, method="POST")
    assert stacks["source"] in ("py-spy", "python")
    assert "Thread" in stacks["text"] or "thread" in stacks["text"].lower()
    assert refused(f"{server.url}/v1/stacks", method="POST")[0] == 400
    # running py-spy is an action: a GET (an <img>, a link) does not start it
    assert refused(url)[0] == 405
    body = json.dumps({"address": address}).encode()
    request = urllib.request.Request(f"{server.url}/v1/stacks", data=body, method="POST")
    request.add_header("Authorization", f"Bearer {server.token}")
    with urllib.request.urlopen(request, timeout=60) as answer:
        assert json.loads(answer.read())["source"] in ("py-spy", "python")


def test_an_endpoint_that_raises_is_listed_with_its_exception(job, server) -> None:
    _, workers = job
    with pytest.raises(Exception, match="worker exploded on purpose"):
        workers.explode.call().get(timeout=30)  # the caller hears of it; the actors live on
    listed = [f for f in get(f"{server.url}/v1/failures")["failures"] if MESH in str(f.get("proc"))]
    assert {f["kind"] for f in listed} == {"error"} and len(listed) == 2, listed
    for failure in listed:
        assert failure["handler"] == "explode" and failure["handler_errors"] == 1
        assert "RuntimeError: worker exploded on purpose" in failure["reason"], failure
        assert "Traceback" in failure["reason"], failure  # where it raised, too
    found = get(f"{server.url}/v1/topology?events=1")
    for actor in actors_of(found, "workers"):
        assert actor["status"] == "idle" and actor["failures"] == 1
        assert "worker exploded on purpose" in actor["last_error"]["error"]
        assert actor["events"][-1]["detail"] == "explode: RuntimeError: worker exploded on purpose"


def test_a_dead_process_keeps_its_name_pid_and_actors(job, server, failures) -> None:
    victim = mine(topology())[1]
    os.kill(victim["pid"], signal.SIGKILL)
    for _ in range(600):  # bounded: until the runtime has heard of the death
        dead = [p for p in mine(topology()) if p["address"] == victim["address"]]
        if dead and dead[0]["status"] != "running":
            break
    else:
        pytest.fail("the killed process never showed as dead")
    shown = dead[0]
    assert shown["status"] == "exited", shown
    assert shown["name"] == victim["name"] and shown["pid"] == victim["pid"], shown
    assert [a["name"] for a in shown["actors"]] == ["workers"], shown
    assert shown["actors"][0]["status"] == "failed"
    assert "exited without being asked to stop" in shown["actors"][0]["reason"]
    reasons = {
        f["kind"]: f
        for f in get(f"{server.url}/v1/failures")["failures"]
        if f.get("address") == victim["address"]
    }
    assert set(reasons) == {"proc", "actor"} and reasons["proc"]["what"] == victim["name"]
    # its stacks: refused at once, not a 30 s wait for a 200 with an error in it
    quoted = urllib.request.quote(victim["address"])
    status, error = refused(f"{server.url}/v1/stacks?address={quoted}", method="POST")
    assert status == 409 and "exited" in error and victim["name"] in error, (status, error)


def test_a_client_that_went_away_leaves_no_traceback_on_the_terminal(server, capsys) -> None:
    for gone in (BrokenPipeError(32, "Broken pipe"), ConnectionResetError(104, "reset")):
        try:
            raise gone
        except ConnectionError:
            server._httpd.handle_error(None, ("127.0.0.1", 1))
    assert capsys.readouterr().err == ""


class Listener:
    """A TCP listener an attacker opened: whether anyone dialed it.

    Nothing accepts while the test runs: the kernel completes a dialer's
    handshake and queues the connection, so a dial that happened before the
    server's answer is waiting in the backlog when ``close`` looks.
    """

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0), backlog=16)
        self.port = self.socket.getsockname()[1]

    def close(self) -> bool:
        """Stop listening; whether a connection came."""
        self.socket.setblocking(False)
        try:
            connection, _ = self.socket.accept()
        except BlockingIOError:
            return False
        else:
            connection.close()
            return True
        finally:
            self.socket.close()


def test_stacks_never_dial_an_address_outside_the_topology(job, server) -> None:
    relay = Listener()
    try:
        for scheme in ("tcp", "metatls"):
            address = f"{scheme}://127.0.0.1:{relay.port}"
            url = f"{server.url}/v1/stacks?address={urllib.request.quote(address)}"
            status, error = refused(url, method="POST")
            assert status == 403 and "not a process of this job" in error, error
    finally:
        # stacks() waits for the process it asks: a dial would precede the answer
        assert not relay.close(), "the admin server dialed an address a client named"


def test_the_token_is_needed_on_loopback_and_only_in_the_header(job, server) -> None:
    url = f"{server.url}/v1/topology"
    status, error = refused(url, token="")
    assert status == 401 and "Authorization: Bearer" in error and "#token=" in error, error
    assert refused(url, token="0" * 64)[0] == 401
    assert refused(url, token="", headers={"Authorization": f"Basic {server.token}"})[0] == 401
    status, error = refused(f"{url}?token={server.token}", token="")
    assert status == 401 and "not accepted in the URL" in error, error
    for path in ("/v1", "/v1/history", "/v1/failures", "/v1/nothing"):
        assert refused(f"{server.url}{path}", token="")[0] == 401, path
    for path in ("/v1/diagnostics", f"/v1/stacks?address={urllib.request.quote(url)}"):
        assert refused(f"{server.url}{path}", token="", method="POST")[0] == 401, path
    assert len(mine(get(url))) == 2
    # the page shell is served without the token: it holds no data
    with urllib.request.urlopen(f"{server.url}/", timeout=30) as page:
        shell = page.read().decode()
        assert "Monarch Dashboard" in shell and server.token not in shell
        assert page.headers["X-Frame-Options"] == "DENY"


def test_a_rebound_name_and_another_sites_page_are_refused_even_with_the_token(job, server) -> None:
    url = f"{server.url}/v1/topology"
    own = f"127.0.0.1:{server.port}"
    for headers in (
        {"Host": f"evil.example:{server.port}"},  # DNS rebinding: evil.example -> 127.0.0.1
        {"Host": "evil.example"},
        {"Host": "127.0.0.1:1"},  # another port: misdirected
        {"Host": f"10.1.2.3:{server.port}"},  # not loopback, where the server listens
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Origin": f"http://localhost:{server.port}"},  # not the origin that sent Host
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
    ):
        status, error = refused(url, headers=headers)
        assert status == 403, (headers, status, error)
    for path in ("/v1/diagnostics", "/v1/stacks?address=x"):
        forged = {"Host": f"evil.example:{server.port}"}
        assert refused(f"{server.url}{path}", method="POST", headers=forged)[0] == 403
        cross = {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}
        assert refused(f"{server.url}{path}", method="POST", headers=cross)[0] == 403
    # what the dashboard's own requests carry, and other names of loopback
    assert mine(get(url, headers={"Origin": f"http://{own}", "Sec-Fetch-Site": "same-origin"}))
    for host in (
        own,
        f"localhost:{server.port}",
        f"[::1]:{server.port}",
        f"127.0.0.2:{server.port}",
    ):
        assert mine(get(url, headers={"Host": host})), host
    assert mine(get(url, headers={"Sec-Fetch-Site": "none"}))


INTRUDER = """
import json, sys, urllib.error, urllib.request

base, relay = sys.argv[1], sys.argv[2]
answers = {}
for method, path in [
    ("GET", "/v1/topology?events=1"),
    ("GET", "/v1/failures"),
    ("GET", "/v1/history"),
    ("POST", "/v1/diagnostics"),
    ("GET", "/v1/stacks?address=" + relay),
    ("POST", "/v1/stacks?address=" + relay),
    ("GET", "/v1/topology?token=guess"),
]:
    body = b"" if method == "POST" else None
    request = urllib.request.Request(base + path, method=method, data=body)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            answers[method + " " + path] = [answer.status, answer.read().decode()[:200]]
    except urllib.error.HTTPError as error:
        answers[method + " " + path] = [error.code, error.read().decode()[:200]]
print(json.dumps(answers))
"""


def test_another_local_user_reads_nothing_and_dials_nothing(job, server, failures) -> None:
    why = other_user_unavailable()
    if why is not None:
        pytest.skip(why)
    _, workers = job
    workers.explode.broadcast()  # a failure with its traceback, for /v1/failures to hold
    relay = Listener()
    try:
        address = urllib.request.quote(f"tcp://127.0.0.1:{relay.port}")
        done = run_as_other_user(INTRUDER, server.url, address)
        assert done.returncode == 0, done.stderr
        answers = json.loads(done.stdout)
        assert {code for code, _ in answers.values()} == {401}, answers
        shown = done.stdout
        assert "worker exploded" not in shown and MESH not in shown and server.token not in shown
    finally:
        assert not relay.close(), "the admin server dialed for another user"


def test_the_server_leaves_a_record_for_this_users_tools(capsys) -> None:
    admin = enable_admin("127.0.0.1:0")
    try:
        printed = capsys.readouterr().out
        assert printed == f"Mesh admin server listening on {admin.url}/#token={admin.token}\n"
        assert admin.dashboard_url == f"{admin.url}/#token={admin.token}"
        ours = [r for r in read_records("admin") if r["pid"] == os.getpid()]
        assert ours == [{"url": admin.url, "token": admin.token, "pid": os.getpid()}]
    finally:
        disable_admin()
    assert not [r for r in read_records("admin") if r["pid"] == os.getpid()]


def test_off_loopback_the_job_token_is_required(job) -> None:
    admin = enable_admin("0.0.0.0:0", quiet=True)
    try:
        url = f"http://127.0.0.1:{admin.port}/v1/diagnostics"
        assert refused(url, token="", method="POST")[0] == 401
        assert refused(url, token="0" * 64, method="POST")[0] == 401
        assert len(my_probes(get(url, token=admin_token(), method="POST"))) == 2
        assert refused(f"{url}?token={admin_token()}", token="", method="POST")[0] == 401
        # this machine's own name is this server; a rebound one is not
        named = {"Host": f"{socket.gethostname()}:{admin.port}"}
        assert len(my_probes(get(url, method="POST", headers=named))) == 2
        forged = {"Host": f"evil.example:{admin.port}"}
        assert refused(url, method="POST", headers=forged)[0] == 403
    finally:
        disable_admin()


def test_enable_admin_prints_the_address_and_is_one_per_process(capsys) -> None:
    admin = enable_admin("127.0.0.1:0")
    try:
        assert enable_admin() is admin
        assert capsys.readouterr().out == f"Mesh admin server listening on {admin.dashboard_url}\n"
        assert [n["ok"] for n in diagnostics()["nodes"] if n["mesh"] is None] == [True]
        with pytest.raises(urllib.error.HTTPError) as unknown:
            get(f"{admin.url}/v1/nothing")
        assert unknown.value.code == 404
    finally:
        disable_admin()
    with pytest.raises(ValueError, match="HOST:PORT"):
        enable_admin("localhost")


def test_the_servers_threads_leave_ctrl_c_to_the_script(server) -> None:
    threads = threads_named("monarch-admin") + threads_named("monarch-admin-sampler")
    assert len(threads) == 2 and all(blocks_ctrl_c(thread) for thread in threads)
