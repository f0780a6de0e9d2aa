"""Fail closed: a worker or controller with no job secret and no
certificates refuses to start instead of using a public secret (unless
asked to, explicitly), and a secret file others may read is refused."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from monarch_transport import SECRET_ENV

WORKER = textwrap.dedent(
    """
    import sys
    from monarch_actor import run_worker_loop_forever
    run_worker_loop_forever(address=sys.argv[1], ca="trust_all_connections")
    """
)
CONFIGURE = textwrap.dedent(
    """
    import os, warnings
    from monarch_actor._api.hosts import configure_security
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        configure_security("trust_all_connections", None)
    print("secret", os.environ["MONARCH_JOB_SECRET"][:8])
    print("warned", any("anyone who can reach" in str(w.message) for w in caught))
    """
)


def run(code: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MONARCH_JOB_SECRET")}
    clean.pop("MONARCH_INSECURE_PUBLIC_SECRET", None)
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, **env},
    )


def test_a_worker_without_a_secret_refuses_to_start():
    done = run(WORKER, "tcp://127.0.0.1:0")
    assert done.returncode != 0
    assert "would let anyone who can reach these ports run code here" in done.stderr
    assert SECRET_ENV in done.stderr and "MONARCH_INSECURE_PUBLIC_SECRET=1" in done.stderr


def test_a_public_secret_only_when_asked_for():
    done = run(CONFIGURE, MONARCH_INSECURE_PUBLIC_SECRET="1")
    assert done.returncode == 0, done.stderr
    assert "secret 6d6f6e61" in done.stdout  # the public one
    assert "warned True" in done.stdout


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o622])
def test_a_secret_file_others_may_read_or_write_is_refused(tmp_path, mode):
    path = tmp_path / "secret"
    path.write_text("ab" * 32)
    path.chmod(mode)
    done = run(CONFIGURE, MONARCH_JOB_SECRET_FILE=str(path))
    assert done.returncode != 0
    assert f"has mode {mode:04o}" in done.stderr and f"chmod 600 {path}" in done.stderr


def test_a_private_secret_file_is_used(tmp_path):
    path = tmp_path / "secret"
    path.write_text("ab" * 32 + "\n")
    path.chmod(0o600)
    done = run(CONFIGURE, MONARCH_JOB_SECRET_FILE=str(path))
    assert done.returncode == 0, done.stderr
    assert "secret abababab" in done.stdout and "warned False" in done.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_secret_file_of_another_user_is_refused(tmp_path):
    path = tmp_path / "secret"
    path.write_text("ab" * 32)
    path.chmod(0o600)
    os.chown(path, 65534, 65534)
    done = run(CONFIGURE, MONARCH_JOB_SECRET_FILE=str(path))
    assert done.returncode != 0
    assert "belongs to uid 65534" in done.stderr


ATTACH = textwrap.dedent(
    """
    import sys
    from monarch_actor import Actor, attach_to_workers, endpoint

    class Hello(Actor):
        @endpoint
        def hi(self) -> str:
            return "hello"

    hosts = attach_to_workers(ca="trust_all_connections", workers=sys.argv[1:])
    print(hosts.spawn_procs().spawn("hello", Hello).hi.call().get().values())
    hosts.shutdown().get()
    """
)


def start_workers(folder, count: int) -> tuple[list[subprocess.Popen[str]], list[str]]:
    addresses = [f"ipc://{folder}/{i}" for i in range(count)]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MONARCH_JOB_SECRET")}
    clean.pop("MONARCH_INSECURE_PUBLIC_SECRET", None)
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, address], env=clean, stderr=subprocess.PIPE, text=True
        )
        for address in addresses
    ]
    return workers, addresses


def test_workers_on_unix_sockets_of_a_private_folder_need_no_secret(tmp_path):
    # Monarch's simple bootstrap: the folder keeps other users out, so the
    # public secret guards nothing they could reach
    folder = tmp_path / "sockets"
    folder.mkdir(mode=0o700)
    workers, addresses = start_workers(folder, 2)
    try:
        done = run(ATTACH, *addresses)
        assert done.returncode == 0, done.stderr
        assert "['hello', 'hello']" in done.stdout
        assert "anyone who can reach" not in done.stderr
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()


def test_unix_sockets_in_a_folder_others_may_enter_still_need_a_secret(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o755)
    done = run(WORKER, f"ipc://{folder}/worker")
    assert done.returncode != 0
    assert "would let anyone who can reach these ports run code here" in done.stderr
    done = run(ATTACH, f"ipc://{folder}/worker")
    assert done.returncode != 0
    assert "would let anyone who can reach these ports run code here" in done.stderr


def test_without_a_secret_nothing_listens_on_the_network(tmp_path):
    # a private Unix-socket job asked for TCP later: refused, not guarded by the public secret
    folder = tmp_path / "sockets"
    folder.mkdir(mode=0o700)
    code = textwrap.dedent(
        f"""
        from monarch_actor._api.hosts import check_listener, configure_security
        configure_security("trust_all_connections", None, ["ipc://{folder}/w"])
        check_listener("ipc://{folder}/controller")
        check_listener("tcp://127.0.0.1:0")
        """
    )
    done = run(code)
    assert done.returncode != 0
    assert "will not listen at tcp://127.0.0.1:0" in done.stderr, done.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root")
def test_another_user_cannot_reach_a_worker_in_a_private_folder(tmp_path):
    folder = tmp_path / "sockets"
    folder.mkdir(mode=0o700)
    workers, addresses = start_workers(folder, 1)
    try:
        path = addresses[0].removeprefix("ipc://")
        probe = textwrap.dedent(
            f"""
            import os, socket, sys, time
            for _ in range(1200):  # the worker is up once its socket is (at most a minute)
                if os.path.exists({path!r}):
                    print("up", flush=True)
                    break
                time.sleep(0.05)
            """
        )
        up = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60
        )
        assert up.stdout.strip() == "up"
        attack = textwrap.dedent(
            f"""
            import socket
            s = socket.socket(socket.AF_UNIX)
            try:
                s.connect({path!r})
                print("connected")
            except PermissionError:
                print("refused")
            """
        )
        done = subprocess.run(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                sys.executable,
                "-c",
                attack,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.stdout.strip() == "refused", (done.stdout, done.stderr)
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
