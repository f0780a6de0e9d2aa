"""``monarch worker``: its address checks (each error says what to do), and
the ``monarch`` command's help and errors, run as real processes."""

import os
import socket
import subprocess
import sys

import pytest

from monarch_launcher import WorkerAddressError, check_worker_address, worker_command
from monarch_launcher.cli import build_parser

MONARCH = [sys.executable, "-m", "monarch_launcher"]


def run(*args, cwd=None, timeout=60):
    return subprocess.run(
        [*MONARCH, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout
    )


def test_good_addresses_pass_with_placeholders_filled_in(tmp_path):
    assert check_worker_address("tcp://127.0.0.1:26999") == "tcp://127.0.0.1:26999"
    host = socket.gethostname()
    assert check_worker_address("tcp://{hostname}:26999@tcp://0.0.0.0:26999") == (
        f"tcp://{host}:26999@tcp://0.0.0.0:26999"
    )
    assert check_worker_address(f"ipc://{tmp_path}/w") == f"ipc://{tmp_path}/w"


@pytest.mark.parametrize(
    ("address", "says"),
    [
        ("inproc://x", "reaches no other process"),
        ("http://x:1", "unknown scheme"),
        ("tcp://127.0.0.1", "bad worker address"),
        ("tcp://127.0.0.1:0", "fixed port"),
        ("tcp://0.0.0.0:26999", "cannot dial"),
        ("tcp://*:26999", "cannot dial"),
        ("tcp://192.0.2.1:26999", "not an address of this machine"),
        ("tcp://no-such-host.invalid:26999", "does not resolve"),
        ("ipc:///no/such/folder/w", "does not exist"),
        ("", "required"),
    ],
)
def test_bad_addresses_say_what_is_wrong(address, says):
    with pytest.raises(WorkerAddressError, match=says) as error:
        check_worker_address(address)
    assert isinstance(error.value, ValueError)  # what Monarch raises there


def test_a_taken_port_is_named():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(WorkerAddressError, match=f"port {port} is already taken"):
            check_worker_address(f"tcp://127.0.0.1:{port}")


def test_a_socket_path_in_use_is_refused_and_a_stale_one_removed(tmp_path):
    path = str(tmp_path / "w")
    with socket.socket(socket.AF_UNIX) as live:
        live.bind(path)
        live.listen()
        with pytest.raises(WorkerAddressError, match="already serves"):
            check_worker_address(f"ipc://{path}")
    assert os.path.exists(path)  # closed without unlinking: stale now
    check_worker_address(f"ipc://{path}")
    assert not os.path.exists(path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(WorkerAddressError, match="not a socket"):
        check_worker_address(f"ipc://{tmp_path}/file")


def test_the_worker_command_names_this_interpreter():
    assert worker_command("ipc:///a") == [
        sys.executable,
        "-m",
        "monarch_launcher",
        "worker",
        "--address",
        "ipc:///a",
    ]
    assert worker_command("ipc:///a", python="py", log_level="WARNING")[:4] == [
        "py",
        "-m",
        "monarch_launcher",
        "--log-level",
    ]


def test_help_describes_every_command():
    done = run("--help")
    assert done.returncode == 0
    for word in ("worker", "job", "apply", "kill", "MONARCH_JOB_SECRET"):
        assert word in done.stdout
    done = run("job", "--help")
    assert all(word in done.stdout for word in ("apply", "status", "kill"))
    assert "--address" in run("worker", "--help").stdout
    assert "--lifeline" not in run("worker", "--help").stdout  # internal


SCRIPT = os.path.join(os.path.dirname(sys.executable), "monarch")


@pytest.mark.skipif(
    not os.path.exists(SCRIPT), reason="the monarch console script is not installed beside python"
)
def test_the_console_script_is_the_same_command():
    done = subprocess.run([SCRIPT, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "worker" in done.stdout


def test_a_worker_at_a_bad_address_exits_with_a_clear_error():
    done = run("worker", "--address", "tcp://192.0.2.1:26999")
    assert done.returncode == 2
    assert "monarch worker: error:" in done.stderr
    assert "tcp://192.0.2.1:26999@tcp://0.0.0.0:26999" in done.stderr  # what to use instead
    done = run("worker", "--address", "tcp://127.0.0.1:26999", "--ca", "/no/such.pem")
    assert done.returncode == 2 and "--ca" in done.stderr
    done = run("worker")
    assert done.returncode == 2 and "--address" in done.stderr


def test_job_commands_without_a_job_file_say_how_to_get_one(tmp_path):
    for action in ("status", "kill"):
        done = run("job", action, cwd=tmp_path)
        assert done.returncode == 1
        assert "no job file at .monarch/job_state.pkl" in done.stderr
        assert "monarch job apply" in done.stderr
    done = run("job", "apply", "nosuchmodule.job", cwd=tmp_path)
    assert done.returncode == 1 and "cannot import 'nosuchmodule'" in done.stderr
    (tmp_path / "specs.py").write_text("job = 3\n")
    done = run("job", "apply", "specs.job", cwd=tmp_path)
    assert done.returncode == 1 and "not a job" in done.stderr
    done = run("job", cwd=tmp_path)
    assert done.returncode == 2 and "apply" in done.stderr


def test_the_parser_knows_monarchs_spellings():
    parser = build_parser()
    assert parser.parse_args(["apply", "m.job"]).spec == "m.job"
    assert parser.parse_args(["kill"]).file == ".monarch/job_state.pkl"
    assert parser.parse_args(["job", "status", "-f", "x.pkl"]).file == "x.pkl"
