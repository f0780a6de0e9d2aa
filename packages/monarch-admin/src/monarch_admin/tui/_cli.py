"""The ``monarch-tui`` command: its arguments, which server and token they
name (falling back on this user's job records and the job's secret), and
``main``, which runs the UI or prints ``--diagnose``'s report.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from .._config import ADMIN_ADDR
from .._server import admin_token
from ._app import REFRESH_MS, THEMES, tui_app
from ._client import SECRET_ENV, TOKEN_ENV, AdminClient, AdminError
from ._format import LANGS
from ._records import _newest_server

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
    """The command's arguments."""
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
    """The server to show: ``--addr``, else the setting, else this user's newest job's."""
    if given:
        return given
    if ADMIN_ADDR.get() != ADMIN_ADDR.default:  # set: $MONARCH_ADMIN_ADDR or configure()
        return ADMIN_ADDR.get()
    return _newest_server() or ADMIN_ADDR.get()


def _client(addr: str, given: str | None, tls: dict[str, str | None] | None = None) -> AdminClient:
    """The client for ``addr``; with no token given or recorded, the job's secret derives one."""
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
    """``--diagnose``: print the report as JSON, name failed probes; 0 when healthy."""
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
    app = tui_app(client, refresh_ms=args.refresh_ms, first=first, theme=args.theme, lang=args.lang)
    status = app.run()
    return 0 if status is None else int(status)
