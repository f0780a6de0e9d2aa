"""Talking to the mesh admin server: ``AdminClient`` reads its JSON API over
HTTP(S) with the job's token, and ``AdminError`` says, in words a user can act
on, why a request failed. Nothing here knows about the terminal UI.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from .._collect import summarize
from .._server import parse_addr
from ._records import _find_token, _records_folder

TOKEN_ENV = "MONARCH_ADMIN_TOKEN"
SECRET_ENV = "MONARCH_JOB_SECRET"
SLOW_PROBE_MS = 500.0  # a probe this slow or slower is "slow" (Monarch's threshold)
DIAGNOSTICS_TIMEOUT = 60.0  # the server probes one process after another
STACKS_TIMEOUT = 60.0  # py-spy may take its time to attach


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
    """The server's base URL (``http://HOST:PORT``) from ``HOST:PORT`` or a URL."""
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


def _http_error(client: AdminClient, url: str, error: urllib.error.HTTPError) -> AdminError:
    """The ``AdminError`` for an HTTP error answer; a 401 says where the token was looked for."""
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
