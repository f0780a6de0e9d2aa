"""Finding a job's mesh admin server without being told: the records this
user's running jobs leave (``read_records("admin")``) name each server's URL
and token, so ``monarch-tui`` run by the job's user needs nothing pasted.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import urllib.parse

from monarch_actor.extension import private_dir, read_records

from .._server import RECORD


def _records_folder() -> str:
    """Where this user's job records are, in words for an error message."""
    try:
        return str(private_dir("jobs"))
    except OSError as error:  # PrivateFileError too: the folder is not this user's alone
        return f"this user's Monarch state folder ({error})"


def _local_names() -> set[str]:
    """The names this machine goes by (``localhost``, its host name and FQDN)."""
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
