"""``monarch-tui``: a running job's hosts, processes and actors in a terminal,
refreshed live, with probes of every process and the stacks of any one.

It is a client of the mesh admin server (``enable_admin``): it reads the
server's JSON API over HTTP, so it runs anywhere the server can be reached,
and it never joins the job itself.

Keys (``?`` shows them in the UI), as Monarch's own TUI has them: ``j``/``k``
move, ``Tab`` expands or collapses the selected node, ``c`` collapses all,
``s`` shows or hides system processes and actors, ``h`` shows or hides stopped
ones (failed ones always show), ``d`` runs the diagnostics, ``p`` shows the
stacks of the selected process, ``q`` quits. Added here: ``Shift+Tab`` moves
between the tree and the detail pane, ``r`` refreshes at once.

A server that cannot be reached when ``monarch-tui`` starts ends it with a
message and exit status 1; one that goes away later (the job ended) is named
in the header and retried every refresh until ``q``.

Every request carries the job's admin token. Run by the job's user,
``monarch-tui`` needs nothing pasted: the server leaves a record of its URL
and token that only this user may read (``read_records("admin")``), and the
record for the address asked (or the newest one, when no address is given)
supplies the token. ``--token``/``$MONARCH_ADMIN_TOKEN`` or the job's secret
(``$MONARCH_JOB_SECRET``) serve from another machine.

Examples:
    In the job's script: ``enable_admin()`` prints ``Mesh admin server
    listening on http://127.0.0.1:1729/#token=...``; in another terminal::

        monarch-tui                                    # the newest job of this user
        monarch-tui --addr 127.0.0.1:1729
        monarch-tui --addr 127.0.0.1:1729 --diagnose   # JSON; exit 1 if unhealthy
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import ipaddress
import json
import os
import socket
import ssl
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.theme import Theme
from textual.widgets import Footer, Static, Tree
from textual.widgets.tree import TreeNode

from monarch_actor.extension import private_dir, read_records

from ._collect import summarize
from ._config import ADMIN_ADDR
from ._server import RECORD, admin_token, parse_addr

__all__ = ["AdminClient", "AdminError", "main", "tui_app"]

TOKEN_ENV = "MONARCH_ADMIN_TOKEN"
SECRET_ENV = "MONARCH_JOB_SECRET"
EXPAND_PROCS_UP_TO = 32  # a bigger job starts with its processes folded
SLOW_PROBE_MS = 500.0  # a probe this slow or slower is "slow" (Monarch's threshold)
REFRESH_MS = 2000  # Monarch's default refresh
THEMES = ("nord", "doom-nord-light")  # Monarch's --theme values
LANGS = ("en", "zh")  # Monarch's --lang values
DIAGNOSTICS_TIMEOUT = 60.0  # the server probes one process after another
STACKS_TIMEOUT = 60.0  # py-spy may take its time to attach

T = TypeVar("T")


class AdminError(Exception):
    """The mesh admin server could not be reached, refused the request, or
    answered with an error.

    Args:
        message: what went wrong and what to do about it.
        url: the URL asked for.
        status: the HTTP status, or ``None`` when no answer came at all.

    Attributes:
        url: the URL asked for.
        status: the HTTP status, or ``None`` when no answer came at all.
    """

    def __init__(self, message: str, *, url: str, status: int | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.status = status


class AdminClient:
    """Reads a mesh admin server's JSON API (what ``monarch-tui`` shows).

    Args:
        addr: the server, as ``HOST:PORT`` (what ``enable_admin`` prints after
            ``http://``) or as a URL ``http://HOST:PORT`` (a ``#token=...``
            fragment, as printed, gives the token).
        token: the job's admin token (``monarch_admin.admin_token()`` in the
            job gives it). ``None``: the one in the URL's fragment, else the
            one this user's job recorded for this server;
            ``""``: send none.
        timeout: how long one request may take, in seconds (diagnostics and
            stacks get longer: the server waits on every process).
        tls_ca: for an ``https://`` address (a TLS proxy in front of the
            server), the PEM file of the authority its certificate is checked
            against.
        tls_cert: with ``tls_key``, this client's certificate, for a proxy
            that asks for one.
        tls_key: the key of ``tls_cert``.

    Attributes:
        url: the server's base URL, such as ``http://127.0.0.1:1729``.
        ssl_context: the TLS settings of an ``https://`` address, else ``None``.
        token: the token sent as ``Authorization: Bearer``, or ``None``.
        token_from: where the token came from, or where it was looked for in
            vain, for the error a refusal raises.
        timeout: seconds one request may take.

    Raises:
        ValueError: ``addr`` is neither ``HOST:PORT`` nor an ``http(s)://`` URL.

    Examples:
        >>> client = AdminClient("127.0.0.1:1729")  # doctest: +SKIP
        >>> client.topology()["summary"]["actors"]  # doctest: +SKIP
        4
    """

    def __init__(
        self,
        addr: str,
        *,
        token: str | None = None,
        timeout: float = 10.0,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
    ) -> None:
        self.url = _base_url(addr)
        self.ssl_context = _ssl_context(self.url, tls_ca, tls_cert, tls_key)
        self.token_from = "--token" if token else "nowhere"
        if token is None:
            fragment = urllib.parse.parse_qs(urllib.parse.urlsplit(addr.strip()).fragment)
            if fragment.get("token"):
                token = fragment["token"][-1]
                self.token_from = "the URL's #token="
            else:
                token = _find_token(self.url)
                self.token_from = (
                    "this user's record of the job"
                    if token
                    else f"the records of this user's jobs in {_records_folder()} (none for "
                    f"{self.url})"
                )
        self.token = token or None
        self.timeout = timeout

    def get(
        self,
        path: str,
        query: dict[str, str] | None = None,
        *,
        timeout: float | None = None,
        method: str = "GET",
    ) -> Any:
        """One request to the API (``GET`` unless ``method`` says otherwise), decoded.

        Args:
            path: the endpoint, such as ``/v1/topology``.
            query: its query parameters.
            timeout: seconds to wait; the client's own by default.
            method: ``GET``, or ``POST`` for what makes processes work
                (``/v1/diagnostics``, ``/v1/stacks``).

        Returns:
            The decoded JSON answer.

        Raises:
            AdminError: the server cannot be reached, refuses the request (401:
                it needs the job's token), or answers with an error.
        """
        url = self.url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        request = urllib.request.Request(
            url,
            headers={"Accept": "application/json"},
            method=method,
            data=b"" if method == "POST" else None,
        )
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(
                request, timeout=timeout or self.timeout, context=self.ssl_context
            ) as answer:
                body = answer.read()
        except urllib.error.HTTPError as error:
            raise _http_error(self, url, error) from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise AdminError(
                f"cannot reach the mesh admin server at {self.url}: {reason}. Is the job "
                "running, and did it call enable_admin()? It prints 'Mesh admin server "
                "listening on http://HOST:PORT'; pass that HOST:PORT as --addr.",
                url=url,
            ) from None
        try:
            return json.loads(body)
        except ValueError:
            raise AdminError(
                f"{self.url} answered {path} with something other than JSON: is it a mesh "
                "admin server (enable_admin()) and not some other service?",
                url=url,
            ) from None

    def topology(self, *, events: bool = False) -> dict[str, Any]:
        """The job's hosts, processes and actors (``/v1/topology``).

        Args:
            events: include each actor's recent events.

        Returns:
            The topology, as ``monarch_admin.topology`` returns it.

        Raises:
            AdminError: as ``get`` does.
        """
        query = {"events": "1"} if events else {}
        answer: dict[str, Any] = self.get("/v1/topology", query)
        return answer

    def diagnostics(self) -> dict[str, Any]:
        """Probe every node: the admin server itself (a round trip to it),
        then every process and actor of the job (``/v1/diagnostics``).

        Returns:
            ``monarch_admin.diagnostics()``'s report, with the admin server's
            check first in ``checks`` and ``summary`` counting it, plus
            ``server``: this client's URL.

        Raises:
            AdminError: as ``get`` does (the server is the one thing that
                cannot fail a check: without it there is no report).
        """
        started = time.perf_counter()
        self.get("/v1")
        latency = round((time.perf_counter() - started) * 1000, 3)
        answer: dict[str, Any] = self.get(
            "/v1/diagnostics", timeout=max(self.timeout, DIAGNOSTICS_TIMEOUT), method="POST"
        )
        server = {
            "label": "admin server",
            "reference": self.url,
            "node": "admin_server",
            "phase": "admin_infra",
            "host": urllib.parse.urlsplit(self.url).hostname,
            "outcome": "slow" if latency >= SLOW_PROBE_MS else "pass",
            "latency_ms": latency,
            "error": None,
        }
        answer["checks"] = [server, *answer.get("checks", [])]
        answer["summary"] = summarize(answer["checks"])
        answer["server"] = self.url
        return answer

    def stacks(self, address: str) -> dict[str, Any]:
        """The Python stacks of one process (``/v1/stacks``).

        Args:
            address: the process's runtime address, as the topology names it.

        Returns:
            ``{"source": "py-spy" | "python", "text": ..., "note": ...}``, or
            ``{"error": ...}`` when the process did not answer.

        Raises:
            AdminError: as ``get`` does.
        """
        answer: dict[str, Any] = self.get(
            "/v1/stacks",
            {"address": address},
            timeout=max(self.timeout, STACKS_TIMEOUT),
            method="POST",
        )
        return answer


def _base_url(addr: str) -> str:
    text = addr.strip()
    if text.startswith(("http://", "https://")):
        parsed = urllib.parse.urlsplit(text)
        if not parsed.hostname:
            raise ValueError(f"the mesh admin address must be HOST:PORT or a URL, got {addr!r}")
        return f"{parsed.scheme}://{parsed.netloc}"
    if "://" in text:
        raise ValueError(
            f"the mesh admin server speaks http: give HOST:PORT or http://HOST:PORT, not {addr!r}"
        )
    host, port = parse_addr(text)
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def _ssl_context(
    url: str, ca: str | None, cert: str | None, key: str | None
) -> ssl.SSLContext | None:
    """The TLS settings for an ``https://`` server (behind a TLS proxy, say):
    ``ca`` to verify it (else the system's CAs), ``cert``/``key`` to show it
    a client certificate. ``None`` for ``http://``."""
    if not url.startswith("https://"):
        if ca or cert or key:
            raise ValueError(
                f"--tls-ca/--tls-cert/--tls-key need an https:// address, not {url} (the mesh "
                "admin server speaks plain HTTP; TLS is for a proxy in front of it)"
            )
        return None
    if key and not cert:
        raise ValueError("--tls-key needs --tls-cert (the client certificate it belongs to)")
    try:
        context = ssl.create_default_context(cafile=ca)
        if cert:
            context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as error:
        raise ValueError(f"cannot load the TLS files: {error}") from None
    return context


def _records_folder() -> str:
    try:
        return str(private_dir("jobs"))
    except OSError as error:  # PrivateFileError too: the folder is not this user's alone
        return f"this user's Monarch state folder ({error})"


def _local_names() -> set[str]:
    names = {"localhost"}
    with contextlib.suppress(OSError):
        names.update(n.lower() for n in (socket.gethostname(), socket.getfqdn()) if n)
    return names


def _is_local(host: str) -> bool:
    """Whether ``host`` names this machine: loopback, any address, or its name."""
    host = host.lower().strip("[]")
    if host in _local_names():
        return True
    with contextlib.suppress(ValueError):
        ip = ipaddress.ip_address(host)
        return ip.is_loopback or ip.is_unspecified
    return False


def _same_server(recorded: str, wanted: str) -> bool:
    """Whether a record's URL and the URL asked for name one server: the same
    host and port, or the same port on this machine by two of its names."""
    a, b = urllib.parse.urlsplit(recorded), urllib.parse.urlsplit(wanted)
    try:
        if a.port is None or a.port != b.port:
            return False
    except ValueError:  # a record with a malformed port
        return False
    host_a, host_b = (a.hostname or "").lower(), (b.hostname or "").lower()
    return host_a == host_b or (_is_local(host_a) and _is_local(host_b))


def _find_token(url: str) -> str | None:
    """The token this user's running job recorded for the mesh admin server
    at ``url`` (``read_records("admin")``), newest first; ``None`` when no
    live job of this user recorded that server.

    Args:
        url: the server's base URL, such as ``http://127.0.0.1:1729``.
    """
    for record in read_records(RECORD):
        token = record.get("token")
        if isinstance(token, str) and _same_server(str(record.get("url", "")), url):
            return token
    return None


def _newest_server() -> str | None:
    """The URL of the mesh admin server this user's job started last, or
    ``None`` when no live job of this user runs one."""
    for record in read_records(RECORD):
        if isinstance(record.get("url"), str):
            return str(record["url"])
    return None


def _http_error(client: AdminClient, url: str, error: urllib.error.HTTPError) -> AdminError:
    base = client.url
    if error.code == 401:
        if client.token:
            how = f"the token sent ({client.token_from}) is not this job's: a stale record?"
        else:
            how = (
                f"none was found: monarch-tui looked at --token, ${TOKEN_ENV}, "
                f"{client.token_from}, and ${SECRET_ENV}"
            )
        return AdminError(
            f"the mesh admin server at {base} refused the request (HTTP 401): it needs the "
            f"job's admin token, and {how}. Run monarch-tui as the job's user on the job's "
            "machine, or pass --token TOKEN (the part after '#token=' of the URL the job "
            "printed; monarch_admin.admin_token() in the job gives it).",
            url=url,
            status=401,
        )
    detail = ""
    with contextlib.suppress(Exception):  # the body is only a courtesy: the status says enough
        detail = str(json.loads(error.read()).get("error", ""))
    return AdminError(
        f"the mesh admin server at {base} answered {urllib.parse.urlsplit(url).path} with "
        f"HTTP {error.code}{': ' + detail if detail else ''}",
        url=url,
        status=error.code,
    )


async def _off_loop(fn: Callable[[], T]) -> T:
    """Run a blocking call in a daemon thread: quitting never waits for a
    request to a server that stopped answering."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def deliver(result: T | None, error: BaseException | None) -> None:
        if done.cancelled():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]

    def work() -> None:
        try:
            result = fn()
        except BaseException as error:
            loop.call_soon_threadsafe(deliver, None, error)
        else:
            loop.call_soon_threadsafe(deliver, result, None)

    threading.Thread(target=work, name="monarch-tui-fetch", daemon=True).start()
    return await done


# -- what the tree and the panes show -----------------------------------------------------------

ACTOR_STYLE = {"idle": "green", "busy": "yellow", "failed": "bold red", "stopped": "dim"}
PROC_STYLE = {
    "running": "green",
    "starting": "yellow",
    "stopped": "dim",
    "exited": "bold red",
    "failed": "bold red",
}


def _clock(at: float | None) -> str:
    if not at:
        return "-"
    seconds = time.localtime(at)
    return time.strftime("%H:%M:%S", seconds) + f".{int(at % 1 * 1000):03d}"


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 120:
        return f"{seconds:.2f} s"
    minutes, rest = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{rest:02d}s" if hours else f"{minutes}m{rest:02d}s"


def _count(n: Any, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _proc_name(proc: dict[str, Any]) -> str:
    if proc.get("name"):
        return str(proc["name"])
    if proc.get("mesh") is not None:
        return f"{proc['mesh']}[{proc.get('rank')}]"
    return str(proc.get("address") or "?")


def _proc_status(proc: dict[str, Any]) -> str:
    if "error" in proc:
        return "no answer"
    return str(proc.get("status") or "running")


def _is_system_proc(proc: dict[str, Any]) -> bool:
    # the controller and host workers run the job; the procs the script spawned do its work
    return proc.get("kind") not in (None, "proc")


def _is_system_actor(actor: dict[str, Any]) -> bool:
    return str(actor.get("name", "")).startswith("_")


def _actor_label(actor: dict[str, Any]) -> Text:
    status = str(actor.get("status", "?"))
    label = Text()
    label.append(f"{actor.get('name')}[{actor.get('rank')}]", style="bold")
    label.append(f" {actor.get('class', '')}", style="cyan")
    label.append("  ")
    if status == "busy" and actor.get("current"):
        label.append(
            f"busy {actor['current']} {_duration(float(actor.get('current_for', 0)))}",
            style=ACTOR_STYLE["busy"],
        )
    else:
        shown = status.upper() if status == "failed" else status
        label.append(shown, style=ACTOR_STYLE.get(status, ""))
    label.append(f"  {actor.get('messages', 0)} msgs", style="dim")
    if actor.get("failures"):
        label.append(f"  {actor['failures']} failed", style="red")
    if actor.get("mailbox"):
        label.append(f"  {actor['mailbox']} queued", style="yellow")
    return label


def _proc_label(proc: dict[str, Any]) -> Text:
    status = _proc_status(proc)
    label = Text()
    label.append(_proc_name(proc), style="bold")
    if proc.get("pid"):
        label.append(f"  pid {proc['pid']}", style="dim")
    label.append("  ")
    label.append(status, style=PROC_STYLE.get(status, "bold red"))
    actors = proc.get("actors", [])
    if actors:
        label.append(f"  {_count(len(actors), 'actor')}", style="dim")
    failed = sum(actor.get("status") == "failed" for actor in actors)
    if failed:
        label.append(f"  {failed} failed", style="bold red")
    return label


def _host_label(host: dict[str, Any]) -> Text:
    procs = host.get("procs", [])
    actors = [actor for proc in procs for actor in proc.get("actors", [])]
    bad = sum(_proc_status(proc) in ("no answer", "exited", "failed") for proc in procs)
    bad += sum(actor.get("status") == "failed" for actor in actors)
    label = Text()
    label.append(str(host.get("host")), style="bold magenta")
    label.append(f"  {_count(len(procs), 'proc')}  {_count(len(actors), 'actor')}", style="dim")
    if bad:
        label.append(f"  {bad} failed", style="bold red")
    return label


def _fields(rows: Sequence[tuple[str, RenderableType]]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    for name, value in rows:
        table.add_row(name, value)
    return table


def _styled(value: str, style: str | None) -> Text:
    return Text(value, style=style or "")


def _actor_detail(actor: dict[str, Any], proc: dict[str, Any]) -> RenderableType:
    status = str(actor.get("status", "?"))
    point = actor.get("point") or {}
    where = ", ".join(f"{dim}={value}" for dim, value in point.items())
    current = actor.get("current") or ""
    rows: list[tuple[str, RenderableType]] = [
        ("actor", Text(f"{actor.get('name')}[{actor.get('rank')}]", style="bold")),
        ("class", Text(str(actor.get("class", "")))),
        ("rank", Text(f"{actor.get('rank')}" + (f"  ({where})" if where else ""))),
        ("status", _styled(status, ACTOR_STYLE.get(status))),
    ]
    if actor.get("reason"):
        rows.append(("reason", Text(str(actor["reason"]).rstrip(), style="red")))
    rows += [
        ("messages", Text(str(actor.get("messages", 0)))),
        (
            "failures",
            _styled(str(actor.get("failures", 0)), "red" if actor.get("failures") else ""),
        ),
        ("busy", Text(_duration(float(actor.get("busy_seconds", 0.0))))),
        (
            "mailbox",
            _styled(str(actor.get("mailbox", 0)), "yellow" if actor.get("mailbox") else ""),
        ),
        ("last handler", Text(str(actor.get("last_handler") or "-"))),
        (
            "running now",
            _styled(
                f"{current} for {_duration(float(actor.get('current_for', 0.0)))}"
                if current
                else "nothing (idle)",
                "yellow" if current else "dim",
            ),
        ),
        ("started", Text(_clock(actor.get("started_at")))),
        ("process", Text(f"{_proc_name(proc)}  pid {proc.get('pid')}  on {proc.get('host')}")),
        ("key", Text(str(actor.get("key", "")), style="dim")),
    ]
    parts: list[RenderableType] = [_fields(rows), Text()]
    recorded = actor.get("events")
    if recorded is None:
        parts.append(Text("recent events: loading…", style="dim"))
    elif not recorded:
        parts.append(Text("recent events: none", style="dim"))
    else:
        table = Table(title="recent events", title_justify="left", expand=True, box=None)
        table.add_column("at", no_wrap=True)
        table.add_column("event", no_wrap=True)
        table.add_column("detail")
        table.add_column("took", justify="right", no_wrap=True)
        for event in reversed(recorded[-20:]):
            style = "red" if event.get("event") == "failed" else None
            seconds = float(event.get("seconds") or 0.0)
            table.add_row(
                _clock(event.get("at")),
                Text(str(event.get("event", "")), style=style or ""),
                Text(str(event.get("detail", ""))),
                _duration(seconds) if seconds else "",
                style=style,
            )
        parts.append(table)
    return Group(*parts)


def _proc_detail(proc: dict[str, Any]) -> RenderableType:
    status = _proc_status(proc)
    started = proc.get("started_at")
    actors = proc.get("actors", [])
    counts: dict[str, int] = {}
    for actor in actors:
        counts[actor.get("status", "?")] = counts.get(actor.get("status", "?"), 0) + 1
    mesh = proc.get("mesh")
    rows: list[tuple[str, RenderableType]] = [
        ("process", Text(_proc_name(proc), style="bold")),
        ("status", _styled(status, PROC_STYLE.get(status, "bold red"))),
    ]
    if proc.get("error"):
        rows.append(("error", Text(str(proc["error"]), style="red")))
    rows += [
        ("pid", Text(str(proc.get("pid") or "-"))),
        ("address", Text(str(proc.get("address") or "-"))),
        ("host", Text(str(proc.get("host") or "-"))),
        (
            "mesh / rank",
            Text(f"{mesh}  rank {proc.get('rank')}" if mesh is not None else "- (the controller)"),
        ),
        ("kind", Text(str(proc.get("kind") or "proc"))),
        (
            "up since",
            Text(f"{_clock(started)}  ({_duration(time.time() - started)})" if started else "-"),
        ),
        (
            "actors",
            Text(
                f"{len(actors)}"
                + (
                    "  (" + ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) + ")"
                    if counts
                    else ""
                )
            ),
        ),
        ("messages", Text(str(sum(actor.get("messages", 0) for actor in actors)))),
    ]
    meshes = proc.get("proc_meshes") or []
    if meshes:
        rows.append(
            (
                "started meshes",
                Text(", ".join(f"{m.get('name')} ({m.get('size')} procs)" for m in meshes)),
            )
        )
    if proc.get("owner"):
        rows.append(("started by", Text(str(proc["owner"]), style="dim")))
    return _fields(rows)


def _host_detail(host: dict[str, Any]) -> RenderableType:
    procs = host.get("procs", [])
    actors = [actor for proc in procs for actor in proc.get("actors", [])]

    def tally(states: Sequence[str]) -> str:
        counts: dict[str, int] = {}
        for state in states:
            counts[state] = counts.get(state, 0) + 1
        return ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "none"

    return _fields(
        [
            ("host", Text(str(host.get("host")), style="bold magenta")),
            ("processes", Text(f"{len(procs)}  ({tally([_proc_status(p) for p in procs])})")),
            ("actors", Text(f"{len(actors)}  ({tally([a.get('status', '?') for a in actors])})")),
            ("messages", Text(str(sum(actor.get("messages", 0) for actor in actors)))),
            ("failures", Text(str(sum(actor.get("failures", 0) for actor in actors)))),
            ("mailboxes", Text(f"{sum(actor.get('mailbox', 0) for actor in actors)} queued")),
        ]
    )


def _job_detail(found: dict[str, Any], url: str) -> RenderableType:
    summary = found.get("summary", {})
    rows: list[tuple[str, RenderableType]] = [
        ("server", Text(url)),
        ("controller", Text(str(found.get("controller", "-")))),
    ]
    for name in ("hosts", "procs", "actors", "failed_actors", "failed_procs", "messages"):
        value = summary.get(name, 0)
        style = "bold red" if name.startswith("failed") and value else None
        rows.append((name.replace("_", " "), _styled(str(value), style)))
    return _fields(rows)


LABELS: dict[str, dict[str, str]] = {
    "en": {
        "topology": "topology",
        "detail": "detail",
        "diagnostics": "diagnostics",
        "Diagnostics": "Diagnostics",
        "processes answered": "processes answered",
        "checks passed": "checks passed",
        "admin_infra": "Admin infrastructure",
        "mesh": "Mesh",
        "healthy": "healthy",
        "failing": "failing",
        "probing": "probing every node of the job…",
        "failed actors": "Failed actors (from the topology):",
        "diag keys": "Esc closes · d or r runs again · j/k scroll · q quits",
        "updated": "updated",
        "every": "every",
        "help": "? help",
    },
    "zh": {  # Monarch's 简体中文 labels where it has them
        "topology": "拓扑",
        "detail": "详情",
        "diagnostics": "诊断",
        "Diagnostics": "诊断",
        "processes answered": "个进程已应答",
        "checks passed": "项检查通过",
        "admin_infra": "管理",
        "mesh": "网格",
        "healthy": "健康",
        "failing": "失败",
        "probing": "运行中…",
        "failed actors": "失败执行器:",
        "diag keys": "Esc: 返回拓扑 · d/r: 重新运行 · j/k: 滚动 · q: 退出",
        "updated": "更新于",
        "every": "每",
        "help": "?: 帮助",
    },
}
OUTCOME_STYLE = {"pass": "green", "slow": "yellow", "fail": "bold red"}


def _diagnostics_view(
    report: dict[str, Any], failed_actors: list[str], lang: str = "en"
) -> RenderableType:
    words = LABELS.get(lang, LABELS["en"])
    nodes = report.get("nodes", [])
    checks = report.get("checks", [])
    summary = report.get("summary") or summarize(checks)
    good = sum(bool(node.get("ok")) for node in nodes)
    headline = Text()
    headline.append(words["Diagnostics"], style="bold")
    headline.append(
        f"  {summary['passed']}/{summary['total']} {words['checks passed']}",
        style="green" if summary["healthy"] else "bold red",
    )
    headline.append(
        f"  ·  {good}/{len(nodes)} {words['processes answered']}",
        style="green" if good == len(nodes) else "bold red",
    )
    headline.append(f"  (at {_clock(report.get('at'))})", style="dim")
    parts: list[RenderableType] = [headline]
    for phase in ("admin_infra", "mesh"):
        ok, total = summary[f"{phase}_passed"], summary[f"{phase}_total"]
        state = words["healthy"] if ok == total else words["failing"]
        title = Text()
        title.append(f"\n{words[phase]}", style="bold")
        title.append(f"  {ok}/{total} {state}", style="green" if ok == total else "bold red")
        parts.append(title)
        table = Table(expand=True)
        table.add_column("probe", no_wrap=True)
        table.add_column("node", no_wrap=True)
        table.add_column("check", no_wrap=True)
        table.add_column("host", no_wrap=True)
        table.add_column("latency", justify="right", no_wrap=True)
        table.add_column("note")
        for check in checks:
            if check.get("phase") != phase:
                continue
            outcome = str(check.get("outcome", "fail"))
            latency = check.get("latency_ms")
            where = check.get("process")
            reason = [line.strip() for line in str(check.get("reason") or "").splitlines()]
            reason = [line for line in reason if line]
            note = check.get("error") or (
                f"failed: {reason[-1] if reason else ''}" if check.get("status") == "failed" else ""
            )
            table.add_row(
                Text(outcome.upper(), style=OUTCOME_STYLE.get(outcome, "bold red")),
                Text(str(check.get("node", ""))),
                Text(str(check.get("label", "?")) + (f" on {where}" if where else "")),
                Text(str(check.get("host") or "-")),
                Text("-" if latency is None else f"{float(latency):.2f} ms"),
                Text(str(note), style="red" if note else ""),
                style="red" if outcome == "fail" else None,
            )
        parts.append(table)
    if failed_actors:
        parts.append(Text("\n" + words["failed actors"], style="bold red"))
        parts.extend(Text("  " + line, style="red") for line in failed_actors)
    parts.append(Text("\n" + words["diag keys"], style="dim"))
    return Group(*parts)


def _stacks_view(proc: dict[str, Any], answer: dict[str, Any] | None, error: str | None) -> Text:
    text = Text()
    text.append(f"Stacks of {_proc_name(proc)}", style="bold")
    text.append(f"  pid {proc.get('pid')} on {proc.get('host')}", style="dim")
    if answer is not None and answer.get("source") == "py-spy":
        text.append("  (py-spy)\n\n", style="green")
        text.append(str(answer.get("text", "")))
    elif answer is not None and "error" not in answer:
        text.append("\n\n")
        note = answer.get("note") or "py-spy did not answer"
        text.append(f"unavailable: {note}", style="bold red")
        text.append(
            "\nshowing the interpreter's own view instead: Python frames of each thread, "
            "no native frames, no GIL owner\n\n",
            style="yellow",
        )
        text.append(str(answer.get("text", "")))
    else:
        problem = error or (answer or {}).get("error") or "no answer"
        text.append("\n\n")
        text.append(f"unavailable: {problem}", style="bold red")
    text.append("\n\nEsc closes · p fetches again · j/k scroll · q quits", style="dim")
    return text


HELP = [
    ("j / ↓", "move down"),
    ("k / ↑", "move up"),
    ("g / Home, G / End", "first / last node"),
    ("PgDn, PgUp", "a page down / up"),
    ("Tab (Enter, Space)", "expand or collapse the selected node"),
    ("c", "collapse every node"),
    ("s", "show or hide system processes (the controller, host workers) and actors"),
    ("h", "show or hide stopped actors and processes (failed ones always show)"),
    ("d", "diagnostics: a round trip to every process, with its latency"),
    ("p", "stacks of the selected process (of an actor's process)"),
    ("r", "refresh now"),
    ("Shift+Tab", "move between the tree and the detail pane (j/k then scroll it)"),
    ("?", "this help"),
    ("Esc", "close an overlay"),
    ("q / Ctrl+C", "quit"),
]


# -- the screens --------------------------------------------------------------------------------


class _Overlay(ModalScreen[None]):
    """A scrollable overlay over the tree; Esc closes it, q quits."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "close"),
        Binding("j,down", "scroll(1)", "scroll", show=False),
        Binding("k,up", "scroll(-1)", "scroll", show=False),
        Binding("q", "app.quit_tui", "quit"),
    ]
    DEFAULT_CSS = """
    _Overlay { align: center middle; }
    _Overlay > VerticalScroll {
        width: 94%; height: 90%; border: thick $accent; background: $surface; padding: 0 1;
    }
    """

    def __init__(self, title: str) -> None:
        super().__init__()
        self.title_text = title
        self.body = Static(Text("…", style="dim"), id="overlay-body")

    def compose(self) -> ComposeResult:
        scroll = VerticalScroll(self.body, id="overlay")
        scroll.border_title = self.title_text
        yield scroll

    def action_close(self) -> None:
        self.dismiss(None)

    def action_scroll(self, lines: int) -> None:
        scroll = self.query_one("#overlay", VerticalScroll)
        scroll.scroll_relative(y=lines, animate=False)


class _Diagnostics(_Overlay):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("d,r", "run", "run again"),
    ]

    def __init__(self, client: AdminClient, failed_actors: list[str], lang: str = "en") -> None:
        super().__init__(LABELS[lang]["diagnostics"])
        self.lang = lang
        self.client = client
        self.failed_actors = failed_actors
        self.report: dict[str, Any] | None = None

    def on_mount(self) -> None:
        self.action_run()

    def action_run(self) -> None:
        self.body.update(Text(LABELS[self.lang]["probing"], style="dim"))
        self.run_worker(self._probe(), exclusive=True, group="diagnostics")

    async def _probe(self) -> None:
        try:
            report = await _off_loop(self.client.diagnostics)
        except AdminError as error:
            self.body.update(Text(f"unavailable: {error}", style="bold red"))
            return
        self.report = report
        self.body.update(_diagnostics_view(report, self.failed_actors, self.lang))


class _Stacks(_Overlay):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("p", "run", "fetch again"),
    ]

    def __init__(self, client: AdminClient, proc: dict[str, Any]) -> None:
        super().__init__(f"stacks · {_proc_name(proc)}")
        self.client = client
        self.proc = proc
        self.answer: dict[str, Any] | None = None

    def on_mount(self) -> None:
        self.action_run()

    def action_run(self) -> None:
        status = _proc_status(self.proc)
        if status != "running" or not self.proc.get("address"):
            problem = f"the process is {status}: it has no stacks to show"
            self.body.update(_stacks_view(self.proc, None, problem))
            return
        self.body.update(Text(f"asking {_proc_name(self.proc)} for its stacks…", style="dim"))
        self.run_worker(self._fetch(), exclusive=True, group="stacks")

    async def _fetch(self) -> None:
        address = str(self.proc["address"])
        try:
            answer = await _off_loop(lambda: self.client.stacks(address))
        except AdminError as error:
            self.body.update(_stacks_view(self.proc, None, str(error)))
            return
        self.answer = answer
        self.body.update(_stacks_view(self.proc, answer, None))


class _Help(ModalScreen[None]):
    DEFAULT_CSS = """
    _Help { align: center middle; }
    _Help > Static { width: auto; height: auto; border: thick $accent; background: $surface;
                     padding: 1 2; }
    """

    def compose(self) -> ComposeResult:
        table = Table.grid(padding=(0, 3))
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column()
        for keys, what in HELP:
            table.add_row(keys, what)
        notes = Text(
            "\nBadges: idle (green), busy <handler> <for how long> (yellow), FAILED (red), "
            "stopped (grey);\nN msgs = messages handled, N queued = mailbox depth.\n"
            "A server that stops answering is named in the header and retried until q.\n"
            "Any key closes this help.",
            style="dim",
        )
        help_text = Static(Group(Text("monarch-tui keys\n", style="bold"), table, notes))
        help_text.border_title = "help"
        yield help_text

    def on_key(self, event: events.Key) -> None:
        event.stop()
        if event.key in ("q", "ctrl+c"):
            self.app.exit(0)
        else:
            self.dismiss(None)


class _Topology(Screen[None]):
    """The tree of hosts, processes and actors beside the selected node's detail."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j,down", "move(1)", "down", show=False),
        Binding("k,up", "move(-1)", "up", show=False),
        Binding("g,home", "edge(0)", "top", show=False),
        Binding("G,end", "edge(1)", "bottom", show=False),
        Binding("pagedown,ctrl+d", "page(1)", "page down", show=False),
        Binding("pageup,ctrl+u", "page(-1)", "page up", show=False),
        Binding("tab", "toggle_node", "expand"),
        Binding("shift+tab", "switch_pane", "pane", show=False),
        Binding("c", "collapse_all", "collapse"),
        Binding("s", "toggle_system", "system"),
        Binding("h", "toggle_stopped", "stopped"),
        Binding("d", "diagnostics", "diagnostics"),
        Binding("p", "stacks", "stacks"),
        Binding("r", "refresh_now", "refresh", show=False),
        Binding("question_mark", "help", "help"),
        Binding("q", "app.quit_tui", "quit"),
    ]
    DEFAULT_CSS = """
    #header { height: auto; padding: 0 1; background: $panel; }
    #panes { height: 1fr; }
    #tree { width: 2fr; border: round $primary-darken-2; }
    #detail-pane { width: 3fr; border: round $primary-darken-2; padding: 0 1; }
    #tree:focus, #detail-pane:focus { border: round $accent; }
    """

    def compose(self) -> ComposeResult:
        yield Static(id="header")
        tree: Tree[str] = Tree("job", data="job", id="tree")
        words = LABELS[self.tui.lang]
        tree.border_title = words["topology"]
        tree.show_root = True
        tree.guide_depth = 3
        detail = VerticalScroll(Static(id="detail"), id="detail-pane")
        detail.border_title = words["detail"]
        with Horizontal(id="panes"):
            yield tree
            yield detail
        yield Footer()

    @property
    def tui(self) -> _TUI:
        app = self.app
        assert isinstance(app, _TUI)
        return app

    def on_mount(self) -> None:
        self.query_one("#tree", Tree).focus()
        self.tui.show()

    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted[str]) -> None:
        self.tui.highlighted(event.node.data)

    def on_tree_node_expanded(self, event: Tree.NodeExpanded[str]) -> None:
        if event.node.data is not None:
            self.tui.expanded[event.node.data] = True

    def on_tree_node_collapsed(self, event: Tree.NodeCollapsed[str]) -> None:
        if event.node.data is not None:
            self.tui.expanded[event.node.data] = False

    def _tree(self) -> Tree[str]:
        return self.query_one("#tree", Tree)

    def action_move(self, step: int) -> None:
        if self.focused is self.query_one("#detail-pane"):
            self.query_one("#detail-pane", VerticalScroll).scroll_relative(y=step, animate=False)
        elif step > 0:
            self._tree().action_cursor_down()
        else:
            self._tree().action_cursor_up()

    def action_edge(self, end: int) -> None:
        if end:
            self._tree().action_scroll_end()
        else:
            self._tree().action_scroll_home()

    def action_page(self, step: int) -> None:
        if step > 0:
            self._tree().action_page_down()
        else:
            self._tree().action_page_up()

    def action_toggle_node(self) -> None:
        tree = self._tree()
        node = tree.cursor_node
        if node is not None and node.allow_expand and node.children:
            node.toggle()

    def action_switch_pane(self) -> None:
        pane = self.query_one("#detail-pane")
        (self._tree() if self.focused is pane else pane).focus()

    def action_collapse_all(self) -> None:
        tree = self._tree()
        for node in _walk(tree.root):
            if node is not tree.root and node.data is not None:
                self.tui.expanded[node.data] = False
                node.collapse()
        tree.move_cursor(tree.root)

    def action_toggle_system(self) -> None:
        self.tui.show_system = not self.tui.show_system
        self.tui.show()

    def action_toggle_stopped(self) -> None:
        self.tui.show_stopped = not self.tui.show_stopped
        self.tui.show()

    def action_diagnostics(self) -> None:
        self.app.push_screen(
            _Diagnostics(self.tui.client, self.tui.failed_actors(), self.tui.lang)
        )

    def action_stacks(self) -> None:
        proc = self.tui.selected_proc()
        if proc is None:
            self.notify("select a process or an actor first: p shows its process's stacks")
            return
        self.app.push_screen(_Stacks(self.tui.client, proc))

    def action_refresh_now(self) -> None:
        self.tui.wake.set()

    def action_help(self) -> None:
        self.app.push_screen(_Help())


def _walk(node: TreeNode[str]) -> list[TreeNode[str]]:
    found = [node]
    for child in node.children:
        found.extend(_walk(child))
    return found


_Shape = tuple[str, Text, list[Any]]  # (id, label, children: list[_Shape])


# Monarch's light theme, on nord's colours
DOOM_NORD_LIGHT = Theme(
    name="doom-nord-light",
    primary="#3B6EA8",
    secondary="#5272AF",
    accent="#97365B",
    warning="#9A7500",
    error="#99324B",
    success="#4F894C",
    foreground="#3B4252",
    background="#E5E9F0",
    surface="#ECEFF4",
    panel="#D8DEE9",
    dark=False,
)


class _TUI(App[int]):
    """``monarch-tui``'s application: fetches the topology every refresh and
    keeps the tree in step with it (expansion and cursor survive a refresh)."""

    TITLE = "monarch-tui"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+c", "quit_tui", "quit", show=False, priority=True),
    ]

    def __init__(
        self,
        client: AdminClient,
        *,
        refresh_ms: int,
        first: dict[str, Any] | None,
        theme: str = "nord",
        lang: str = "en",
    ) -> None:
        super().__init__()
        self.register_theme(DOOM_NORD_LIGHT)
        self.theme = theme
        self.lang = lang
        self.client = client
        self.refresh_s = refresh_ms / 1000.0
        self.found: dict[str, Any] | None = first
        self.error: str | None = None
        self.updated_at = time.time() if first is not None else 0.0
        self.refreshes = 0
        self.show_system = False
        self.show_stopped = False
        self.expanded: dict[str, bool] = {}
        self.selected = "job"
        self.pinned: str | None = None
        self.items: dict[str, tuple[str, dict[str, Any], dict[str, Any] | None]] = {}
        self.hidden = 0
        self.wake = asyncio.Event()

    def on_mount(self) -> None:
        self.push_screen(_Topology())
        self.run_worker(self._poll(), exclusive=True, group="poll")

    def action_quit_tui(self) -> None:
        self.exit(0)

    async def _poll(self) -> None:
        while True:
            fetch = functools.partial(
                self.client.topology, events=self.selected.startswith("actor:")
            )
            try:
                found = await _off_loop(fetch)
            except AdminError as error:
                self.error = str(error)
            else:
                self.found, self.error, self.updated_at = found, None, time.time()
            self.refreshes += 1
            self.show()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), self.refresh_s)
            self.wake.clear()

    # -- keeping the tree in step -----------------------------------------------------------

    def _main(self) -> _Topology | None:
        for screen in self.screen_stack:
            if isinstance(screen, _Topology):
                return screen
        return None

    def _shape(self) -> list[_Shape]:
        """What the tree should show now, with the filters applied."""
        self.items = {}
        self.hidden = 0
        if self.found is None:
            return []
        hosts = self.found.get("hosts", [])
        expand_procs = sum(len(host.get("procs", [])) for host in hosts) <= EXPAND_PROCS_UP_TO
        shapes: list[_Shape] = []
        for host in hosts:
            host_id = f"host:{host.get('host')}"
            self.items[host_id] = ("host", host, None)
            self.expanded.setdefault(host_id, True)
            procs: list[_Shape] = []
            for proc in host.get("procs", []):
                proc_id = "proc:" + str(
                    proc.get("address") or f"{proc.get('mesh_id')}/{proc.get('rank')}"
                )
                actors: list[_Shape] = []
                for actor in proc.get("actors", []):
                    status = actor.get("status")
                    if status != "failed" and (
                        (not self.show_system and _is_system_actor(actor))
                        or (not self.show_stopped and status == "stopped")
                    ):
                        self.hidden += 1
                        continue
                    actor_id = f"actor:{proc_id}:{actor.get('key')}:{actor.get('rank')}"
                    self.items[actor_id] = ("actor", actor, proc)
                    actors.append((actor_id, _actor_label(actor), []))
                status = _proc_status(proc)
                if not actors and (
                    (not self.show_system and _is_system_proc(proc) and status == "running")
                    or (not self.show_stopped and status == "stopped")
                ):
                    self.hidden += 1
                    continue
                self.items[proc_id] = ("proc", proc, None)
                self.expanded.setdefault(proc_id, expand_procs)
                procs.append((proc_id, _proc_label(proc), actors))
            shapes.append((host_id, _host_label(host), procs))
        return shapes

    def show(self) -> None:
        """Bring the header, the tree and the detail pane up to date."""
        screen = self._main()
        if screen is None or not screen.is_mounted:
            return
        tree = screen.query_one("#tree", Tree)
        shapes = self._shape()
        tree.root.set_label(self._root_label())
        if self._sync(tree.root, shapes):
            self.pinned = self.selected
            self.call_after_refresh(self._restore_cursor)
        tree.root.expand()
        screen.query_one("#header", Static).update(self._header())
        self._show_detail()

    def _sync(self, parent: TreeNode[str], wanted: list[_Shape]) -> bool:
        """Make ``parent``'s children what ``wanted`` says; True if any node came or went."""
        if [child.data for child in parent.children] == [shape[0] for shape in wanted]:
            changed = False
            for child, (_, label, children) in zip(parent.children, wanted, strict=True):
                child.set_label(label)
                child.allow_expand = bool(children)
                changed = self._sync(child, children) or changed
            return changed
        parent.remove_children()
        for shape in wanted:
            self._add(parent, shape)
        return True

    def _add(self, parent: TreeNode[str], shape: _Shape) -> None:
        node_id, label, children = shape
        node = parent.add(
            label,
            data=node_id,
            expand=self.expanded.get(node_id, False),
            allow_expand=bool(children),
        )
        for child in children:
            self._add(node, child)

    def _restore_cursor(self) -> None:
        screen = self._main()
        wanted, self.pinned = self.pinned, None
        if screen is None or wanted is None:
            return
        tree = screen.query_one("#tree", Tree)
        for node in _walk(tree.root):
            if node.data == wanted:
                tree.move_cursor(node)
                self.selected = wanted
                break
        self._show_detail()

    def highlighted(self, node_id: str | None) -> None:
        """The tree's cursor moved to ``node_id``."""
        if node_id is None or (self.pinned is not None and node_id != self.pinned):
            return  # a rebuild moved the cursor: _restore_cursor puts it back
        before = self.selected
        self.selected = node_id
        self._show_detail()
        item = self.items.get(node_id)
        if (
            node_id != before
            and item is not None
            and item[0] == "actor"
            and "events" not in item[1]
        ):
            self.wake.set()  # the detail pane shows events: fetch them now

    # -- header and detail ------------------------------------------------------------------

    def _root_label(self) -> Text:
        label = Text("job", style="bold")
        label.append(f"  {self.client.url}", style="dim")
        return label

    def _header(self) -> Text:
        text = Text()
        text.append("monarch-tui", style="bold")
        text.append(f"  {self.client.url}")
        if self.found is not None:
            summary = self.found.get("summary", {})
            # the summary's keys are plural ("hosts"); the words singular or plural by count
            counts = [
                _count(summary.get(f"{name}s", 0), name)
                for name in ("host", "proc", "actor", "message")
            ]
            text.append("  ·  " + " · ".join(counts))
            failed = int(summary.get("failed_actors", 0)) + int(summary.get("failed_procs", 0))
            if failed:
                text.append(f" · {failed} failed", style="bold red")
        text.append("\n")
        if self.error is not None:
            text.append(
                f"ERROR: {self.error} Retrying every {self.refresh_s:g} s (q quits).",
                style="bold red",
            )
            return text
        words = LABELS[self.lang]
        text.append(
            f"{words['updated']} {_clock(self.updated_at)} · {words['every']} {self.refresh_s:g} s",
            style="dim",
        )
        text.append(
            f" · system {'shown' if self.show_system else 'hidden'} (s)"
            f" · stopped {'shown' if self.show_stopped else 'hidden'} (h)",
            style="dim",
        )
        if self.hidden:
            text.append(f" · {self.hidden} hidden", style="dim")
        text.append(f" · {words['help']}", style="dim")
        return text

    def _show_detail(self) -> None:
        screen = self._main()
        if screen is None or not screen.is_mounted:
            return
        screen.query_one("#detail", Static).update(self.detail())

    def detail(self) -> RenderableType:
        """What the detail pane shows for the selected node."""
        if self.found is None:
            return Text("no topology yet", style="dim")
        item = self.items.get(self.selected)
        if item is None:
            return _job_detail(self.found, self.client.url)
        kind, data, proc = item
        if kind == "actor" and proc is not None:
            return _actor_detail(data, proc)
        if kind == "proc":
            return _proc_detail(data)
        return _host_detail(data)

    def selected_proc(self) -> dict[str, Any] | None:
        """The selected process, or the selected actor's."""
        item = self.items.get(self.selected)
        if item is None:
            return None
        kind, data, proc = item
        if kind == "actor":
            return proc
        return data if kind == "proc" else None

    def failed_actors(self) -> list[str]:
        """One line per failed actor in the latest topology."""
        lines = []
        for host in (self.found or {}).get("hosts", []):
            for proc in host.get("procs", []):
                for actor in proc.get("actors", []):
                    if actor.get("status") == "failed":
                        reason = [
                            line.strip()
                            for line in str(actor.get("reason") or "").splitlines()
                            if line.strip()
                        ]
                        # the first line says what failed, the last (of a traceback) why
                        why = " … ".join(dict.fromkeys([reason[0], reason[-1]])) if reason else ""
                        lines.append(
                            f"{actor.get('name')}[{actor.get('rank')}] ({actor.get('class')}) "
                            f"on {_proc_name(proc)}: {why or 'failed'}"
                        )
        return lines


def tui_app(
    client: AdminClient,
    *,
    refresh_ms: int = REFRESH_MS,
    first: dict[str, Any] | None = None,
    theme: str = "nord",
    lang: str = "en",
) -> App[int]:
    """The ``monarch-tui`` application, to run (``.run()``) or drive in tests
    (``.run_test()``).

    Args:
        client: the mesh admin server to show.
        refresh_ms: how often to fetch the topology, in milliseconds.
        first: a topology already fetched, shown before the first refresh.
        theme: ``nord`` (dark) or ``doom-nord-light`` (light), as Monarch's.
        lang: ``en``, or ``zh`` (Simplified Chinese) for the panes' titles,
            the header and the diagnostics.

    Returns:
        A textual ``App``; its return value is the exit status.

    Raises:
        ValueError: ``refresh_ms`` is below 50, or ``theme``/``lang`` is not one of those.

    Examples:
        >>> app = tui_app(AdminClient("127.0.0.1:1729"))  # doctest: +SKIP
        >>> app.run()  # doctest: +SKIP
    """
    if refresh_ms < 50:
        raise ValueError(f"refresh_ms must be at least 50 (milliseconds), got {refresh_ms}")
    if theme not in THEMES:
        raise ValueError(f"theme must be one of {', '.join(THEMES)}, got {theme!r}")
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {', '.join(LANGS)}, got {lang!r}")
    return _TUI(client, refresh_ms=refresh_ms, first=first, theme=theme, lang=lang)


# -- the command --------------------------------------------------------------------------------

EPILOG = """\
examples:
  monarch-tui                                 this user's newest job on this machine
  monarch-tui --addr 127.0.0.1:1729            the job that printed 'Mesh admin server
                                              listening on http://127.0.0.1:1729/#token=...'
                                              (its token is found in the job's record)
  MONARCH_ADMIN_TOKEN=... monarch-tui --addr node7:1729
                                              a job on another machine: give its token
  MONARCH_JOB_SECRET=... monarch-tui --addr node7:1729
                                              or the job's secret, to derive the token from
  monarch-tui --addr 127.0.0.1:1729 --diagnose  probe every node (the admin server, every
                                              process and actor: pass, slow or fail), print
                                              JSON; exit 1 when a check fails or the server
                                              is away
  monarch-tui --refresh-ms 250                 refresh four times a second (default: 2000)
  monarch-tui --theme doom-nord-light --lang zh  light colours, Chinese labels
  monarch-tui --addr https://proxy:8443 --tls-ca ca.pem
                                              through a TLS proxy in front of the server

keys: j/k move, Tab expand/collapse, c collapse all, s system procs, h stopped actors,
d diagnostics, p stacks of the selected process, Shift+Tab switch pane, ? help, q quit.

exit status: 0 after q or a healthy --diagnose; 1 when the server cannot be reached
at start, refuses the token, or --diagnose finds a failure; 2 on bad arguments.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="monarch-tui",
        description="Show a running Monarch job (hosts, processes, actors) in the terminal, "
        "live, from its mesh admin server (started in the job by enable_admin()).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--addr",
        "-a",
        default=None,
        help="the mesh admin server, HOST:PORT or http://HOST:PORT (default: the "
        "mesh_admin_addr setting, $MONARCH_ADMIN_ADDR, when set; else the newest server "
        f"this user's jobs recorded; else {ADMIN_ADDR.default})",
    )
    parser.add_argument(
        "--refresh-ms",
        type=int,
        default=REFRESH_MS,
        metavar="MS",
        help=f"how often to refresh, in milliseconds (default {REFRESH_MS}; at least 50)",
    )
    parser.add_argument(
        "--theme",
        choices=THEMES,
        default="nord",
        help="colour theme: nord (dark) or doom-nord-light (light) (default nord)",
    )
    parser.add_argument(
        "--lang",
        choices=LANGS,
        default="en",
        help="display language: en, or zh (Simplified Chinese) (default en)",
    )
    parser.add_argument(
        "--tls-ca",
        metavar="PEM",
        help="for an https:// address (a TLS proxy in front of the server): the CA "
        "certificate to verify it with (default: the system's CAs)",
    )
    parser.add_argument(
        "--tls-cert", metavar="PEM", help="for an https:// address: a client certificate"
    )
    parser.add_argument(
        "--tls-key", metavar="PEM", help="for an https:// address: the client certificate's key"
    )
    parser.add_argument(
        "--token",
        default=None,
        help=f"the job's admin token (default ${TOKEN_ENV}, else the one this user's job "
        f"recorded for the server, else derived from ${SECRET_ENV} when it is set)",
    )
    parser.add_argument(
        "--diagnose",
        action="store_true",
        help="probe every node once (the admin server, every process and actor), print "
        "the report as JSON and exit (status 1 if a check failed or the server cannot be "
        "reached)",
    )
    return parser


def _token(given: str | None) -> str | None:
    """The token given, or ``None`` to let the client look for the job's
    record (``_client`` falls back on the job's secret after that)."""
    if given:
        return given
    if os.environ.get(TOKEN_ENV):
        return os.environ[TOKEN_ENV]
    return None


def _addr(given: str | None) -> str:
    if given:
        return given
    if ADMIN_ADDR.get() != ADMIN_ADDR.default:  # set: $MONARCH_ADMIN_ADDR or configure()
        return ADMIN_ADDR.get()
    return _newest_server() or ADMIN_ADDR.get()


def _client(addr: str, given: str | None, tls: dict[str, str | None] | None = None) -> AdminClient:
    tls = tls or {}
    client = AdminClient(
        addr,
        token=_token(given),
        tls_ca=tls.get("tls_ca"),
        tls_cert=tls.get("tls_cert"),
        tls_key=tls.get("tls_key"),
    )
    if client.token is None and os.environ.get(SECRET_ENV):
        client.token = admin_token()  # no record here: the job's secret says it
        client.token_from = f"the token derived from ${SECRET_ENV}"
    return client


def _diagnose(client: AdminClient) -> int:
    report = client.diagnostics()
    summary = report["summary"]
    sys.stdout.write(json.dumps(report, indent=2, default=str) + "\n")
    sys.stdout.flush()
    for check in report.get("checks", []):
        if check.get("outcome") == "fail":
            sys.stderr.write(
                f"monarch-tui: {check.get('node')} {check.get('label')} on {check.get('host')} "
                f"({check.get('reference')}) failed its probe: {check.get('error')}\n"
            )
    return 0 if summary["healthy"] else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``monarch-tui`` (the console script): the UI, or ``--diagnose``.

    Args:
        argv: the arguments (``sys.argv[1:]`` by default); ``--help`` lists them.

    Returns:
        The exit status: 0 after ``q`` or a healthy ``--diagnose``; 1 when the
        server cannot be reached at start, refuses the token, or a process
        failed its probe; 2 on bad arguments.

    Examples:
        >>> main(["--addr", "127.0.0.1:1729", "--diagnose"])  # doctest: +SKIP
        0
    """
    parser = _parser()
    args = parser.parse_args(argv)
    if args.refresh_ms < 50:
        parser.error(f"--refresh-ms must be at least 50, got {args.refresh_ms}")
    tls = {"tls_ca": args.tls_ca, "tls_cert": args.tls_cert, "tls_key": args.tls_key}
    try:
        client = _client(_addr(args.addr), args.token, tls)
    except ValueError as error:
        parser.error(str(error) if "--tls" in str(error) else f"--addr: {error}")
    except Exception as error:  # a malformed job secret: say which and go
        sys.stderr.write(f"monarch-tui: cannot derive the admin token: {error}\n")
        return 1
    try:
        if args.diagnose:
            return _diagnose(client)
        first = client.topology()
    except AdminError as error:
        sys.stderr.write(f"monarch-tui: {error}\n")
        return 1
    except KeyboardInterrupt:  # Ctrl+C while the server takes its time
        return 130
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        sys.stderr.write(
            "monarch-tui: the UI needs a terminal; for scripts use --diagnose "
            f"(or read {client.url}/v1/topology)\n"
        )
        return 1
    app = tui_app(
        client, refresh_ms=args.refresh_ms, first=first, theme=args.theme, lang=args.lang
    )
    status = app.run()
    return 0 if status is None else int(status)


if __name__ == "__main__":
    sys.exit(main())
