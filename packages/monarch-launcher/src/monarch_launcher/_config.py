"""``hosts_from_config``: the host mesh a deployment configures by name."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from monarch_actor import HostMesh, attach_to_workers

from ._errors import WorkerAddressError
from ._process import start_local_workers
from ._worker import FORMS, split_alias

__all__ = ["DEFAULT_LOCAL_HOSTS", "hosts_from_config", "parse_worker_list"]

log = logging.getLogger("monarch.launcher.config")

DEFAULT_LOCAL_HOSTS = 2
"""How many local worker processes ``hosts_from_config`` starts when its
variable is not set (as Monarch's stand-in does)."""


def parse_worker_list(text: str, origin: str) -> list[str]:
    """Read worker addresses from a list such as a hosts file or variable holds.

    Addresses are separated by commas, spaces or newlines; ``#`` starts a
    comment that runs to the end of its line.

    Args:
        text: the list to read.
        origin: where the text came from (a file, a variable), named in errors.

    Returns:
        The addresses, in the order listed.

    Raises:
        WorkerAddressError: the text lists no address, or an entry is not a
            ``tcp://``, ``tls://`` or ``ipc://`` address.
    """
    addresses: list[str] = []
    for line in text.splitlines():
        line = line.split("#", 1)[0]
        addresses.extend(part for part in re.split(r"[,\s]+", line) if part)
    if not addresses:
        raise WorkerAddressError(f"{origin} lists no worker address; list some: {FORMS}")
    for address in addresses:
        dial, _ = split_alias(address)
        scheme = dial.partition("://")[0].lower()
        if scheme not in ("tcp", "tls", "tls+tcp", "ipc", "unix"):
            raise WorkerAddressError(
                f"{origin}: {address!r} is not a worker address; each is tcp://HOST:PORT or "
                "ipc:///PATH, separated by commas, spaces or newlines"
            )
    return addresses


def hosts_from_config(name: str) -> HostMesh:
    """Attach to the host mesh a deployment configures under ``name``.

    The environment variable ``name`` lists the workers' addresses
    (``tcp://host:port``, separated by commas, spaces or newlines) or names a
    file that lists them; the result is one mesh of extent ``{"hosts": N}``.
    The workers must share this script's ``MONARCH_JOB_SECRET``.

    With the variable unset, as in Monarch, two worker processes are started
    on this machine (extent ``{"hosts": 2}``); they end when this script ends.

    Args:
        name: the configuration's name: the environment variable to read,
            also used as the mesh's name.

    Returns:
        The host mesh of the listed (or started) workers.

    Raises:
        TypeError: ``name`` is not a non-empty string.
        WorkerAddressError: the variable holds neither addresses nor the path
            of an existing file, or the list it gives is malformed.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"hosts_from_config takes the name of a configuration, got {name!r}")
    value = os.environ.get(name, "").strip()
    if not value:
        log.info("%s is not set: starting %d local workers", name, DEFAULT_LOCAL_HOSTS)
        workers = start_local_workers(_safe(name), DEFAULT_LOCAL_HOSTS)
    elif "://" not in value and Path(value).is_file():
        workers = parse_worker_list(Path(value).read_text(), f"the file {value} (${name})")
    elif "://" not in value:
        raise WorkerAddressError(
            f"${name}={value!r} is neither worker addresses nor an existing file: set it to "
            "addresses such as tcp://node1:26600,tcp://node2:26600 or to a file listing them"
        )
    else:
        workers = parse_worker_list(value, f"${name}")
    return attach_to_workers(workers=list(workers), ca="trust_all_connections", name=name)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:40] or "hosts"
