"""Simulate several hosts on this one Linux machine with network namespaces.

Each simulated host is a network namespace with its own interfaces, addresses
and loopback; they talk to each other over a bridge that lives in a namespace
of its own. Nothing touches the root namespace: no link, route or firewall
rule is made there, so the simulated addresses are reachable only from inside
these namespaces (run clients in the ``ctl`` host, never in the root
namespace).

For a prefix P and N hosts, ``up`` makes::

    P-br    the bridge's namespace: bridge br0, one port per host (named after it)
    P-ctl   the controller, 10.213.0.1   (subnet's first address)
    P-h0    host 0,         10.213.0.10  (subnet's tenth address + i)
    ...
    P-h{N-1}

Each host's side of its veth pair is ``eth0``; ``lo`` is up everywhere, so a
server bound to 0.0.0.0 in a host is reachable at the host's address and at
127.0.0.1 from inside that same host. Two sets with different prefixes are
independent L2 networks and may use the same addresses at once.

Prefixes always start with ``monarch-test-`` so that ``down_all`` (after a
crashed run) removes only what this module made.

Use from pytest::

    reason = netns_hosts.available()        # None when usable, else why not
    if reason: pytest.skip(reason)
    with netns_hosts.hosts(3) as h:         # unique prefix; always removed
        server = h.popen("h0", [sys.executable, "server.py"])
        h.run("ctl", ["python3", "client.py", h.ip("h0")])
        h.cut("h0")                         # h0 vanishes without a goodbye
        h.restore("h0")

The executable ``tools/netns-hosts`` is the command-line face of this module.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

PREFIX_ROOT = "monarch-test-"
DEFAULT_SUBNET = "10.213.0.0/24"
CONTROLLER = "ctl"
BRIDGE = "br0"
HOST_IFACE = "eth0"
MAX_HOSTS = 200
_IP_TIMEOUT_S = 20.0


class NetnsError(RuntimeError):
    """An ``ip`` command failed, or a request makes no sense."""


Description = dict[str, dict[str, str]]


def _ip(*args: str, check: bool = True) -> str:
    """Run ``ip ARGS`` (bounded in time) and return its stdout."""
    try:
        proc = subprocess.run(
            ["ip", *args], capture_output=True, text=True, timeout=_IP_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetnsError(f"ip {' '.join(args)}: {exc}") from exc
    if check and proc.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {proc.stderr.strip() or proc.returncode}")
    return proc.stdout


@functools.cache
def available() -> str | None:
    """Why namespaces can't be made here, or None when they can.

    Checks Linux, root, the ``ip`` command, and really makes (and removes) a
    namespace with a bridge in it, so a sandbox without the permission is
    caught too. Tests call ``pytest.skip(reason)`` on a non-None answer.
    """
    if not sys.platform.startswith("linux"):
        return f"network namespaces need Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return "network namespaces need root (run as root, or in CI)"
    if shutil.which("ip") is None:
        return "the `ip` command is missing (apt-get install -y iproute2)"
    probe = f"{PREFIX_ROOT}probe-{os.getpid()}-{secrets.token_hex(3)}"
    try:
        _ip("netns", "add", probe)
        _ip("-n", probe, "link", "add", BRIDGE, "type", "bridge")
    except NetnsError as exc:
        return f"can't make a network namespace with a bridge here: {exc}"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


def new_prefix() -> str:
    """A fresh prefix, unique enough for parallel runs: ``monarch-test-<pid>-<hex>``."""
    return f"{PREFIX_ROOT}{os.getpid()}-{secrets.token_hex(3)}"


def _check_prefix(prefix: str) -> str:
    if not re.fullmatch(re.escape(PREFIX_ROOT) + r"[A-Za-z0-9_.-]{1,40}", prefix):
        raise NetnsError(
            f"prefix {prefix!r} must be {PREFIX_ROOT}<1-40 of [A-Za-z0-9_.-]> "
            "(so that `down --all` can find it)"
        )
    return prefix


def host_names(n: int) -> list[str]:
    """``["ctl", "h0", ..., "h{n-1}"]``."""
    return [CONTROLLER] + [f"h{i}" for i in range(n)]


def netns_name(prefix: str, host: str) -> str:
    """The namespace of ``host`` ("ctl", "h3") under ``prefix``."""
    return f"{prefix}-{host}"


def namespaces() -> list[str]:
    """Every network namespace name on this machine (``ip netns list``)."""
    return [line.split()[0] for line in _ip("netns", "list").splitlines() if line.strip()]


def _owned(prefix: str) -> list[str]:
    """The namespaces that ``up(prefix)`` makes and that exist now."""
    pattern = re.compile(re.escape(prefix) + r"-(br|ctl|h\d+)")
    return [ns for ns in namespaces() if pattern.fullmatch(ns)]


def up(n: int, prefix: str | None = None, subnet: str = DEFAULT_SUBNET) -> Description:
    """Make ``n`` hosts and a controller joined by a bridge; return their description.

    The answer maps each host ("ctl", "h0", ...) to ``{"netns": ..., "ip": ...}``.
    Fails (having removed whatever it made) if namespaces with this prefix
    already exist, or if an ``ip`` command fails.
    """
    prefix = _check_prefix(prefix or new_prefix())
    if not 1 <= n <= MAX_HOSTS:
        raise NetnsError(f"--hosts must be 1..{MAX_HOSTS}, not {n}")
    net = ipaddress.ip_network(subnet)
    if net.version != 4 or net.num_addresses < n + 12:
        raise NetnsError(f"subnet {subnet} must be IPv4 with room for {n} hosts at .10 and up")
    if _owned(prefix):
        raise NetnsError(f"{prefix} is already up ({', '.join(_owned(prefix))}); down it first")

    addresses = {CONTROLLER: net[1]} | {f"h{i}": net[10 + i] for i in range(n)}
    bridge_ns = netns_name(prefix, "br")
    try:
        _ip("netns", "add", bridge_ns)
        _ip("-n", bridge_ns, "link", "add", BRIDGE, "type", "bridge")
        _ip("-n", bridge_ns, "link", "set", BRIDGE, "up")
        for host, address in addresses.items():
            ns = netns_name(prefix, host)
            _ip("netns", "add", ns)
            # Both ends are made where they live: the root namespace never sees them.
            _ip("-n", bridge_ns, "link", "add", host, "type", "veth",
                "peer", "name", HOST_IFACE, "netns", ns)  # fmt: skip
            _ip("-n", bridge_ns, "link", "set", host, "master", BRIDGE, "up")
            _ip("-n", ns, "addr", "add", f"{address}/{net.prefixlen}", "dev", HOST_IFACE)
            _ip("-n", ns, "link", "set", HOST_IFACE, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
    except BaseException:
        down(prefix)
        raise
    return {h: {"netns": netns_name(prefix, h), "ip": str(a)} for h, a in addresses.items()}


def down(prefix: str) -> list[str]:
    """Remove every namespace ``up(prefix)`` made (their veths go with them).

    Idempotent: nothing to remove is not an error. Returns what it removed.
    """
    removed = _owned(_check_prefix(prefix))
    for ns in removed:
        _ip("netns", "del", ns, check=False)  # may race with another `down`: checked below
    if left := _owned(prefix):
        raise NetnsError(f"could not remove {', '.join(left)}")
    return removed


def down_all() -> list[str]:
    """Remove every namespace whose name starts with ``monarch-test-`` (after a crash)."""
    removed = []
    for ns in namespaces():
        if ns.startswith(PREFIX_ROOT):
            _ip("netns", "del", ns, check=False)
            removed.append(ns)
    return removed


def _resolve(prefix: str, host: str) -> str:
    """The namespace of ``host``; ``host`` may also be the namespace's full name."""
    ns = host if host.startswith(prefix + "-") else netns_name(prefix, host)
    if ns not in _owned(prefix) or ns.endswith("-br"):
        raise NetnsError(f"no host {host!r} under {prefix} (up: {', '.join(_owned(prefix))})")
    return ns


def cut(prefix: str, host: str) -> None:
    """Unplug ``host``: its bridge port goes down, so every packet to or from it is lost.

    Nothing is told to anyone: no FIN, no RST; peers see silence (connects and
    sends time out), as when a machine loses power or its cable.
    """
    ns = _resolve(prefix, host)
    _ip("-n", netns_name(prefix, "br"), "link", "set", ns.removeprefix(prefix + "-"), "down")


def restore(prefix: str, host: str, timeout_s: float = 5.0) -> None:
    """Plug ``host`` back in; returns once its ``eth0`` has carrier (at most ``timeout_s``)."""
    ns = _resolve(prefix, host)
    _ip("-n", netns_name(prefix, "br"), "link", "set", ns.removeprefix(prefix + "-"), "up")
    deadline = time.monotonic() + timeout_s
    while "LOWER_UP" not in _ip("-n", ns, "-o", "link", "show", HOST_IFACE):
        if time.monotonic() > deadline:
            raise NetnsError(f"{host}'s {HOST_IFACE} has no carrier {timeout_s}s after restore")
        time.sleep(0.05)


def exec_argv(prefix: str, host: str, argv: Sequence[str]) -> list[str]:
    """The argv that runs ``argv`` inside ``host``'s namespace (``ip netns exec``)."""
    return ["ip", "netns", "exec", _resolve(prefix, host), *argv]


class Hosts:
    """A set of simulated hosts made by ``up``; see ``hosts()``.

    ``names`` is ``["ctl", "h0", ...]``. Processes started with ``popen`` are
    remembered, and ``close()`` ends those still running before removing the
    namespaces.
    """

    def __init__(self, prefix: str, description: Description) -> None:
        self.prefix = prefix
        self.description = description
        self.names = list(description)
        self._procs: list[subprocess.Popen[Any]] = []

    def ip(self, host: str) -> str:
        """``host``'s address ("10.213.0.10" for "h0")."""
        return self.description[host]["ip"]

    def netns(self, host: str) -> str:
        """``host``'s namespace name, for ``ip netns exec`` by hand."""
        return self.description[host]["netns"]

    def argv(self, host: str, argv: Sequence[str]) -> list[str]:
        """``argv`` wrapped to run inside ``host``."""
        return exec_argv(self.prefix, host, argv)

    def popen(self, host: str, argv: Sequence[str], **kw: Any) -> subprocess.Popen[Any]:
        """``subprocess.Popen(argv, **kw)`` inside ``host``; its pid is the command's own."""
        proc = subprocess.Popen(self.argv(host, argv), **kw)
        self._procs.append(proc)
        return proc

    def run(self, host: str, argv: Sequence[str], **kw: Any) -> subprocess.CompletedProcess[Any]:
        """``subprocess.run(argv, **kw)`` inside ``host`` (pass ``timeout=`` to bound it)."""
        return subprocess.run(self.argv(host, argv), **kw)

    def cut(self, host: str) -> None:
        """Unplug ``host`` without a goodbye (see module ``cut``)."""
        cut(self.prefix, host)

    def restore(self, host: str) -> None:
        """Plug ``host`` back in (see module ``restore``)."""
        restore(self.prefix, host)

    def pids(self) -> list[int]:
        """Every process running in one of these hosts' namespaces now
        (``ip netns pids``): what ``popen`` started and whatever that started."""
        found = []
        for ns in _owned(self.prefix):
            found += [int(p) for p in _ip("netns", "pids", ns, check=False).split()]
        return found

    def close(self) -> None:
        """End the processes ``popen`` started (TERM, then KILL after 5 s), then
        KILL whatever else still runs in the namespaces (what they started and
        left behind), and remove all."""
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + 5.0
        for proc in self._procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5.0)
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        down(self.prefix)


@contextmanager
def hosts(n: int, prefix: str | None = None, subnet: str = DEFAULT_SUBNET) -> Iterator[Hosts]:
    """Make ``n`` hosts and a controller (unique prefix unless given), yield them, remove them.

    Raises ``NetnsError`` when they can't be made; call ``available()`` first
    to skip instead.
    """
    reason = available()
    if reason:
        raise NetnsError(reason)
    prefix = prefix or new_prefix()
    made = Hosts(prefix, up(n, prefix, subnet))
    try:
        yield made
    finally:
        made.close()
