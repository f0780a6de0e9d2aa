"""shell(): a real shell on a real pseudo-terminal in a proc, driven by a
controller script in a subprocess, its input a pipe or a terminal of its own
(a pty made here). Every wait reads output until a marker, with a deadline."""

import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import textwrap
import time

import pytest

from monarch_launcher import hosts_from_config, shell

CLIENT = textwrap.dedent(
    """
    import sys, termios
    from monarch_actor import this_host
    from monarch_launcher import shell

    tty = sys.stdin.isatty()
    before = termios.tcgetattr(0) if tty else None
    code = shell(this_host(), env={"GREETING": "hi there"}, workdir=sys.argv[1] or None)
    if tty:
        print("RESTORED", termios.tcgetattr(0) == before, flush=True)
    print("STATUS", code, flush=True)
    """
)


def run_client(tmp_path, stdin: str, workdir: str = "") -> subprocess.CompletedProcess[str]:
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    return subprocess.run(
        [sys.executable, str(script), workdir],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_piped_input_runs_in_the_shell_and_its_status_comes_back(tmp_path):
    here = tmp_path / "work"
    here.mkdir()
    script = 'echo "[$GREETING]"\npwd\necho oops >&2\nexit 7\n'
    done = run_client(tmp_path, script, str(here))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[hi there]", str(here), "STATUS 7"]
    assert "oops" in done.stderr


def test_the_end_of_piped_input_ends_the_shell(tmp_path):
    done = run_client(tmp_path, "echo before-eof; false")  # no newline, no exit
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["before-eof", "STATUS 1"]


def read_until(fd: int, marker: bytes | None, seen: bytearray, deadline: float) -> str:
    """Read the terminal into ``seen`` until ``marker`` shows (``None``: until
    the client has exited and the terminal closes)."""
    while marker is None or marker not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {marker!r} in time; saw:\n{seen.decode(errors='replace')}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the client exited
                chunk = b""
            if not chunk:
                assert marker is None, f"output ended before {marker!r}:\n{seen.decode()}"
                break
            seen += chunk
    return seen.decode(errors="replace")


def test_a_terminal_gets_a_real_tty_with_its_size_and_is_restored(tmp_path):
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    pid, fd = pty.fork()
    if pid == 0:  # the controller, with this pty as its terminal
        os.execv(sys.executable, [sys.executable, str(script), ""])
    try:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 101, 0, 0))
        deadline = time.monotonic() + 90
        seen = bytearray()
        os.write(fd, b"stty size; tty; echo MARK-$((40+2))\n")
        text = read_until(fd, b"MARK-42", seen, deadline)
        assert "33 101" in text
        assert "/dev/pts/" in text
        os.write(fd, b"exit 3\n")
        text = read_until(fd, None, seen, deadline)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert "RESTORED True" in text, text
    assert "STATUS 3" in text, text
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_proc_that_dies_ends_the_session_loudly(tmp_path):
    # the shell's parent is the proc serving it
    done = run_client(tmp_path, "kill -9 $PPID\nsleep 60\n")
    assert done.returncode != 0
    assert "STATUS" not in done.stdout
    assert "monarch_shell" in done.stderr and "SIGKILL" in done.stderr, done.stderr


def test_a_mesh_of_more_than_one_host_is_refused(in_tmp, monkeypatch):
    monkeypatch.delenv("MONARCH_HOSTS", raising=False)
    hosts = hosts_from_config("MONARCH_HOSTS")  # two local workers
    try:
        with pytest.raises(ValueError, match=r"singleton HostMesh.*slice the mesh to one host"):
            shell(hosts)
    finally:
        hosts.shutdown().get(timeout=60)
    with pytest.raises(TypeError, match="HostMesh"):
        shell("localhost")  # type: ignore[arg-type]


def test_any_mesh_whose_size_is_not_one_is_refused_before_spawning():
    class TwoHosts:  # what Monarch's own test passes: a stand-in reporting two hosts
        spawned = False

        def size(self) -> int:
            return 2

        def spawn_procs(self) -> None:
            self.spawned = True

    mesh = TwoHosts()
    with pytest.raises(ValueError, match="singleton HostMesh"):
        shell(mesh)  # type: ignore[arg-type]
    assert not mesh.spawned


GUARDED = textwrap.dedent(
    """
    import sys
    from monarch_actor import this_host
    from monarch_launcher import shell

    try:
        outcome = f"STATUS {shell(this_host())}"
    except BaseException as error:
        outcome = f"RAISED {type(error).__name__}"
    with open(sys.argv[1], "w") as f:
        f.write(outcome)
    """
)


def run_guarded(tmp_path, **streams) -> tuple[subprocess.Popen[bytes], object]:
    script = tmp_path / "guarded.py"
    script.write_text(GUARDED)
    result = tmp_path / "outcome"
    client = subprocess.Popen([sys.executable, str(script), str(result)], **streams)
    return client, result


def test_a_broken_output_pipe_reaches_the_caller_and_ends_the_shell(tmp_path):
    client, result = run_guarded(
        tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert client.stdin is not None and client.stdout is not None
    try:
        client.stdin.write(b"echo READY-$((40+2))\n")
        client.stdin.flush()
        assert client.stdout.readline() == b"READY-42\n"
        client.stdout.close()  # whatever read the output went away
        client.stdin.write(b"echo into-a-broken-pipe\n")  # input stays open
        client.stdin.flush()
        assert client.wait(60) == 0
    finally:
        client.kill()
        client.wait()
    assert result.read_text() == "RAISED BrokenPipeError"


def test_the_end_of_a_terminals_input_hangs_up_the_foreground_job(tmp_path):
    master, slave = os.openpty()
    client, result = run_guarded(
        tmp_path, stdin=slave, stdout=slave, stderr=slave, start_new_session=True
    )
    os.close(slave)
    try:
        deadline = time.monotonic() + 90
        seen = bytearray()
        os.write(master, b"echo READY-$((40+2)); sleep 600\n")  # the foreground job
        read_until(master, b"READY-42", seen, deadline)
        os.close(master)  # the terminal is gone: its input ends
        master = -1
        assert client.wait(60) == 0
    finally:
        if master >= 0:
            os.close(master)
        client.kill()
        client.wait()
    assert result.read_text() == f"STATUS {128 + signal.SIGHUP}"
