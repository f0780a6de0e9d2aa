"""The debug server's door: every client proves the job's secret (loopback
included), the server proves it back, every message after that is sealed, a
second client does not evict the first, and ``monarch debug`` finds the
secret in a record only the job's user can read.

An actor stops at ``breakpoint()`` in each test that needs a session to
attack; another local user (uid 65534), a client with a wrong secret, a
server impostor and a relay that alters the conversation all try their
luck against it."""

import contextlib
import json
import os
import secrets
import socket
import stat
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable

import pytest
from debug_actors import Debugee

from monarch_actor import DebugClient, DebugConnectionError, debug_controller
from monarch_actor._core.private import private_dir
from monarch_actor._debugger import server as debugger
from monarch_actor._debugger.protocol import NONCE_BYTES, PROTOCOL_VERSION, encode_message
from monarch_transport import job_secret
from monarch_transport.testing import other_user_unavailable, run_as_other_user

WAIT = 60  # seconds: the most any step here may take


@pytest.fixture
def paused(procs, server):
    """An actor stopped at breakpoint(), continued (by a real client) at the end."""
    debugee = procs.spawn("intruded", Debugee)
    result = debugee.slice(gpus=0).to_debug.call_one(3)
    debug_controller().wait_pending_session.call_one(1, WAIT).get(timeout=WAIT + 10)
    yield debugee
    with DebugClient("127.0.0.1", server, timeout=WAIT, takeover=True) as client:
        assert client.send("continue", timeout=WAIT) == "[intruded 0] continued\n"
    assert result.get(timeout=WAIT) == 7
    debugee.stop().get(timeout=WAIT)


def _evil(marker: str) -> str:
    """A pdb command that, run in the actor, leaves ``marker`` behind."""
    return f"cast intruded ranks(0) !import os; os.system('touch {marker}')"


INTRUDER = """
import json, os, secrets, socket, sys

host, port, evil, record = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
try:
    open(record).read()
    print("READ THE RECORD")
except OSError as error:
    print("record:", type(error).__name__)
line = lambda text: json.dumps({"t": "line", "text": text}) + "\\n"
guess = json.dumps({"t": "auth", "nonce": secrets.token_hex(32), "takeover": True,
                    "pid": os.getpid(), "host": "x", "proof": "00" * 32}) + "\\n"
for opening in ("", guess):  # straight to commands; a guessed proof first
    with socket.create_connection((host, port), timeout=15) as conn:
        conn.sendall((opening + line("list") + line(evil) + "list\\n").encode())
        got = b""
        try:
            while chunk := conn.recv(65536):
                got += chunk
        except ConnectionResetError:
            pass  # closed with lines of ours unread: an end too
        except OSError as error:
            print("no end:", error)
    print("GOT", got.decode(errors="replace"))
"""


def test_another_local_user_lists_nothing_runs_nothing_and_evicts_nobody(paused, server, tmp_path):
    why = other_user_unavailable()
    if why is not None:
        pytest.skip(why)
    marker = tmp_path / "pwned"
    record = private_dir("jobs") / f"{os.getpid()}-debug.json"
    with DebugClient("127.0.0.1", server, timeout=WAIT) as mine:
        assert "intruded" in mine.send("list", timeout=WAIT)
        done = run_as_other_user(
            INTRUDER, "127.0.0.1", str(server), _evil(str(marker)), str(record), timeout=WAIT
        )
        assert done.returncode == 0, done.stderr
        assert "READ THE RECORD" not in done.stdout
        assert "record: PermissionError" in done.stdout
        # each connection ended at the handshake: the greeting, a refusal, the end
        assert done.stdout.count("GOT ") == 2 and "no end" not in done.stdout
        for got in done.stdout.split("GOT ")[1:]:
            assert "MONARCH DEBUGGER" not in got and "intruded" not in got
            assert "Debugee.to_debug" not in got and "prompt" not in got
        assert not marker.exists()  # the command never ran
        # the job's own client was not evicted, and the session is untouched
        assert mine.send("cast intruded ranks(0) p some_local", timeout=WAIT) == (
            "[intruded 0] 3\n"
        )
    assert not marker.exists()


def test_a_client_with_a_wrong_secret_is_refused_on_loopback(paused, server):
    with pytest.raises(DebugConnectionError, match="did not prove the job's secret") as caught:
        DebugClient("127.0.0.1", server, secret=secrets.token_bytes(32), timeout=WAIT)
    assert "secret=" in str(caught.value)  # where the wrong secret came from
    with DebugClient("127.0.0.1", server, secret=job_secret(), timeout=WAIT) as right:
        assert "intruded" in right.send("list", timeout=WAIT)


def _impostor(answer: Callable[[dict], bytes]) -> tuple[int, threading.Thread, list[bytes]]:
    """A listener that greets like a debug server but does not know the
    secret; what it heard after the client's first message lands in the list."""
    listener = socket.create_server(("127.0.0.1", 0))
    heard: list[bytes] = []

    def serve() -> None:
        with listener, listener.accept()[0] as conn, conn.makefile("rb") as lines:
            conn.sendall(
                encode_message("hello", version=PROTOCOL_VERSION, nonce=os.urandom(32).hex())
            )
            auth = json.loads(lines.readline())
            conn.sendall(answer(auth))
            heard.extend(lines.readlines())  # until the client hangs up

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener.getsockname()[1], thread, heard


@pytest.mark.parametrize(
    "answer",
    [
        lambda auth: encode_message("welcome", proof=secrets.token_hex(32)),
        lambda auth: encode_message("welcome", proof=auth["proof"]),  # reflects the client's
        lambda auth: encode_message("welcome"),
        lambda auth: encode_message("prompt", text="monarch_dbg> "),  # as the old protocol did
    ],
    ids=["made-up proof", "reflected proof", "no proof", "no welcome"],
)
def test_a_server_impostor_is_detected_and_hears_no_command(answer):
    port, thread, heard = _impostor(answer)
    with pytest.raises(DebugConnectionError, match="did not prove that it knows the job's secret"):
        DebugClient("127.0.0.1", port, secret=job_secret(), timeout=WAIT)
    thread.join(WAIT)
    assert not thread.is_alive() and heard == []


class Relay:
    """A man in the middle between a client and the debug server that sees
    each line and decides what to pass on: ``tamper(direction, index, line)``
    returns the lines to send instead (``direction`` is ``"c2s"`` or
    ``"s2c"``, ``index`` counts that direction's lines from 0: the handshake
    is c2s 0 and s2c 0 and 1)."""

    def __init__(self, port: int, tamper: Callable[[str, int, bytes], list[bytes]]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.target = port
        self.tamper = tamper
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with self.listener:
            client = self.listener.accept()[0]
        server = socket.create_connection(("127.0.0.1", self.target), timeout=WAIT)
        pumps = [
            threading.Thread(target=self._pump, args=("c2s", client, server), daemon=True),
            threading.Thread(target=self._pump, args=("s2c", server, client), daemon=True),
        ]
        for pump in pumps:
            pump.start()
        for pump in pumps:
            pump.join()
        client.close()
        server.close()

    def _pump(self, direction: str, source: socket.socket, sink: socket.socket) -> None:
        try:
            with source.makefile("rb") as lines:
                for index, line in enumerate(iter(lines.readline, b"")):
                    sink.sendall(b"".join(self.tamper(direction, index, line)))
        except OSError:
            pass  # an end closed (or reset) the connection
        for end in (source, sink):  # one side ended: so does the other direction
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)


def _flip(line: bytes) -> bytes:
    """``line`` with one letter of its JSON changed."""
    at = line.index(b'"t"') + 1
    return line[:at] + bytes([line[at] ^ 0x20]) + line[at + 1 :]


def _sealed(line: bytes, text: str) -> bytes:
    """A line of the sealed form carrying ``text``, with the MAC of ``line``."""
    mac = line.split(b" ", 1)[0]
    return mac + b" " + json.dumps({"t": "line", "text": text}).encode() + b"\n"


@pytest.mark.parametrize(
    "how",
    ["flipped", "forged", "reused mac", "replayed", "unsealed"],
)
def test_an_altered_or_injected_command_closes_the_connection(
    paused, server, tmp_path, how, caplog
):
    marker = tmp_path / "pwned"
    evil = _evil(str(marker))

    def tamper(direction: str, index: int, line: bytes) -> list[bytes]:
        if direction != "c2s" or index != 1:  # the first sealed line the client sends
            return [line]
        return {
            "flipped": [_flip(line)],
            "forged": [
                b"00" * 32 + b" " + json.dumps({"t": "line", "text": evil}).encode() + b"\n"
            ],
            "reused mac": [_sealed(line, evil)],
            "replayed": [line, line],  # the second copy's sequence number is wrong
            "unsealed": [line, json.dumps({"t": "line", "text": evil}).encode() + b"\n"],
        }[how]

    relay = Relay(server, tamper)
    client = DebugClient("127.0.0.1", relay.port, secret=job_secret(), timeout=WAIT)
    shown = client.send("list", timeout=WAIT)
    if how in ("replayed", "unsealed"):  # the genuine line went through first
        assert "intruded" in shown
        shown = client.send("list", timeout=WAIT)
    assert "closed the connection" in shown and client.closed
    relay.thread.join(WAIT)
    assert "failed its integrity check" in caplog.text
    assert not marker.exists()
    with DebugClient("127.0.0.1", server, timeout=WAIT) as fresh:  # the next client is served
        assert "intruded" in fresh.send("list", timeout=WAIT)


@pytest.mark.parametrize("how", ["flipped", "injected", "replayed", "dropped"])
def test_an_altered_or_injected_answer_is_refused_by_the_client(paused, server, how):
    seen: list[bytes] = []

    def tamper(direction: str, index: int, line: bytes) -> list[bytes]:
        if direction != "s2c" or index < 2:  # hello and welcome pass
            return [line]
        seen.append(line)
        if index != 4:  # the banner, its prompt: then the answer to `list`
            return [line]
        return {
            "flipped": [_flip(line)],
            "injected": [seen[0].split(b" ", 1)[0] + b' {"t": "out", "text": "run rm -rf"}\n'],
            "replayed": [seen[0]],
            "dropped": [],  # the next line's sequence number is then wrong
        }[how]

    relay = Relay(server, tamper)
    client = DebugClient("127.0.0.1", relay.port, secret=job_secret(), timeout=WAIT)
    assert "MONARCH DEBUGGER" in client.greeting
    with pytest.raises(DebugConnectionError, match="failed its integrity check"):
        client.send("list", timeout=WAIT)
    assert client.closed
    relay.thread.join(WAIT)


def test_a_second_client_is_refused_until_one_takes_over(paused, server):
    first = DebugClient("127.0.0.1", server, timeout=WAIT)
    with pytest.raises(DebugConnectionError) as caught:
        DebugClient("127.0.0.1", server, timeout=WAIT)
    text = str(caught.value)
    assert "another monarch debug client is attached (since " in text
    assert f"pid {os.getpid()}" in text and "pass --takeover to replace it" in text
    assert "intruded" in first.send("list", timeout=WAIT)  # undisturbed
    with DebugClient("127.0.0.1", server, timeout=WAIT, takeover=True) as second:
        assert "Another `monarch debug` attached" in first.send("list", timeout=WAIT)
        assert first.closed
        assert "intruded" in second.send("list", timeout=WAIT)


def _client_in_a_process(port: int, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent(
        f"""
        from monarch_actor import DebugClient
        try:
            with DebugClient("localhost", {port}, timeout=30) as client:
                print(client.send("list", timeout=30))
        except ConnectionError as error:
            print("ERROR", error)
        """
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=WAIT
    )


def _without_secret() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MONARCH_JOB_SECRET")}


def test_the_record_is_this_users_alone_and_the_client_finds_the_secret_there(paused, server):
    folder = private_dir("jobs")
    record = folder / f"{os.getpid()}-debug.json"
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    info = os.stat(record)
    assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == os.geteuid()
    published = json.loads(record.read_text())
    assert published["secret"] == job_secret().hex() and published["pid"] == os.getpid()
    assert (published["host"], published["port"]) == ("localhost", server) or any(
        (s["host"], s["port"]) == ("localhost", server) for s in published["servers"]
    )
    done = _client_in_a_process(server, _without_secret())  # no secret in its environment
    assert "intruded" in done.stdout and "ERROR" not in done.stdout, done.stdout + done.stderr


def test_a_secret_file_others_can_read_is_refused(paused, server, tmp_path):
    secret_file = tmp_path / "secret"
    secret_file.write_text(job_secret().hex())
    secret_file.chmod(0o644)
    env = {**_without_secret(), "MONARCH_JOB_SECRET_FILE": str(secret_file)}
    done = _client_in_a_process(server, env)
    assert f"ERROR MONARCH_JOB_SECRET_FILE '{secret_file}' has mode 0644" in done.stdout
    assert f"chmod 600 {secret_file}" in done.stdout, done.stdout + done.stderr
    secret_file.chmod(0o600)
    done = _client_in_a_process(server, env)
    assert "intruded" in done.stdout, done.stdout + done.stderr


def test_no_secret_anywhere_says_what_to_set(paused, server, tmp_path):
    env = {**_without_secret(), "MONARCH_STATE_DIR": str(tmp_path / "state")}
    done = _client_in_a_process(server, env)
    assert "asks for the job's secret: set MONARCH_JOB_SECRET" in done.stdout
    assert "MONARCH_JOB_SECRET_FILE" in done.stdout and "as the user who runs the program" in (
        done.stdout
    )


def test_a_silent_or_overlong_greeting_is_cut_off_before_the_handshake(server, monkeypatch):
    monkeypatch.setattr(debugger, "HANDSHAKE_WAIT", 0.5)
    for sent in (b"", b"x" * 5000, b"x" * 5000 + b"\n"):
        with socket.create_connection(("127.0.0.1", server), timeout=WAIT) as conn:
            conn.sendall(sent)
            with conn.makefile("rb") as lines:
                hello = json.loads(lines.readline())
                assert hello["version"] == PROTOCOL_VERSION
                assert len(bytes.fromhex(hello["nonce"])) == NONCE_BYTES
                try:
                    rest = lines.read()
                except ConnectionResetError:  # closed with bytes of ours unread
                    rest = b""
                assert rest == b""  # closed: no refusal needed for a mute or a flood
