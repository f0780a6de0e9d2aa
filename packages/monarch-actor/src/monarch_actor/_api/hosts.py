"""Hosts on other machines: the controller attaches to workers
(``attach_to_workers``) and gets a ``HostMesh`` of them; the job's secret
both sides must share; where the controller listens so workers reach it.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import ipaddress
import logging
import os
import shutil
import socket
import tempfile
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from monarch_mesh import Shape, Slice
from monarch_transport import (
    SECRET_ENV,
    TLS_ENV,
    Address,
    default_listen_address,
    integrity_mode,
    integrity_required,
    listen,
    preload_integrity,
)

from .._core.config import INSECURE_PUBLIC_SECRET
from .._core.future import Future
from .._core.private import PrivateFileError, check_private, read_private
from .._core.process import LISTEN_ENV, get_runtime, maybe_runtime
from .._core.router import Runtime
from .._core.threads import run_in_thread
from .._procs.remote import RemoteAgent, RemoteAgents
from .mesh import HostMesh
from .proc_control import on_worker_exit, remote_agents

__all__ = [
    "SECRET_FILE_ENV",
    "TRUST_ALL",
    "attach",
    "attach_to_workers",
    "attached",
    "configure_security",
    "alias_parts",
    "secret_from_file",
    "split_alias",
]

log = logging.getLogger("monarch.actor.hosts")
TRUST_ALL = "trust_all_connections"
SECRET_FILE_ENV = "MONARCH_JOB_SECRET_FILE"
# with ca="trust_all_connections" and no secret, both sides use this one: it
# is public, so it keeps out nobody; it only lets Monarch's scripts run as written
_PUBLIC_SECRET = "6d6f6e617263682d74727573742d616c6c2d636f6e6e656374696f6e73"


def configure_security(ca: Any, private_key: Any, addresses: Sequence[Any] = ()) -> bool:
    """Settle how this process proves itself, before anything connects; True
    when connections across hosts use TLS.

    ``ca="trust_all_connections"``: the job's secret (``$MONARCH_JOB_SECRET``,
    or the file ``$MONARCH_JOB_SECRET_FILE`` names, which must be this user's
    alone) is what peers prove. With neither set and no certificates, a public
    secret is used where the filesystem keeps other users out: every one of
    ``addresses`` (the workers) is a Unix socket in a folder only this user may
    enter, and processes listen on such sockets only (``check_listener``).
    Otherwise this refuses, unless ``$MONARCH_INSECURE_PUBLIC_SECRET`` asks for
    a public one (anyone who reaches a worker's port can then run code on it). Otherwise
    ``ca`` is the certificate authority (PEM bytes or a file) that signed every
    side's certificate, and ``private_key`` this side's certificate and key
    (PEM bytes or a file holding both): connections across hosts are mutual
    TLS (``tls+tcp://``).
    """
    tls = _configure_tls(ca, private_key)
    if os.environ.get(SECRET_ENV):
        return tls
    path = os.environ.get(SECRET_FILE_ENV)
    if path:
        os.environ[SECRET_ENV] = secret_from_file(path)
        return tls
    if maybe_runtime() is not None:
        raise RuntimeError(
            "the runtime already started with a secret of its own, which the workers do not "
            f"know: call attach_to_workers() before anything else, or set {SECRET_ENV} (hex) "
            "in the environment of the workers and of this script"
        )
    if not tls:  # with TLS, the certificates keep strangers out
        if _private_sockets(addresses):
            os.environ[SECRET_ENV] = _PUBLIC_SECRET
            return tls
        if not INSECURE_PUBLIC_SECRET.get():
            raise RuntimeError(
                f"ca={TRUST_ALL!r} with no job secret would let anyone who can reach these "
                f"ports run code here. Set {SECRET_ENV} (32+ hex digits, e.g. from "
                "`python -c 'import secrets; print(secrets.token_hex(32))'`) or "
                f"{SECRET_FILE_ENV} (a file of yours, mode 0600) the same on every host and in "
                "the script; or pass certificates (ca=, private_key=). On a network no one else "
                f"can reach, {INSECURE_PUBLIC_SECRET.env[0]}=1 accepts a public secret instead"
            )
        warnings.warn(
            f"ca={TRUST_ALL!r} with no job secret and {INSECURE_PUBLIC_SECRET.env[0]} set: "
            "anyone who can reach these ports can run code here",
            stacklevel=3,
        )
    os.environ[SECRET_ENV] = _PUBLIC_SECRET
    return tls


def _private_sockets(addresses: Sequence[Any]) -> bool:
    """Whether every address is a Unix socket in a folder that is this user's
    alone, and this process listens on such a socket too: then no other user
    can connect, whatever secret is used."""
    if not addresses or os.environ.get(LISTEN_ENV) or default_listen_address().scheme != "ipc":
        return False
    for text in addresses:
        try:
            address = Address.parse(text) if isinstance(text, str) else None
        except ValueError:
            return False
        if address is None or address.scheme != "ipc" or not address.path:
            return False
        try:
            check_private(os.path.dirname(os.path.abspath(address.path)), "a worker's folder")
        except (OSError, PrivateFileError):
            return False
    return True


def check_listener(bind: Address | str) -> None:
    """Refuse to listen at ``bind`` anywhere but a Unix socket or TLS while the
    job's secret is the public one and no one asked for that
    (``configure_security`` allowed it for certificates, or for this user's
    own sockets).

    Raises:
        RuntimeError: ``bind`` is a network address, saying what to set.
    """
    if os.environ.get(SECRET_ENV) != _PUBLIC_SECRET or INSECURE_PUBLIC_SECRET.get():
        return
    if Address.parse(str(bind)).scheme not in ("ipc", "tls"):
        raise RuntimeError(
            f"will not listen at {bind}: this job has no secret (its workers are Unix sockets "
            f"of this user's, which need none), and anyone who reaches {bind} could run code "
            f"here. Set {SECRET_ENV} (32+ hex digits) the same in the workers and the script, "
            "or pass certificates (ca=, private_key=)"
        )


def secret_from_file(path: str) -> str:
    """The job's secret (hex) from ``path``, once the file passes
    ``check_private``: this user's, and no one else may read or write it.

    Raises:
        ValueError: the file cannot be read, or it is not this user's alone
            (the message says how to fix it).
    """
    try:
        return read_private(path, SECRET_FILE_ENV).decode().strip()
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{SECRET_FILE_ENV}={path!r} cannot be read: {error}") from None


def _configure_tls(ca: Any, private_key: Any) -> bool:
    if isinstance(ca, str) and ca == TRUST_ALL:
        if private_key is not None:
            raise ValueError(
                f"private_key= needs ca= (the authority that signed it), not {TRUST_ALL!r}"
            )
        return False
    if private_key is None:
        raise ValueError(
            "TLS needs this side's certificate and key: pass private_key= (PEM bytes or a "
            "file holding both) along with ca="
        )
    folder = Path(tempfile.mkdtemp(prefix="monarch-tls-"))
    os.chmod(folder, 0o700)
    atexit.register(shutil.rmtree, folder, True)
    ca_file = _pem_file(ca, folder / "ca.pem", "ca")
    key_file = _pem_file(private_key, folder / "key.pem", "private_key")
    ca_env, cert_env, key_env = TLS_ENV
    os.environ.update({ca_env: ca_file, cert_env: key_file, key_env: key_file})
    return True


def _pem_file(value: Any, path: Path, what: str) -> str:
    """A file holding ``value`` (PEM bytes, or a path to a file), readable only here."""
    if isinstance(value, bytes):
        path.write_bytes(value)
        os.chmod(path, 0o600)
        return str(path)
    if isinstance(value, (str, Path)) and Path(value).is_file():
        return str(value)
    raise ValueError(f"{what}= is PEM bytes or the path of a PEM file, got {value!r}")


def alias_parts(address: str) -> tuple[str, str]:
    """Split a worker's ``DIAL@BIND`` address into where peers dial and where to listen.

    Both parts are returned as written; a plain address is both.

    Args:
        address: an address such as ``tcp://NAME:PORT@tcp://0.0.0.0:PORT`` or
            ``tcp://HOST:PORT``.

    Returns:
        ``(dial, bind)``.
    """
    dial, at, bind = address.rpartition("@")
    if at and "://" in dial and "://" in bind:
        return dial, bind
    return address, address


def split_alias(address: str, tls: bool = False) -> tuple[str, str]:
    """``dial@bind`` -> (where peers dial, where to listen), canonical; a
    plain address is both. With ``tls``, ``tcp://`` addresses become ``tls+tcp://``."""
    if not isinstance(address, str) or not address:
        raise TypeError(f"a worker address is a str such as 'tcp://host:port', got {address!r}")
    dial, bind = alias_parts(address)
    return _canonical(dial, tls), _canonical(bind, tls)


def _canonical(text: str, tls: bool = False) -> str:
    if "@" in text and "://" in text.partition("@")[2]:
        text = text.partition("@")[2]  # <proc-id>@<url>: the url
    address = Address.parse(text)
    if address.scheme in ("tcp", "tls") and address.host == "*":
        raise ValueError(
            f"{text!r}: a wildcard host cannot be dialed; listen on tcp://0.0.0.0:PORT and "
            "give the name others reach it by: tcp://NAME:PORT@tcp://0.0.0.0:PORT"
        )
    if tls and address.scheme == "tcp":
        address = Address("tls", host=address.host, port=address.port)
    return str(address)


_attach_lock = threading.Lock()
_attached: tuple[str, str, str] | None = None  # (as given, where peers dial, where to listen)


def attached() -> tuple[str, str] | None:
    """``(dial, bind)`` when ``attach(addr)`` set where this client is reached."""
    return None if _attached is None else _attached[1:]


def _gateway(addr: str) -> tuple[str, str]:
    """Where peers reach an attached client, and where it listens."""
    if not isinstance(addr, str) or not addr:
        raise TypeError(f"attach() takes an address such as 'tcp://host:port', got {addr!r}")
    dial, bind = split_alias(addr)
    if dial == bind:  # a plain address: listen on its port, on every interface
        where = Address.parse(dial)
        if where.scheme in ("tcp", "tls"):
            if not where.port:
                raise ValueError(
                    f"attach({addr!r}): give the port the gateway forwards to this machine "
                    "(tcp://GATEWAY:PORT), or both ends: tcp://GATEWAY:PORT@tcp://0.0.0.0:LOCAL"
                )
            bind = str(Address(where.scheme, host="0.0.0.0", port=where.port))
    return dial, bind


def attach(addr: str) -> None:
    """Start this process's client reached through a gateway at ``addr``.

    Processes and workers send everything meant for this client to ``addr``,
    and whatever serves it (an SSH reverse tunnel, a port-forward, a NAT or
    load-balancer rule) relays it to this machine, where the client listens.
    The client dials the processes itself. Use it when they cannot reach this
    machine directly.

    Call it before the client's first ``context()``, ``this_host()`` or
    ``this_proc()``: actor and port references carry the address they were
    made with. Attaching again through the same address does nothing.

    Args:
        addr: where peers reach this client: ``tcp://GATEWAY:PORT`` (relayed to
            this machine's port ``PORT``, which the client listens on, on every
            interface), ``tcp://GATEWAY:PORT@tcp://LOCAL_HOST:LOCAL_PORT`` (the
            relay's target given too), or an ``ipc://`` path.

    Raises:
        RuntimeError: the client has started already, without ``attach`` or
            through another address (use a new process), or this process is not a
            client (a proc or a worker).
        TypeError: ``addr`` is not a string.
        ValueError: ``addr`` is not an address, or a TCP address without a port.
        OSError: nothing can listen where the client should.
    """
    global _attached
    dial, bind = _gateway(addr)
    with _attach_lock:
        runtime = maybe_runtime()
        if runtime is None:
            _attached = (addr, dial, bind)
            try:
                runtime = get_runtime()
            except BaseException:
                _attached = None
                raise
            if runtime.address == dial:
                return
        if _attached is not None and _attached[0] == addr and runtime.address == dial:
            return
        if _attached is not None and runtime.address == _attached[1]:
            raise RuntimeError(
                f"this client is already attached through {_attached[0]}, not {addr}; a client "
                "cannot move: attach through another address in a new process"
            )
        _attached = None
        raise RuntimeError(
            f"this process's Monarch runtime started without attach() (as a "
            f"{runtime.role}, at {runtime.address}); call attach(addr) before the first "
            "context(), this_host() or this_proc()"
        )


def attach_to_workers(
    *,
    workers: Sequence[str | Future[str]],
    ca: Any = TRUST_ALL,
    private_key: Any = None,
    name: str | None = None,
) -> HostMesh:
    """A mesh of the hosts whose workers (``run_worker_loop_forever``) listen at ``workers``.

    The mesh has extent ``{"hosts": len(workers)}``. Returns at once;
    ``await hosts.initialized`` (or ``.get()``) waits until every worker answered.
    Call it before anything else starts the runtime, so that this script and
    the workers share the job's secret.

    Args:
        workers: each worker's address (``tcp://HOST:PORT``, ``ipc:///path``,
            or ``DIAL@BIND``), or a ``Future`` of one.
        ca: ``"trust_all_connections"`` (the default): workers and script prove
            themselves with the job's secret (``$MONARCH_JOB_SECRET`` or the file
            ``$MONARCH_JOB_SECRET_FILE`` names). With neither set, only workers on
            Unix sockets in folders that are this user's alone are accepted (no
            other user can reach them); else this refuses. Otherwise the
            certificate authority (PEM bytes or a file) that signed every side's
            certificate: connections across hosts then use mutual TLS.
        private_key: with a certificate authority, this side's certificate and
            key (PEM bytes or a file holding both).
        name: the host mesh's name (default ``"hosts"``).

    Returns:
        The host mesh; ``spawn_procs`` on it starts processes on the workers.

    Raises:
        TypeError: ``workers`` is not a non-empty list of addresses or futures.
        ValueError: an address cannot be parsed, or the security options do not fit together.
        RuntimeError: the runtime already started with a secret the workers do not know.
    """
    if isinstance(workers, (str, bytes)) or not isinstance(workers, Sequence) or not workers:
        raise TypeError(f"workers is a non-empty list of addresses, got {workers!r}")
    for worker in workers:
        if isinstance(worker, str):
            split_alias(worker)  # a bad address is an error before anything starts
        elif not isinstance(worker, Future):
            raise TypeError(f"a worker is an address (str) or a Future of one, got {worker!r}")
    tls = configure_security(
        ca, private_key, [split_alias(w)[0] if isinstance(w, str) else w for w in workers]
    )
    preload_sealing([split_alias(w, tls)[0] for w in workers if isinstance(w, str)])
    runtime = get_runtime()
    registry = runtime.run_sync(remote_agents, runtime)
    on_exit = on_worker_exit(runtime)
    agents: list[concurrent.futures.Future[RemoteAgent]] = []
    known: list[tuple[str, concurrent.futures.Future[RemoteAgent]]] = []
    for worker in workers:
        found: concurrent.futures.Future[RemoteAgent]
        if isinstance(worker, str):
            found = concurrent.futures.Future()
            known.append((split_alias(worker, tls)[0], found))
        else:
            found = run_in_thread(
                "monarch-attach", _attach_later, runtime, registry, worker, tls, on_exit
            )
        agents.append(found)
    _attach(runtime, registry, known, on_exit)
    shape = Shape(["hosts"], Slice.new_row_major([len(workers)]))
    return HostMesh(shape, [found.result for found in agents], name=name or "hosts", owned=True)


def _attach_later(
    runtime: Runtime,
    registry: RemoteAgents,
    worker: Future[str],
    tls: bool,
    on_exit: Any,
) -> RemoteAgent:
    found: concurrent.futures.Future[RemoteAgent] = concurrent.futures.Future()
    _attach(runtime, registry, [(split_alias(worker.get(), tls)[0], found)], on_exit)
    return found.result()


def _attach(
    runtime: Runtime,
    registry: RemoteAgents,
    known: list[tuple[str, concurrent.futures.Future[RemoteAgent]]],
    on_exit: Any,
) -> None:
    """Say hello to every worker whose address is ``known``, in one turn of
    the loop (a turn each would wait for the loop behind the handshakes of
    the first); each future gets its worker's agent, or why there is none."""
    for address, found in known:
        try:
            reachable_from(runtime, Address.parse(address))
        except BaseException as error:
            found.set_exception(error)

    def hello_all() -> None:
        for address, found in known:
            if not found.done():
                try:
                    found.set_result(registry.attach(address, on_exit))
                except BaseException as error:
                    found.set_exception(error)

    if not known:
        return
    try:
        runtime.run_sync(hello_all)
    except BaseException as error:  # the loop is gone: every worker hears why
        for _, found in known:
            if not found.done():
                found.set_exception(error)


def preload_sealing(addresses: Sequence[str]) -> None:
    """Load what sealed connections need (``preload_integrity``) when one of
    ``addresses`` is plain TCP, where every message is sealed: this process,
    or the procs it forks, will need it for their first connection."""
    tcp = any(Address.parse(address).scheme == "tcp" for address in addresses)
    if tcp and integrity_required(integrity_mode(), "tcp"):
        preload_integrity()


_listening = threading.Lock()


def reachable_from(runtime: Runtime, worker: Address) -> None:
    """Make sure the controller listens where ``worker``'s host can reach it:
    a TCP worker needs a TCP controller, on the interface that routes to it
    (or where ``enable_transport("tcp://ADDR:0")`` said)."""
    if worker.scheme not in ("tcp", "tls") or _attached is not None:
        return  # an attached client is reached through its gateway, from anywhere
    with _listening:
        mine = Address.parse(runtime.address)
        if mine.scheme == worker.scheme and not (
            _is_loopback(mine.host) and not _is_loopback(worker.host)
        ):
            return
        chosen = default_listen_address()
        if chosen.scheme == worker.scheme and chosen.host not in ("", "0.0.0.0", "::"):
            host = chosen.host
        else:
            host = route_to(worker.host)
        bind = Address(worker.scheme, host=host, port=0)
        check_listener(bind)
        listener = asyncio.run_coroutine_threadsafe(listen(bind), runtime.loop).result(30)
        runtime.run_sync(runtime.listen_also, listener)
        log.info("the controller listens at %s for workers on other hosts", runtime.address)


def route_to(host: str) -> str:
    """This machine's address on the interface that routes to ``host``."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((host.strip("[]"), 9))  # UDP: nothing is sent
        except OSError as error:
            raise ConnectionError(f"no route to worker host {host}: {error}") from None
        return str(probe.getsockname()[0])


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"
