"""tools/netns_hosts.py: simulated hosts reach each other, vanish when cut, and leave nothing.

Needs root and the `ip` command; skipped with the reason otherwise. All
traffic stays inside the namespaces these tests make.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[1]))

import netns_hosts as nh  # in tools/, found through the line above

TOOLS = Path(nh.__file__).parent

pytestmark = pytest.mark.skipif(bool(nh.available()), reason=str(nh.available()))

PORT = 7000

# An echo server that says "ready" once listening and stops by itself after 60 s.
SERVER = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(); s.settimeout(1.0)
print("ready", flush=True)
end = time.monotonic() + 60
while time.monotonic() < end:
    try:
        c, _ = s.accept()
    except TimeoutError:
        continue
    with c:
        c.settimeout(2.0)
        c.sendall(c.recv(100))
"""

# Connects once (1 s limit), sends a line, prints what came back or the error's name.
CLIENT = """
import socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1.0) as c:
        c.sendall(b"ping"); print(c.recv(100).decode())
except OSError as e:
    print(type(e).__name__)
"""


def echo(h: nh.Hosts, client: str, server_ip: str) -> str:
    """From ``client``, one connect-send-receive to ``server_ip``: "ping" or the error."""
    out = h.run(
        client,
        [sys.executable, "-c", CLIENT, server_ip, str(PORT)],
        capture_output=True, text=True, timeout=15, check=True,
    )  # fmt: skip
    return str(out.stdout).strip()


def start_echo_server(h: nh.Hosts, host: str) -> subprocess.Popen[str]:
    server = h.popen(
        host, [sys.executable, "-c", SERVER, str(PORT)], stdout=subprocess.PIPE, text=True
    )
    assert server.stdout is not None
    assert server.stdout.readline().strip() == "ready"
    return server


def test_echo_is_reachable_then_cut_then_restored() -> None:
    with nh.hosts(3) as h:
        assert h.names == ["ctl", "h0", "h1", "h2"]
        assert (h.ip("ctl"), h.ip("h0"), h.ip("h2")) == ("10.213.0.1", "10.213.0.10", "10.213.0.12")
        start_echo_server(h, "h0")
        assert echo(h, "ctl", h.ip("h0")) == "ping"
        assert echo(h, "h1", h.ip("h0")) == "ping"
        assert echo(h, "h0", "127.0.0.1") == "ping"  # its own loopback

        h.cut("h0")
        started = time.monotonic()
        assert echo(h, "ctl", h.ip("h0")) in ("TimeoutError", "OSError")
        assert echo(h, "h1", h.ip("h0")) in ("TimeoutError", "OSError")
        assert time.monotonic() - started < 10
        assert echo(h, "h1", h.ip("h2")) == "ConnectionRefusedError"  # the rest still talk

        h.restore("h0")
        deadline = time.monotonic() + 10
        while (answer := echo(h, "ctl", h.ip("h0"))) != "ping" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert answer == "ping"
        assert echo(h, "h1", h.ip("h0")) == "ping"
        prefix = h.prefix
    assert not [ns for ns in nh.namespaces() if ns.startswith(prefix)]


def test_two_sets_at_once_are_separate_networks() -> None:
    with nh.hosts(1) as a, nh.hosts(1) as b:
        assert a.prefix != b.prefix
        assert a.ip("h0") == b.ip("h0")  # same addresses, different wires
        start_echo_server(a, "h0")
        assert echo(a, "ctl", a.ip("h0")) == "ping"
        assert echo(b, "ctl", b.ip("h0")) == "ConnectionRefusedError"


def test_cli_up_twice_at_once_then_down_leaves_nothing() -> None:
    cli = [sys.executable, str(TOOLS / "netns-hosts")]
    prefixes = [nh.new_prefix(), nh.new_prefix()]
    try:
        ups = [
            subprocess.Popen([*cli, "--prefix", p, "up", "--hosts", "2"], stdout=subprocess.PIPE)
            for p in prefixes
        ]
        outs = [proc.communicate(timeout=60)[0] for proc in ups]
        assert [proc.returncode for proc in ups] == [0, 0]
        for prefix, out in zip(prefixes, outs, strict=True):
            described = json.loads(out)
            assert described["h1"] == {"netns": f"{prefix}-h1", "ip": "10.213.0.11"}
            assert {f"{prefix}-{x}" for x in ("br", "ctl", "h0", "h1")} <= set(nh.namespaces())
        ran = subprocess.run(
            [*cli, "--prefix", prefixes[0], "exec", "h1", "--", "ip", "-br", "addr"],
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        assert "10.213.0.11/24" in ran.stdout
    finally:
        for p in prefixes:
            for _ in range(2):  # twice: down is idempotent
                subprocess.run([*cli, "down", "--prefix", p], timeout=60, check=True)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    assert not [p for p in prefixes if p in listed.stdout]


def test_bad_requests_are_refused_clearly() -> None:
    with pytest.raises(nh.NetnsError, match="prefix"):
        nh.up(1, prefix="someone-elses")
    with nh.hosts(1) as h:
        with pytest.raises(nh.NetnsError, match="already up"):
            nh.up(1, prefix=h.prefix)
        with pytest.raises(nh.NetnsError, match="no host 'h7'"):
            h.cut("h7")
