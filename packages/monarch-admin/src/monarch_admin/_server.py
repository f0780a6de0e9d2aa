"""The mesh admin's HTTP server: a JSON API over the job's topology, probes
and stacks, an activity history, and the dashboard page.

Another local user, or a web page open in this user's browser, is an
attacker like any other, loopback or not. So:

- every request that returns or does anything carries the job's admin token
  in ``Authorization: Bearer <token>`` (compared in constant time), never in
  the URL's query, which ends up in browser history and logs; only the
  dashboard's page shell, which holds no data, is served without it;
- the ``Host`` header must name this server (its own address, or
  ``localhost``/a loopback address when bound to loopback) with its port: a
  name an attacker's DNS points at 127.0.0.1 (DNS rebinding) gets 403; a
  present ``Origin`` must be the server's own, and ``Sec-Fetch-Site`` must be
  ``same-origin`` or ``none``, so another site's page gets 403 too;
- what makes processes work (probes, py-spy stacks) is ``POST`` only, and
  ``/v1/stacks`` asks only a process of the job's own topology: the server
  never dials an address a client names.

The token (derived from the job's secret) reaches this user's tools without
being pasted: the printed URL carries it in its fragment (``#token=``), which
browsers never send anywhere, and the server leaves a record only this user
may read (``monarch_actor.extension.publish_record("admin", ...)``), where
``monarch-tui`` finds it.
"""

from __future__ import annotations

import atexit
import contextlib
import hmac
import ipaddress
import json
import logging
import socket
import sys
import threading
import traceback
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

from monarch_actor.extension import background_thread, publish_record, remove_record
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

log = logging.getLogger("monarch.admin")

HISTORY = 1800  # activity samples kept (an hour at the default interval)
RECORD = "admin"  # the kind of record this user's tools look for (read_records)
API = {
    "/v1/topology": "GET: hosts, their processes and actors "
    "(?events=1 adds each actor's recent events)",
    "/v1/diagnostics": "POST: a round trip to every process, with its latency",
    "/v1/stacks": "POST: the Python stacks of one process of the topology (?address=...)",
    "/v1/history": "GET: message counts over time, sampled while the server runs",
    "/v1/failures": "GET: every failure seen since the server started, with its reason",
}
ACTIONS = frozenset({"/v1/diagnostics", "/v1/stacks"})  # they make processes work: POST only
PAGES = frozenset({"/", "/dashboard"})
HOW_TO_GET_THE_TOKEN = (
    "send the job's admin token as 'Authorization: Bearer <token>' (never in the URL's query). "
    "It is the part after '#token=' of the URL the job printed ('Mesh admin server listening "
    "on ...' or 'Monarch Dashboard: ...'); monarch-tui, run by the job's user, finds it by "
    "itself; in the job, monarch_admin.admin_token() gives it"
)


def admin_token(secret: bytes | None = None) -> str:
    """The bearer token the admin server asks of every client.

    It is an HMAC of the job's secret (256 random bits unless the job was
    given one), so it is as hard to guess as the secret and every process of
    the job, and anyone given ``MONARCH_JOB_SECRET``, can work it out.

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


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _split_host(value: str) -> tuple[str, int | None] | None:
    """A ``Host`` header's host (lowercase, no brackets) and port, or ``None``
    when it is malformed."""
    text = value.strip().lower()
    if text.startswith("["):  # [v6] or [v6]:port
        inside, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return None
        host, port = inside, rest[1:] if rest else None
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            host, port = text, None
        else:
            port = port_text
    if port is not None and not port.isdigit():
        return None
    return host.rstrip("."), int(port) if port is not None else None


class _Activity:
    """Samples the job's totals in the background: the dashboard's history
    and the failures seen, which outlive the processes that failed."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.samples: deque[dict[str, Any]] = deque(maxlen=HISTORY)
        self.failures: dict[tuple[str, ...], dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread = background_thread("monarch-admin-sampler", self._run)

    def _run(self) -> None:
        while not self.stopped.wait(self.interval):
            # an error means the runtime is shutting down: nothing left to sample
            with contextlib.suppress(Exception):
                self.record(topology())

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
        self.note(found)

    def note(self, found: dict[str, Any]) -> None:
        """Remember the failures a topology shows: failed processes and actors,
        and the last exception each actor's handlers raised (the actor lives
        on: the caller got the exception)."""
        with self.lock:
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
                        error = actor.get("last_error")
                        if error and not _failed_of(actor, error):
                            self._handler_error(host["host"], where, proc, actor, error)
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

    def _handler_error(
        self,
        host: str,
        where: str,
        proc: dict[str, Any],
        actor: dict[str, Any],
        error: dict[str, Any],
    ) -> None:
        text = str(error.get("error") or "").rstrip()
        last = text.splitlines()[-1] if text else ""
        actor_id = f"{actor['key']}/{actor['rank']}"
        # one entry per actor, handler and exception: a handler raising again updates it
        entry = self.failures.setdefault(
            ("error", actor_id, str(error.get("handler")), last),
            {
                "kind": "error",
                "what": f"{actor['name']}[{actor['rank']}] ({actor['class']})",
                "handler": error.get("handler"),
                "host": host,
                "proc": where,
                "address": proc["address"],
                "actor": actor_id,
                "at": error.get("at"),
            },
        )
        entry.update(
            at=max(float(entry["at"] or 0), float(error.get("at") or 0)),
            reason=f"{error.get('handler')} raised:\n{text}",
            handler_errors=actor.get("failures", 0),
        )

    def history(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.samples)

    def failure_list(self) -> list[dict[str, Any]]:
        with self.lock:
            return sorted(self.failures.values(), key=lambda f: f["at"])


def _failed_of(actor: dict[str, Any], error: dict[str, Any]) -> bool:
    """Whether the actor failed of this very error (a broadcast that raised):
    then its failure says it, once."""
    lines = str(error.get("error") or "").strip().splitlines()
    return actor.get("status") == "failed" and bool(lines) and lines[-1] in str(actor["reason"])


class AdminServer:
    """A running mesh admin server (``enable_admin`` starts one).

    While it runs, it leaves a record of its URL and token for this user's
    tools (``monarch_actor.extension.publish_record("admin", ...)``);
    ``close`` takes it back.

    Args:
        host: the address to listen on.
        port: the port (0: any free one).
        interval: seconds between activity samples; the
            ``mesh_admin_sample_interval`` setting by default.

    Attributes:
        host: the address it listens on.
        port: its port.
        token: the bearer token every client needs (``admin_token()``).
        announced: whether ``enable_admin`` has printed where it listens.
    """

    def __init__(self, host: str, port: int, *, interval: float | None = None) -> None:
        self.token = admin_token()
        self._activity = _Activity(SAMPLE_INTERVAL.get() if interval is None else interval)
        server = self

        class Handler(_Handler):
            admin = server

        self._httpd = _HTTPServer((host, port), Handler)
        self.host = host
        self.port = int(self._httpd.server_address[1])
        self.announced = False  # whether enable_admin printed where it listens
        self._names = _own_names(host)
        self._thread = background_thread("monarch-admin", self._httpd.serve_forever)
        # a first sample before anything else: a process that dies later is
        # still shown with its name, pid and actors
        with contextlib.suppress(Exception):
            self._activity.record(topology())
        self._thread.start()
        self._activity.thread.start()
        try:
            publish_record(RECORD, {"url": self.url, "token": self.token})
        except OSError:
            # no private folder (read-only home, ...): the printed URL still carries the token
            pass
        else:
            # a script that ends without disable_admin() takes its record back too
            atexit.register(_forget)

    @property
    def url(self) -> str:
        """The server's base URL, without credentials."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def dashboard_url(self) -> str:
        """The dashboard's URL with the token in its fragment
        (``http://HOST:PORT/#token=...``): a browser never sends a fragment to
        a server or proxy; the page reads it, keeps it for the tab and takes it
        out of the address bar."""
        return f"{self.url}/#token={self.token}"

    def sample(self) -> None:
        """Take an activity sample now (one is taken every interval anyway):
        the history grows by one and failures seen since are recorded."""
        self._activity.record(topology())

    def history(self) -> list[dict[str, Any]]:
        """The activity samples taken so far (what ``/v1/history`` serves)."""
        return self._activity.history()

    def close(self) -> None:
        """Stop serving, and take back the record left for this user's tools."""
        atexit.unregister(_forget)
        _forget()
        self._activity.stopped.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def listens_on(self, host: str, port: int) -> bool:
        """Whether this server is the one ``HOST:PORT`` asks for (port 0: any port).

        Args:
            host: the address asked for.
            port: the port asked for.
        """
        return host.strip("[]") == self.host and port in (0, self.port)

    def allows_host(self, value: str | None) -> bool:
        """Whether a request's ``Host`` header names this server.

        A name an attacker controls may resolve to this host's addresses (DNS
        rebinding): the browser then sends that name, which is refused. IP
        literals cannot be rebound; on loopback only loopback ones are
        accepted, as is ``localhost``.

        Args:
            value: the ``Host`` header, or ``None`` when the request had none.
        """
        if not value:
            return False
        parsed = _split_host(value)
        if parsed is None:
            return False
        host, port = parsed
        if port != self.port:
            return False
        ip = _ip(host)
        if ip is not None:
            if _loopback(self.host):
                return ip.is_loopback
            bound = _ip(self.host)
            return bound is None or bound.is_unspecified or ip == bound or ip.is_loopback
        return host in self._names


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (a closed tab, a timed-out request) is no
        error to print on the job's terminal; anything else is logged."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            log.debug("mesh admin: %s went away: %s", client_address, error)
            return
        log.warning(
            "mesh admin: a request from %s failed: %r",
            client_address,
            error,
            exc_info=log.isEnabledFor(logging.DEBUG),
        )


def _forget() -> None:
    """Take back this process's record (its own function: ``atexit.unregister``
    drops every registration of the function it is given)."""
    remove_record(RECORD)


def _own_names(host: str) -> frozenset[str]:
    """The host names a ``Host`` header may carry for a server bound to ``host``."""
    names = {"localhost"}
    if not _loopback(host):
        # names of this machine, which its administrator, not a web page, controls
        for name in (socket.gethostname(), socket.getfqdn()):
            if name:
                names.add(name.lower().rstrip("."))
        if _ip(host) is None:
            names.add(host.lower().rstrip("."))
    return frozenset(names)


class _Handler(BaseHTTPRequestHandler):
    admin: AdminServer
    server_version = "monarch-admin"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the script's output is the user's

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        page = method == "GET" and url.path in PAGES
        refused = self._foreign(page)
        if refused is not None:
            self._json(403, {"error": refused})
            return
        if page:
            self._page()  # the shell holds no data: its script asks with the token
            return
        if not self._authorized():
            why = "this mesh admin server needs the job's admin token: " + HOW_TO_GET_THE_TOKEN
            if "token" in query:
                why = (
                    "the token is not accepted in the URL's query (browser history and "
                    "logs keep URLs): " + HOW_TO_GET_THE_TOKEN
                )
            self._json(401, {"error": why}, authenticate=True)
            return
        if url.path in ACTIONS and method != "POST":
            self._json(
                405, {"error": f"{url.path} makes the job's processes work: use POST"}, allow="POST"
            )
            return
        if url.path not in ACTIONS and method != "GET" and url.path in (*API, "/v1"):
            self._json(405, {"error": f"{url.path} is read with GET"}, allow="GET")
            return
        try:
            self._route(url.path, query)
        except ConnectionError:
            raise  # the client went away: nobody to answer (handle_error stays quiet)
        except Exception as error:
            self._json(
                500,
                {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()},
            )

    def _route(self, path: str, query: dict[str, str]) -> None:
        if path == "/v1":
            self._json(200, {"endpoints": API})
        elif path == "/v1/topology":
            found = topology(events=query.get("events") == "1")
            self.admin._activity.note(found)
            self._json(200, found)
        elif path == "/v1/diagnostics":
            self._json(200, diagnostics())
        elif path == "/v1/stacks":
            self._stacks(query.get("address") or self._body().get("address"))
        elif path == "/v1/history":
            self._json(
                200,
                {
                    "interval": self.admin._activity.interval,
                    "samples": self.admin._activity.history(),
                },
            )
        elif path == "/v1/failures":
            # what the job shows now too, not only what the last sample saw
            with contextlib.suppress(Exception):
                self.admin._activity.note(topology())
            self._json(200, {"failures": self.admin._activity.failure_list()})
        else:
            self._json(404, {"error": f"no such endpoint {path!r}", "endpoints": API})

    def _stacks(self, address: Any) -> None:
        if not isinstance(address, str) or not address:
            self._json(400, {"error": "name the process: POST /v1/stacks?address=..."})
            return
        # only a process of this job: an address a client names is never dialed
        found = topology()
        self.admin._activity.note(found)
        process = _processes(found).get(address)
        if process is None:
            self._json(
                403,
                {
                    "error": f"{address!r} is not a process of this job (see "
                    "/v1/topology): the mesh admin only asks the job's own processes"
                },
            )
            return
        name = process.get("name") or address
        status = process.get("status") or "running"
        if status != "running":
            self._json(
                409,
                {
                    "error": f"the process {name} is {status}: it has no stacks to show",
                    "status": status,
                },
            )
            return
        if "error" in process:  # it did not answer the topology's question just now
            self._json(504, {"error": f"the process {name} does not answer: {process['error']}"})
            return
        answer = stacks(address)
        if "error" in answer:
            self._json(
                504, {"error": f"the process {name} did not give its stacks: {answer['error']}"}
            )
            return
        self._json(200, answer)

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 < length <= 65536:
            return {}
        with contextlib.suppress(ValueError):
            found = json.loads(self.rfile.read(length))
            if isinstance(found, dict):
                return found
        return {}

    def _foreign(self, page: bool) -> str | None:
        """Why the request comes from somewhere it must not (403), or ``None``."""
        host = self.headers.get("Host")
        if not self.admin.allows_host(host):
            return (
                f"the Host header {host!r} does not name this server (a DNS name pointed at "
                f"it, or a misdirected request); use {self.admin.url}"
            )
        origin = self.headers.get("Origin")
        if origin is not None and origin.lower() != f"http://{str(host).strip().lower()}":
            return f"requests from another origin ({origin!r}) are refused"
        site = self.headers.get("Sec-Fetch-Site")
        # opening the page from a link elsewhere is fine: the shell holds no data
        if not page and site is not None and site not in ("same-origin", "none"):
            return f"requests a {site} page makes are refused (Sec-Fetch-Site: {site})"
        return None

    def _authorized(self) -> bool:
        scheme, _, given = self.headers.get("Authorization", "").strip().partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(given.strip().encode(), self.admin.token.encode())

    def _json(
        self, status: int, body: Any, *, authenticate: bool = False, allow: str | None = None
    ) -> None:
        data = json.dumps(body, default=str).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        if authenticate:
            self.send_header("WWW-Authenticate", 'Bearer realm="monarch-admin"')
        if allow:
            self.send_header("Allow", allow)
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
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        # no other page may frame it (clicks tricked into it), nor learn its URL
        self.send_header("Content-Security-Policy", "frame-ancestors 'none'")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Referrer-Policy", "no-referrer")
        self.end_headers()
        self.wfile.write(data)


def _processes(found: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every process of a topology, by address."""
    known: dict[str, dict[str, Any]] = {}
    for host in found["hosts"]:
        for proc in host["procs"]:
            if proc.get("address"):
                known[str(proc["address"])] = proc
    return known


_lock = threading.Lock()
_server: AdminServer | None = None


def enable_admin(addr: str | None = None, *, quiet: bool = False) -> AdminServer:
    """Start this job's mesh admin server (once per process), as Monarch's
    ``JobTrait.enable_admin()`` does.

    It prints ``Mesh admin server listening on http://HOST:PORT/#token=TOKEN``:
    the URL opens the dashboard (the token in the fragment never leaves the
    browser); ``monarch-tui --addr HOST:PORT`` shows the job in a terminal and
    finds the token in the record the server leaves for this user.

    Args:
        addr: ``HOST:PORT`` to listen on (port 0: any free one); default the
            ``mesh_admin_addr`` setting (``127.0.0.1:1729``), or the server
            already running. Every client needs the job's token
            (``admin_token()``), on loopback too.
        quiet: do not print the address.

    Returns:
        The server (the running one when called again: it prints its address
        if it has not yet, say when ``enable_dashboard`` started it).

    Raises:
        ValueError: ``addr`` is not ``HOST:PORT``.
        RuntimeError: a server already runs in this process at another
            address than ``addr`` (``disable_admin()`` first).
        OSError: the address cannot be bound (say, the port is taken).
    """
    global _server
    with _lock:
        if _server is None:
            host, port = parse_addr(addr or ADMIN_ADDR.get())
            _server = AdminServer(host, port)
        elif addr is not None and not _server.listens_on(*parse_addr(addr)):
            raise RuntimeError(
                f"a mesh admin server already runs in this process at {_server.url}, not at "
                f"{addr}: call disable_admin() first to move it (one server per process serves "
                "the admin API and the dashboard)"
            )
        if not quiet and not _server.announced:
            _server.announced = True
            sys.stdout.write(f"Mesh admin server listening on {_server.dashboard_url}\n")
            sys.stdout.flush()
        return _server


def enable_dashboard(port: int = 8265, host: str = "127.0.0.1") -> AdminServer:
    """Serve the web dashboard (on the mesh admin server), as Monarch's
    ``enable_telemetry(TelemetryConfig(include_dashboard=True))`` does.

    It prints ``Monarch Dashboard: http://HOST:PORT/#token=TOKEN``: open that
    URL (the page keeps the token for its tab and takes it out of the address
    bar). When an admin server already runs in this process, the dashboard is
    on it instead, at its address (which is what is printed).

    Args:
        port: the port to listen on (0: any free one), unless a server runs already.
        host: the address to listen on, unless a server runs already.

    Returns:
        The server.

    Raises:
        OSError: the address cannot be bound.
    """
    global _server
    with _lock:
        if _server is None:
            _server = AdminServer(host, port)
        server = _server
    sys.stdout.write(f"Monarch Dashboard: {server.dashboard_url}\n")
    sys.stdout.flush()
    return server


def disable_admin() -> None:
    """Stop this process's mesh admin server, if one runs."""
    global _server
    with _lock:
        if _server is not None:
            _server.close()
            _server = None
