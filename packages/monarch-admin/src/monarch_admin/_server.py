"""The mesh admin's HTTP server: a JSON API over the job's topology, probes
and stacks, an activity history, and the dashboard page.

Bound to loopback it serves anyone on this host (who could read the job's
secret anyway); bound elsewhere every request must carry the job's admin
token (``Authorization: Bearer <token>``, or ``?token=`` for a browser),
derived from the job's secret.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
import sys
import threading
import traceback
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlparse

from monarch_transport import job_secret

from ._collect import diagnostics, is_down, stacks, topology
from ._config import ADMIN_ADDR, SAMPLE_INTERVAL

__all__ = [
    "AdminServer",
    "admin_token",
    "disable_admin",
    "enable_admin",
    "enable_dashboard",
    "parse_addr",
]

HISTORY = 1800  # activity samples kept (an hour at the default interval)
API = {
    "/v1/topology": "hosts, their processes and actors (?events=1 adds each actor's recent events)",
    "/v1/diagnostics": "a round trip to every process, with its latency",
    "/v1/stacks": "the Python stacks of one process (?address=...)",
    "/v1/history": "message counts over time, sampled while the server runs",
    "/v1/failures": "every failure seen since the server started, with its reason",
}


def admin_token(secret: bytes | None = None) -> str:
    """The bearer token the admin server asks of clients off loopback.

    Args:
        secret: the job's secret; this process's (``MONARCH_JOB_SECRET``) by default.

    Returns:
        The token, as hex.
    """
    key = job_secret() if secret is None else secret
    return hmac.new(key, b"monarch-admin", "sha256").hexdigest()


def parse_addr(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as a host and a port.

    Args:
        text: the address.

    Returns:
        The host (without brackets) and the port.

    Raises:
        ValueError: ``text`` has no port, or the port is not a number in 0..65535.
    """
    host, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"the mesh admin address must be HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Activity:
    """Samples the job's totals in the background: the dashboard's history
    and the failures seen, which outlive the processes that failed."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.samples: deque[dict[str, Any]] = deque(maxlen=HISTORY)
        self.failures: dict[tuple[str, str], dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="monarch-admin-sampler", daemon=True)

    def _run(self) -> None:
        while not self.stopped.is_set():
            # an error means the runtime is shutting down: nothing left to sample
            with contextlib.suppress(Exception):
                self.record(topology())
            self.stopped.wait(self.interval)

    def record(self, found: dict[str, Any]) -> None:
        """Add one sample from a topology, and any failure it shows."""
        summary = found["summary"]
        with self.lock:
            self.samples.append(
                {
                    "at": found["at"],
                    "messages": summary["messages"],
                    "actors": summary["actors"],
                    "procs": summary["procs"],
                    "failed": summary["failed_actors"] + summary["failed_procs"],
                }
            )
            for host in found["hosts"]:
                for proc in host["procs"]:
                    where = proc.get("name") or proc.get("address")
                    if is_down(proc):
                        self.failures.setdefault(
                            ("proc", proc["address"]),
                            {
                                "at": found["at"],
                                "kind": "proc",
                                "what": where,
                                "host": host["host"],
                                "address": proc["address"],
                                "reason": proc.get("error")
                                or (
                                    "the process exited without being asked to stop"
                                    if proc.get("status") == "exited"
                                    else "the process failed"
                                ),
                            },
                        )
                    for actor in proc.get("actors", []):
                        if actor["status"] == "failed":
                            self.failures.setdefault(
                                ("actor", f"{actor['key']}/{actor['rank']}"),
                                {
                                    "at": found["at"],
                                    "kind": "actor",
                                    "what": f"{actor['name']}[{actor['rank']}] ({actor['class']})",
                                    "host": host["host"],
                                    "proc": where,
                                    "address": proc["address"],
                                    "actor": f"{actor['key']}/{actor['rank']}",
                                    "reason": actor["reason"],
                                },
                            )

    def history(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.samples)

    def failure_list(self) -> list[dict[str, Any]]:
        with self.lock:
            return sorted(self.failures.values(), key=lambda f: f["at"])


class AdminServer:
    """A running mesh admin server (``enable_admin`` starts one).

    Args:
        host: the address to listen on.
        port: the port (0: any free one).
        interval: seconds between activity samples; the
            ``mesh_admin_sample_interval`` setting by default.

    Attributes:
        host: the address it listens on.
        port: its port.
        token: the bearer token clients need, or ``None`` on loopback.
    """

    def __init__(self, host: str, port: int, *, interval: float | None = None) -> None:
        self.token = None if _loopback(host) else admin_token()
        self._activity = _Activity(SAMPLE_INTERVAL.get() if interval is None else interval)
        server = self

        class Handler(_Handler):
            admin = server

        self._httpd = ThreadingHTTPServer((host, port), Handler)
        self._httpd.daemon_threads = True
        self.host = host
        self.port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="monarch-admin", daemon=True
        )
        self._thread.start()
        self._activity.thread.start()

    @property
    def url(self) -> str:
        """The server's base URL."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def sample(self) -> None:
        """Take an activity sample now (one is taken every interval anyway):
        the history grows by one and failures seen since are recorded."""
        self._activity.record(topology())

    def history(self) -> list[dict[str, Any]]:
        """The activity samples taken so far (what ``/v1/history`` serves)."""
        return self._activity.history()

    def close(self) -> None:
        """Stop serving."""
        self._activity.stopped.set()
        self._httpd.shutdown()
        self._httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    admin: AdminServer
    server_version = "monarch-admin"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the script's output is the user's

    def do_GET(self) -> None:
        url = urlparse(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        if not self._authorized(query):
            self._json(401, {"error": "this admin server needs the job's token: send "
                             "'Authorization: Bearer <token>' (monarch_admin.admin_token())"})
            return
        try:
            if url.path in ("/", "/dashboard"):
                self._page()
            elif url.path == "/v1":
                self._json(200, {"endpoints": API})
            elif url.path == "/v1/topology":
                self._json(200, topology(events=query.get("events") == "1"))
            elif url.path == "/v1/diagnostics":
                self._json(200, diagnostics())
            elif url.path == "/v1/stacks":
                if "address" not in query:
                    self._json(400, {"error": "name the process: /v1/stacks?address=..."})
                else:
                    self._json(200, stacks(query["address"]))
            elif url.path == "/v1/history":
                self._json(200, {"interval": self.admin._activity.interval,
                                 "samples": self.admin._activity.history()})
            elif url.path == "/v1/failures":
                self._json(200, {"failures": self.admin._activity.failure_list()})
            else:
                self._json(404, {"error": f"no such endpoint {url.path!r}", "endpoints": API})
        except Exception as error:
            self._json(500, {"error": f"{type(error).__name__}: {error}",
                             "traceback": traceback.format_exc()})

    def _authorized(self, query: dict[str, str]) -> bool:
        token = self.admin.token
        if token is None:
            return True
        given = query.get("token") or self.headers.get("Authorization", "").removeprefix("Bearer ")
        return hmac.compare_digest(given.strip(), token)

    def _json(self, status: int, body: Any) -> None:
        data = json.dumps(body, default=str).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def _page(self) -> None:
        page = resources.files("monarch_admin").joinpath("static", "dashboard.html")
        if not page.is_file():
            self._json(200, {"endpoints": API})
            return
        data = page.read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


_lock = threading.Lock()
_server: AdminServer | None = None


def enable_admin(addr: str | None = None, *, quiet: bool = False) -> AdminServer:
    """Start this job's mesh admin server (once per process), as Monarch's
    ``JobTrait.enable_admin()`` does.

    It prints ``Mesh admin server listening on http://HOST:PORT``. ``monarch-tui
    --addr HOST:PORT`` shows it in a terminal; the URL shows the dashboard.

    Args:
        addr: ``HOST:PORT`` to listen on (port 0: any free one); default the
            ``mesh_admin_addr`` setting (``127.0.0.1:1729``). Off loopback,
            clients need the job's token (``admin_token()``).
        quiet: do not print the address.

    Returns:
        The server (the running one when called again).

    Raises:
        ValueError: ``addr`` is not ``HOST:PORT``.
        OSError: the address cannot be bound (say, the port is taken).
    """
    global _server
    with _lock:
        if _server is None:
            host, port = parse_addr(addr or ADMIN_ADDR.get())
            _server = AdminServer(host, port)
            if not quiet:
                sys.stdout.write(f"Mesh admin server listening on {_server.url}\n")
                sys.stdout.flush()
        return _server


def enable_dashboard(port: int = 8265, host: str = "127.0.0.1") -> AdminServer:
    """Serve the web dashboard (on the mesh admin server), as Monarch's
    ``enable_telemetry(TelemetryConfig(include_dashboard=True))`` does.

    It prints ``Monarch Dashboard: http://HOST:PORT``. When an admin server
    already runs in this process, the dashboard is on it instead.

    Args:
        port: the port to listen on (0: any free one).
        host: the address to listen on; off loopback, the page needs the
            job's token (``?token=...``).

    Returns:
        The server.

    Raises:
        OSError: the address cannot be bound.
    """
    server = enable_admin(f"{host}:{port}", quiet=True)
    sys.stdout.write(f"Monarch Dashboard: {server.url}\n")
    sys.stdout.flush()
    return server


def disable_admin() -> None:
    """Stop this process's mesh admin server, if one runs."""
    global _server
    with _lock:
        if _server is not None:
            _server.close()
            _server = None

