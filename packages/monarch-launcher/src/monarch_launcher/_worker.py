"""The worker side: check an address before serving at it, expand the
placeholders a job's command line leaves for each machine to fill in, and
serve this host (``run_worker_loop_forever``) until a controller shuts it
down, or until the script that started the worker ends (its *lifeline*)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import signal
import socket
import stat
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from monarch_actor.extension import alias_parts as split_alias
from monarch_transport import Address

from ._errors import WorkerAddressError

__all__ = [
    "FORMS",
    "check_worker_address",
    "expand_placeholders",
    "serve",
    "split_alias",
    "worker_command",
]

log = logging.getLogger("monarch.launcher.worker")

FORMS = (
    "tcp://HOST:PORT (HOST an address or name of this machine), "
    "tcp://NAME:PORT@tcp://0.0.0.0:PORT (listen on every interface, dialed as NAME) "
    "or ipc:///PATH (a Unix socket)"
)


def expand_placeholders(address: str) -> str:
    """Fill in ``{hostname}`` (this machine's name) and ``{fqdn}`` (its fully
    qualified name): one command line then serves on every machine."""
    if "{hostname}" in address:
        address = address.replace("{hostname}", socket.gethostname())
    if "{fqdn}" in address:
        address = address.replace("{fqdn}", socket.getfqdn())
    return address


def _parse(text: str, whole: str) -> Address:
    try:
        return Address.parse(text)
    except ValueError as error:
        raise WorkerAddressError(f"bad worker address {whole!r}: {error}. Use {FORMS}") from None


def check_worker_address(address: str) -> str:
    """Check that a worker can serve at an address on this machine.

    A stale Unix socket file left by a worker that died is removed.

    Args:
        address: ``tcp://HOST:PORT`` (HOST an address or name of this
            machine), ``tcp://NAME:PORT@tcp://0.0.0.0:PORT`` (listen on every
            interface, dialed as NAME) or ``ipc:///PATH``; ``{hostname}`` and
            ``{fqdn}`` stand for this machine's names.

    Returns:
        The address with its placeholders filled in.

    Raises:
        WorkerAddressError: the address is malformed or cannot be served
            here (a port taken, a host not of this machine, a missing
            folder, ...); the message says what to use instead.
    """
    if not isinstance(address, str) or not address.strip():
        raise WorkerAddressError(f"a worker address is required: {FORMS}")
    address = expand_placeholders(address.strip())
    dial_text, bind_text = split_alias(address)
    dial, bind = _parse(dial_text, address), _parse(bind_text, address)
    for part in (dial, bind):
        if part.scheme not in ("tcp", "tls", "ipc"):
            raise WorkerAddressError(
                f"a worker cannot serve at {address!r}: {part.scheme}:// reaches no other "
                f"process. Use {FORMS}"
            )
    if (dial.scheme == "ipc") != (bind.scheme == "ipc"):
        raise WorkerAddressError(
            f"{address!r}: the dialed and the listening address must both be tcp:// or both ipc://"
        )
    if bind.scheme == "ipc":
        _check_ipc(bind.path, address)
    else:
        if dial.host in ("*", "0.0.0.0", "::", ""):
            raise WorkerAddressError(
                f"{address!r}: controllers cannot dial {dial.host or 'an empty host'}; listen on "
                "every interface and say how others reach this machine: "
                f"tcp://NAME:{bind.port or 'PORT'}@tcp://0.0.0.0:{bind.port or 'PORT'}"
            )
        for part in (dial, bind):
            if part.port == 0:
                raise WorkerAddressError(
                    f"{address!r}: a worker needs a fixed port (controllers must know it), not "
                    "port 0; pick a free one, e.g. tcp://HOST:26600"
                )
        _check_tcp(bind.host, bind.port, address)
    return address


def _check_tcp(host: str, port: int, address: str) -> None:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise WorkerAddressError(
            f"{address!r}: the host {host!r} does not resolve on this machine ({error}). Use "
            f"this machine's name ({socket.gethostname()!r}, or {{hostname}}) or an address of "
            "its own, or listen on every interface: tcp://NAME:PORT@tcp://0.0.0.0:PORT"
        ) from None
    family, kind, proto, _, sockaddr = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(sockaddr)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise WorkerAddressError(
                    f"{address!r}: port {port} is already taken on this machine (another "
                    "worker still running?). Stop that process or pick another port"
                ) from None
            if error.errno == errno.EADDRNOTAVAIL:
                raise WorkerAddressError(
                    f"{address!r}: {host} ({sockaddr[0]}) is not an address of this machine, "
                    "so nothing can listen there. Run the worker on that machine, or listen on "
                    f"every interface: tcp://{host}:{port}@tcp://0.0.0.0:{port}"
                ) from None
            if error.errno == errno.EACCES:
                raise WorkerAddressError(
                    f"{address!r}: port {port} needs privileges here; use a port above 1023"
                ) from None
            raise WorkerAddressError(f"{address!r}: cannot listen there: {error}") from None


def _check_ipc(path: str, address: str) -> None:
    where = Path(path)
    if not where.parent.is_dir():
        raise WorkerAddressError(
            f"{address!r}: the folder {str(where.parent)!r} does not exist; create it first"
        )
    try:
        mode = where.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise WorkerAddressError(
            f"{address!r}: {path!r} exists and is not a socket; choose another path"
        )
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(path)
        except OSError:  # nobody listens: a socket file left by a worker that died
            with contextlib.suppress(OSError):
                where.unlink()
            log.info("removed the stale socket file %s", path)
            return
    raise WorkerAddressError(
        f"{address!r}: a process already serves at {path!r} (another worker?). Stop it or "
        "choose another path"
    )


def _watch_lifeline(fd: int) -> None:
    """Exit this process once ``fd`` (the read end of a pipe whose write end
    the launching script holds) reads end-of-file: that script has ended.

    The kernel says so with ``SIGIO``, not a thread: a worker with one thread
    forks its fork server from itself (see ``run_worker_loop_forever``)."""

    def ended(*_: object) -> None:
        try:
            while os.read(fd, 4096):
                pass
        except BlockingIOError:
            return  # nothing to read, and no end-of-file: the script lives
        except OSError:
            pass  # the pipe is unreadable: as good as ended
        log.info("the script that started this worker ended: exiting")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    os.set_blocking(fd, False)
    signal.signal(signal.SIGIO, ended)
    fcntl.fcntl(fd, fcntl.F_SETOWN, os.getpid())
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)
    ended()  # the script may have ended before the kernel was asked to tell


def serve(
    address: str,
    *,
    ca: Any = "trust_all_connections",
    private_key: Any = None,
    lifeline: int | None = None,
) -> None:
    """Check ``address``, then serve this host there until a controller shuts
    it down (the process then exits with status 0)."""
    from monarch_actor import run_worker_loop_forever

    checked = check_worker_address(address)
    if lifeline is not None:
        _watch_lifeline(lifeline)
    log.info("worker serving at %s", checked)
    try:
        run_worker_loop_forever(address=checked, ca=ca, private_key=private_key)
    except OSError as error:
        raise WorkerAddressError(f"cannot serve at {checked!r}: {error}") from None


def worker_command(
    address: str,
    *,
    python: str | None = None,
    log_level: str | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """The command line that runs a worker (``monarch worker``).

    Args:
        address: where the worker serves, as ``check_worker_address`` takes it.
        python: the Python to run it with (default: this interpreter).
        log_level: how much the worker logs, e.g. ``"WARNING"`` (default:
            INFO).
        extra: more arguments for ``monarch worker``, appended at the end.

    Returns:
        The command and its arguments, ready for ``subprocess``.
    """
    level = ["--log-level", log_level] if log_level else []
    return [
        python or sys.executable,
        "-m",
        "monarch_launcher",
        *level,
        "worker",
        "--address",
        address,
        *extra,
    ]
