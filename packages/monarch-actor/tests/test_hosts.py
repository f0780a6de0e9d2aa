"""Hosts behind workers, with real processes over TCP on this machine: a
worker per host (``run_worker_loop_forever``), the test process attaching to
them as the controller. (Hosts in network namespaces of their own are the
integration tests' business.)"""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from actors import Victim

from monarch_actor import SupervisionError, attach_to_workers, returns_future
from monarch_actor.testing import gone
from monarch_transport import job_secret

WORKER = "from monarch_actor import run_worker_loop_forever as run; import sys; "
WORKER += "run(address=sys.argv[1], ca='trust_all_connections')"
LOST = 10.0  # seconds: a vanished host's procs fail their callers within this


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


class Workers:
    def __init__(self, n: int, env: dict[str, str] | None = None) -> None:
        job_secret()  # made and exported now: the workers share it
        self.addresses = [f"tcp://127.0.0.1:{free_port()}" for _ in range(n)]
        environment = {**os.environ, **(env or {})}
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-c", WORKER, a], start_new_session=True, env=environment
            )
            for a in self.addresses
        ]

    def kill(self, i: int) -> None:
        """The whole host vanishes: its worker and every process it started."""
        os.killpg(self.procs[i].pid, signal.SIGKILL)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@pytest.fixture
def workers():
    w = Workers(2)
    yield w
    w.close()


def test_procs_span_hosts_with_a_torch_distributed_environment(workers):
    hosts = attach_to_workers(workers=workers.addresses, ca="trust_all_connections")
    assert dict(zip(hosts.extent.labels, hosts.extent.sizes, strict=True)) == {"hosts": 2}
    assert hosts.initialized.get(timeout=60) is True
    procs = hosts.spawn_procs(per_host={"gpus": 2})
    extent = dict(zip(procs.extent.labels, procs.extent.sizes, strict=True))
    assert extent == {"hosts": 2, "gpus": 2}
    victims = procs.spawn("v", Victim)
    pids = victims.pid.call().get(timeout=60)
    envs = victims.env.call(
        ["RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"]
    ).get(timeout=30)
    for point, env in envs.items():
        rank = point["hosts"] * 2 + point["gpus"]
        assert env[:4] == [str(rank), str(point["gpus"]), str(point["hosts"]), "4"]
    assert len({tuple(env[4:]) for _, env in envs.items()}) == 1  # one rendezvous
    # each host's procs were forked by that host's worker
    for point, pid in pids.items():
        zygote = parent_of(pid)
        assert parent_of(zygote) == workers.procs[point["hosts"]].pid
    # a slice of the hosts spawns only there
    second = hosts.slice(hosts=1).spawn_procs(per_host={"gpus": 1})
    (pid,) = [p for _, p in second.spawn("w", Victim).pid.call().get(timeout=60).items()]
    assert parent_of(parent_of(pid)) == workers.procs[1].pid
    hosts.shutdown().get(timeout=60)
    assert [p.wait(30) for p in workers.procs] == [0, 0]  # the workers exit when shut down


def test_a_host_that_vanishes_fails_its_callers_naming_it_and_the_rest_work(workers, failures):
    hosts = attach_to_workers(workers=workers.addresses, ca="trust_all_connections")
    procs = hosts.spawn_procs(per_host={"gpus": 1})
    victims = procs.spawn("v", Victim)
    victims.pid.call().get(timeout=60)
    busy = victims.slice(hosts=1).block.call_one(60.0)
    started = time.monotonic()
    workers.kill(1)
    with pytest.raises(SupervisionError, match=r"127\.0\.0\.1:\d+|host"):
        busy.get(timeout=LOST)
    assert time.monotonic() - started < LOST
    assert victims.slice(hosts=0).pid.call_one().get(timeout=10) > 0
    assert failures.wait(LOST)
    assert len(failures) == 1 and failures[0].crashed_ranks == [1]
    assert "host" in failures[0].report()
    with pytest.raises(SupervisionError):
        victims.slice(hosts=1).pid.call_one().get(timeout=5)
    procs.slice(hosts=0).stop().get(timeout=30)


def test_a_silent_host_is_declared_lost_after_its_deadline(workers, failures):
    """Every process of the host stopped (SIGSTOP): no connection breaks, the
    worker's heartbeats just stop; its procs' callers hear within the deadline."""
    hosts = attach_to_workers(workers=workers.addresses, ca="trust_all_connections")
    procs = hosts.spawn_procs(per_host={"gpus": 1})
    victims = procs.spawn("v", Victim)
    victims.pid.call().get(timeout=60)
    busy = victims.slice(hosts=1).block.call_one(60.0)
    started = time.monotonic()
    os.killpg(workers.procs[1].pid, signal.SIGSTOP)
    try:
        with pytest.raises(SupervisionError, match="silent for"):
            busy.get(timeout=LOST)
        assert time.monotonic() - started < LOST
        assert victims.slice(hosts=0).pid.call_one().get(timeout=10) > 0
        assert failures.wait(LOST)
        assert len(failures) == 1 and failures[0].crashed_ranks == [1]
        assert "127.0.0.1" in failures[0].report()
    finally:
        os.killpg(workers.procs[1].pid, signal.SIGCONT)
    procs.slice(hosts=0).stop().get(timeout=30)


def test_stopping_procs_on_a_host_declared_lost_returns_without_their_answer(workers):
    """A stop that a silent host will never answer (at exit, say) ends once
    the host is declared lost: its procs count as exited."""
    hosts = attach_to_workers(workers=workers.addresses, ca="trust_all_connections")
    procs = hosts.spawn_procs(per_host={"gpus": 1})
    procs.spawn("v", Victim).pid.call().get(timeout=60)
    os.killpg(workers.procs[1].pid, signal.SIGSTOP)
    try:
        procs.stop().get(timeout=30)  # asked before the host's deadline, rank 1 too
    finally:
        os.killpg(workers.procs[1].pid, signal.SIGCONT)


def children_of(pid: int) -> list[int]:
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if parent_of(int(entry)) == pid:
                    children.append(int(entry))
            except OSError:  # gone meanwhile
                pass
    return children


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except OSError:  # gone meanwhile
        return ""


def socket_inodes(pid: int) -> set[str]:
    found = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:"):
                found.add(target)
    return found


def fork_server_of(worker: int) -> int:
    """The worker's fork server: its only child, once it answers a controller
    (it starts the server before it serves)."""
    servers = children_of(worker)
    assert len(servers) == 1, f"the worker's children: {servers}"
    return servers[0]


def test_a_worker_forks_its_fork_server_before_it_serves():
    """A proc on another host is forked by a server already running when the
    worker answers a controller; the server is the worker itself, forked
    before its runtime started (no second interpreter importing the
    runtime), and neither it nor a proc holds any of the worker's sockets."""
    workers = Workers(1)
    try:
        worker = workers.procs[0].pid
        hosts = attach_to_workers(workers=workers.addresses, ca="trust_all_connections")
        assert hosts.initialized.get(timeout=60) is True
        server = fork_server_of(worker)
        assert cmdline(server) == cmdline(worker)  # forked: no interpreter of its own
        victims = hosts.spawn_procs(per_host={"gpus": 2}).spawn("v", Victim)
        pids = victims.pid.call().get(timeout=60)
        assert [parent_of(pid) for _, pid in pids.items()] == [server, server]
        workers_sockets = socket_inodes(worker)
        assert workers_sockets  # it listens, and talks to this controller
        for pid in [server, *(pid for _, pid in pids.items())]:
            assert not socket_inodes(pid) & workers_sockets, f"{pid} holds a socket of the worker"
        folders = victims.env.call(["MONARCH_JOB_DIR"]).get(timeout=30)
        [folder] = {value for _, (value,) in folders.items()}
        assert os.path.isdir(folder)
        hosts.shutdown().get(timeout=60)
        assert workers.procs[0].wait(30) == 0
        assert not os.path.exists(folder)  # the worker's job folder goes with it
        assert gone([server]) == []
    finally:
        workers.close()


def maps_library(pid: int, package: str) -> bool:
    """Whether process ``pid`` has the native library of ``package`` loaded."""
    with open(f"/proc/{pid}/maps") as maps:
        return any(f"/{package}/" in line for line in maps)


def test_a_fork_server_loads_what_its_procs_will_load_before_it_forks(tmp_path):
    """What every proc would otherwise load as it starts, its fork server
    loads first, so that each proc inherits it (a few milliseconds of CPU a
    proc): the event loop's implementation (uvloop), and, on a worker on TCP,
    where every message is sealed, what sealing takes (cryptography). A
    worker on a Unix socket in a private folder seals nothing, and its fork
    server stays without cryptography. The servers never connect anywhere:
    what they hold, they loaded ahead."""
    tcp = Workers(1)
    folder = tmp_path / "private"
    folder.mkdir(mode=0o700)
    ipc = subprocess.Popen(
        [sys.executable, "-c", WORKER, f"ipc://{folder}/worker.sock"], start_new_session=True
    )
    try:
        hosts = attach_to_workers(
            workers=[*tcp.addresses, f"ipc://{folder}/worker.sock"], ca="trust_all_connections"
        )
        assert hosts.initialized.get(timeout=60) is True
        on_tcp, on_ipc = fork_server_of(tcp.procs[0].pid), fork_server_of(ipc.pid)
        assert maps_library(on_tcp, "cryptography")
        assert not maps_library(on_ipc, "cryptography")
        assert maps_library(on_tcp, "uvloop") and maps_library(on_ipc, "uvloop")
        hosts.shutdown().get(timeout=60)
    finally:
        tcp.close()
        if ipc.poll() is None:
            os.killpg(ipc.pid, signal.SIGKILL)
        ipc.wait(10)


THREADED_WORKER = "import threading, time; threading.Thread(target=time.sleep, args=(600,), "
THREADED_WORKER += "daemon=True).start(); " + WORKER


def test_a_worker_with_threads_starts_its_fork_server_as_a_fresh_interpreter():
    """Forking a process whose other threads may hold locks is not safe: a
    worker started after its script started a thread runs the bootstrap
    command for its fork server instead, and serves as well."""
    job_secret()
    address = f"tcp://127.0.0.1:{free_port()}"
    worker = subprocess.Popen(
        [sys.executable, "-c", THREADED_WORKER, address], start_new_session=True
    )
    try:
        hosts = attach_to_workers(workers=[address], ca="trust_all_connections")
        assert hosts.initialized.get(timeout=60) is True
        server = fork_server_of(worker.pid)
        assert "_procs.zygote" in cmdline(server)
        pids = hosts.spawn_procs(per_host={"gpus": 1}).spawn("v", Victim).pid.call().get(60)
        assert [parent_of(pid) for _, pid in pids.items()] == [server]
        hosts.shutdown().get(timeout=60)
        assert worker.wait(30) == 0
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)


def test_a_running_fork_server_imports_what_the_controller_preloads(monkeypatch):
    """A worker's ``auto`` preload takes each attaching script's list too: its
    fork server, already running, imports those modules before it forks."""
    from actors import Modules

    workers = Workers(1, env={"MONARCH_PRELOAD": "auto"})
    try:
        monkeypatch.setenv("MONARCH_PRELOAD", "colorsys")  # this script's list
        hosts = attach_to_workers(workers=workers.addresses, ca="trust_all_connections")
        procs = hosts.spawn_procs(per_host={"gpus": 1})
        loaded = procs.spawn("m", Modules).loaded.call_one(["colorsys"]).get(timeout=120)
        assert loaded == [True]
        hosts.shutdown().get(timeout=60)
    finally:
        workers.close()


def test_attach_waits_for_a_worker_that_comes_up_later():
    job_secret()
    address = f"tcp://127.0.0.1:{free_port()}"
    hosts = attach_to_workers(workers=[address], ca="trust_all_connections")
    worker = subprocess.Popen([sys.executable, "-c", WORKER, address], start_new_session=True)
    try:
        assert hosts.initialized.get(timeout=60) is True
        hosts.shutdown().get(timeout=60)
        assert worker.wait(30) == 0
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)


def test_a_killed_controller_leaves_no_procs_and_the_worker_serves_the_next(tmp_path):
    workers = Workers(1)
    script = tmp_path / "controller.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, sys, time
            sys.path.insert(0, {os.path.dirname(__file__)!r})
            from actors import Victim
            from monarch_actor import attach_to_workers
            hosts = attach_to_workers(workers=[{workers.addresses[0]!r}])
            pids = hosts.spawn_procs(per_host={{"gpus": 2}}).spawn("v", Victim).pid.call().get(60)
            print(" ".join(str(p) for _, p in pids.items()), flush=True)
            time.sleep(600)
            """
        )
    )
    try:
        controller = subprocess.Popen(
            [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=dict(os.environ)
        )
        pids = [int(p) for p in controller.stdout.readline().split()]
        assert len(pids) == 2
        controller.kill()
        controller.wait(10)
        assert gone(pids) == []
        # the worker outlives its controller and serves the next one
        hosts = attach_to_workers(workers=workers.addresses, ca="trust_all_connections")
        victim = hosts.spawn_procs(per_host={"gpus": 1}).spawn("v", Victim)
        assert victim.pid.call_one().get(timeout=60) > 0
        hosts.shutdown().get(timeout=60)
    finally:
        workers.close()


def test_bad_worker_addresses_say_what_is_wrong():
    job_secret()
    with pytest.raises(TypeError, match="non-empty list"):
        attach_to_workers(workers="tcp://127.0.0.1:1", ca="trust_all_connections")
    with pytest.raises(ValueError, match="wildcard"):
        attach_to_workers(workers=["tcp://*:4444"], ca="trust_all_connections")
    with pytest.raises(Exception, match="address"):
        attach_to_workers(workers=["nonsense"], ca="trust_all_connections")
    with pytest.raises(ValueError, match="private_key="):
        attach_to_workers(workers=["tcp://127.0.0.1:1"], ca=b"PEM")
    with pytest.raises(ValueError, match="PEM bytes or the path"):
        attach_to_workers(workers=["tcp://127.0.0.1:1"], ca="/no/such.pem", private_key=b"x")


def make_certificates(folder) -> tuple[str, str]:
    """A CA, and a certificate for 127.0.0.1 it signed: (ca file, cert + key file)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def build(subject, issuer, public, signer, ca):
        b = x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
        b = b.public_key(public).serial_number(x509.random_serial_number())
        b = b.not_valid_before(now - datetime.timedelta(days=1))
        b = b.not_valid_after(now + datetime.timedelta(days=1))
        b = b.add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        if not ca:
            san = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
        return b.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "monarch-test-ca")])
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "monarch-host")])
    ca = build(ca_name, ca_name, ca_key.public_key(), ca_key, True)
    cert = build(name, ca_name, key.public_key(), ca_key, False)
    pem = serialization.Encoding.PEM
    (folder / "ca.pem").write_bytes(ca.public_bytes(pem))
    own = cert.public_bytes(pem) + key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    (folder / "host.pem").write_bytes(own)
    return str(folder / "ca.pem"), str(folder / "host.pem")


def test_certificates_make_connections_across_hosts_mutual_tls(tmp_path):
    """ca= and private_key= instead of a shared secret: workers and controller
    prove themselves with certificates one CA signed; a controller whose
    certificate another CA signed gets nowhere."""
    ca, own = make_certificates(tmp_path)
    (tmp_path / "other").mkdir()
    other_ca, other_own = make_certificates(tmp_path / "other")
    address = f"tcp://127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if k != "MONARCH_JOB_SECRET"}
    worker_code = (
        "import sys; from monarch_actor import run_worker_loop_forever as run; "
        "run(address=sys.argv[1], ca=sys.argv[2], private_key=sys.argv[3])"
    )
    worker = subprocess.Popen(
        [sys.executable, "-c", worker_code, address, ca, own], env=env, start_new_session=True
    )
    script = tmp_path / "controller.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, sys, warnings
            warnings.simplefilter("error")  # certificates need no warning about secrets
            sys.path.insert(0, {os.path.dirname(__file__)!r})
            from actors import Victim
            from monarch_actor import attach_to_workers
            ca, own = sys.argv[1], sys.argv[2]
            hosts = attach_to_workers(workers=[{address!r}], ca=ca, private_key=own)
            try:
                hosts.initialized.get(timeout=30)
            except Exception as error:
                print("refused:", type(error).__name__, flush=True)
                sys.exit(0)
            victim = hosts.spawn_procs(per_host={{"gpus": 1}}).spawn("v", Victim)
            print("pid", victim.pid.call_one().get(timeout=60), flush=True)
            if sys.argv[3] == "shutdown":
                hosts.shutdown().get(timeout=60)
            """
        )
    )
    try:
        stranger = subprocess.run(
            [sys.executable, str(script), other_ca, other_own, "stay"],
            env={**env, "MONARCH_ATTACH_TIMEOUT": "3"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "refused: ConnectionError" in stranger.stdout, stranger.stdout + stranger.stderr
        trusted = subprocess.run(
            [sys.executable, str(script), ca, own, "shutdown"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert trusted.returncode == 0 and "pid " in trusted.stdout, trusted.stderr
        assert worker.wait(30) == 0
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)


def test_output_of_procs_on_other_hosts_reaches_the_controller(tmp_path):
    workers = Workers(1)
    script = tmp_path / "controller.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import asyncio
            from monarch_actor import Actor, attach_to_workers, endpoint

            class Talker(Actor):
                @endpoint
                def say(self, text: str) -> None:
                    print(text, flush=True)

            hosts = attach_to_workers(workers=[{workers.addresses[0]!r}])
            procs = hosts.spawn_procs(per_host={{"gpus": 2}})
            talkers = procs.spawn("t", Talker)
            asyncio.run(procs.logging_option(stream_to_client=True, aggregate_window_sec=None))
            talkers.say.call("hello from a worker's proc").get(timeout=60)
            hosts.shutdown().get(timeout=60)
            """
        )
    )
    try:
        done = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        lines = [line for line in done.stdout.splitlines() if "hello from a worker" in line]
        assert sorted(line.split("] [")[1][:1] for line in lines) == ["0", "1"], done.stdout
    finally:
        workers.close()


def test_a_worker_given_as_a_future_is_attached_once_its_address_arrives():
    """A scheduler hands out a host's address later: the mesh takes the
    Future, its other hosts are attached at once, and procs span all of them."""
    job_secret()
    now = Workers(1)
    later = Workers(0)
    asked = threading.Event()

    @returns_future
    async def address_once_allocated() -> str:
        asked.set()
        later.addresses.append(f"tcp://127.0.0.1:{free_port()}")
        later.procs.append(
            subprocess.Popen(
                [sys.executable, "-c", WORKER, later.addresses[0]], start_new_session=True
            )
        )
        return later.addresses[0]

    try:
        hosts = attach_to_workers(workers=[*now.addresses, address_once_allocated()])
        assert asked.wait(30)
        assert hosts.initialized.get(timeout=60) is True
        pids = hosts.spawn_procs().spawn("v", Victim).pid.call().get(timeout=60)
        parents = [parent_of(pid) for _, pid in pids.items()]
        assert parents == [fork_server_of(now.procs[0].pid), fork_server_of(later.procs[0].pid)]
        hosts.shutdown().get(timeout=60)
        assert [w.wait(30) for w in (*now.procs, *later.procs)] == [0, 0]
    finally:
        now.close()
        later.close()


def test_a_worker_future_that_fails_fails_the_mesh_with_its_reason():
    job_secret()

    @returns_future
    async def no_allocation() -> str:
        raise RuntimeError("the scheduler found no free node")

    hosts = attach_to_workers(workers=[no_allocation()])
    with pytest.raises(RuntimeError, match="no free node"):
        hosts.initialized.get(timeout=60)


def test_shutdown_right_after_attach_reaches_a_worker_that_is_not_up_yet():
    job_secret()
    address = f"tcp://127.0.0.1:{free_port()}"
    hosts = attach_to_workers(workers=[address], ca="trust_all_connections")
    done = hosts.shutdown()  # before the worker even listens
    worker = subprocess.Popen([sys.executable, "-c", WORKER, address], start_new_session=True)
    try:
        done.get(timeout=60)
        assert worker.wait(30) == 0
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)


def test_a_worker_listening_on_every_interface_answers_under_the_address_dialed():
    # the many-hosts tutorial's worker: a bare wildcard, dialed here by loopback
    job_secret()
    port = free_port()
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, f"tcp://0.0.0.0:{port}"], start_new_session=True
    )
    try:
        hosts = attach_to_workers(workers=[f"tcp://127.0.0.1:{port}"])
        assert hosts.initialized.get(timeout=30) is True
        victims = hosts.spawn_procs(per_host={"gpus": 2}).spawn("v", Victim)
        pids = victims.pid.call().get(timeout=60)
        assert all(parent_of(pid) != os.getpid() for _, pid in pids.items())
        hosts.shutdown().get(timeout=60)
        assert worker.wait(30) == 0
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)


def test_a_worker_with_another_secret_is_reported_at_once_and_does_not_flood_its_log():
    job_secret()
    address = f"tcp://127.0.0.1:{free_port()}"
    other = "cd" * 32 if os.environ["MONARCH_JOB_SECRET"] == "ab" * 32 else "ab" * 32
    env = {**os.environ, "MONARCH_JOB_SECRET": other}
    ready = "worker-listening"
    code = (
        "import logging, sys; logging.basicConfig(level=logging.WARNING); "
        "from monarch_actor import run_worker_loop_forever as run; "
        f"print({ready!r}, flush=True); "
        "run(address=sys.argv[1], ca='trust_all_connections')"
    )
    worker = subprocess.Popen(
        [sys.executable, "-c", code, address],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert worker.stdout is not None and ready in worker.stdout.readline()
        hosts = attach_to_workers(workers=[address], ca="trust_all_connections")
        # well within the attach timeout (60 s): the refusal is final, not retried
        with pytest.raises(ConnectionError) as caught:
            hosts.initialized.get(timeout=30)
        message = str(caught.value)
        assert "authentication was refused" in message, message
        assert address in message and "MONARCH_JOB_SECRET" in message, message
        assert worker.stderr is not None
        seen = []
        while not any("unauthenticated" in line for line in seen):  # the worker's side of it
            seen.append(worker.stderr.readline())
            assert seen[-1], "".join(seen)
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        _, rest = worker.communicate(timeout=30)
    refusals = [line for line in [*seen, *rest.splitlines()] if "unauthenticated" in line]
    assert len(refusals) == 1, refusals


def test_each_hosts_gpu_processes_land_on_that_hosts_gpus():
    workers = Workers(2, env={"CUDA_VISIBLE_DEVICES": "3,1"})  # what the hosts have
    try:
        hosts = attach_to_workers(workers=workers.addresses, ca="trust_all_connections")
        # asked before the just-started workers report their GPUs: the mesh fails to
        # start, saying why (a ValueError at once, were a worker that quick)
        with pytest.raises((RuntimeError, ValueError), match=r"2 GPUs \(3, 1\) but 3 processes"):
            hosts.spawn_procs(per_host={"gpus": 3}, name="early").initialized.get(timeout=60)
        procs = hosts.spawn_procs(per_host={"gpus": 2})
        placed = procs.spawn("v", Victim).env.call(["CUDA_VISIBLE_DEVICES", "NCCL_HOSTID"])
        for point, (device, host_id) in placed.get(timeout=60).items():
            assert device == ["3", "1"][point["gpus"]]
            assert host_id == f"anon_host_{point['hosts']}"  # NCCL tells the hosts apart
        # once the hosts are known, too many is refused at once
        with pytest.raises(ValueError, match="has 2 GPUs"):
            hosts.spawn_procs(per_host={"gpus": 4})
        hosts.shutdown().get(timeout=60)
    finally:
        workers.close()
