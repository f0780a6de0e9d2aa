"""torchrun-style programs on a mesh (``monarch.spmd``).

A script written for ``torchrun`` reads its place in the job from the
environment (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ...)
and calls ``torch.distributed.init_process_group()``. ``SPMDActor`` sets that
environment in each proc of a mesh from the proc's point in it (the last
dimension is the one within a host) and runs the script there, unchanged;
``setup_torch_elastic_env`` only sets the environment, for client code that
drives torch.distributed itself.
"""

from __future__ import annotations

import math
import os
import runpy
import socket
import sys
from enum import Enum
from typing import Any

from monarch_actor import Actor, ProcMesh, current_rank, current_size, endpoint
from monarch_actor.extension import process_address
from monarch_transport import Address

__all__ = ["AddrType", "SPMDActor", "setup_torch_elastic_env", "setup_torch_elastic_env_async"]


class AddrType(Enum):
    """Which kind of IP address ``get_host_port`` gives for the master."""

    IPv4 = socket.AF_INET
    IPv6 = socket.AF_INET6


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _address_of(hostname: str, kind: AddrType) -> str:
    try:
        found = socket.getaddrinfo(hostname, None, kind.value, socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise ValueError(f"{hostname!r} has no {kind.name} address: {error}") from None
    return str(found[0][4][0])


def _reachable_host() -> str:
    """Where the other hosts reach this proc: the host it listens on, when
    it listens on TCP (a worker's proc); else this machine's name."""
    address = process_address()
    if address is not None:
        parsed = Address.parse(address)
        if parsed.scheme in ("tcp", "tls") and parsed.host not in ("", "0.0.0.0", "::"):
            return parsed.host
    return socket.gethostname()


class SPMDActor(Actor):
    """Sets torchrun's environment in its proc from its point in the mesh and
    runs a training script or module there (``main``)."""

    def __init__(self) -> None:
        point = current_rank()
        sizes = current_size()
        local_dim = point.extent.labels[-1] if point.extent.labels else None
        self.rank = point.rank
        self.world_size = math.prod(sizes.values()) if sizes else 1
        self.local_world_size = sizes[local_dim] if local_dim else 1
        self.local_rank = point[local_dim] if local_dim else 0
        self.group_rank = self.rank // self.local_world_size
        self.group_world_size = -(-self.world_size // self.local_world_size)

    def _setup_env(self, master_addr: str, master_port: int) -> None:
        os.environ.update(
            {
                "MASTER_ADDR": str(master_addr),
                "MASTER_PORT": str(master_port),
                "RANK": str(self.rank),
                "WORLD_SIZE": str(self.world_size),
                "LOCAL_RANK": str(self.local_rank),
                "LOCAL_WORLD_SIZE": str(self.local_world_size),
                "GROUP_RANK": str(self.group_rank),
                "GROUP_WORLD_SIZE": str(self.group_world_size),
                "ROLE_RANK": str(self.rank),
                "ROLE_WORLD_SIZE": str(self.world_size),
                "ROLE_NAME": "rank",
            }
        )

    @endpoint
    def get_host_port(self, use_ipaddr: AddrType | None = None) -> tuple[str, int]:
        """This proc's host (its name, or its address of the kind asked) and a
        port free on it: where rank 0 can serve the rendezvous."""
        hostname = _reachable_host()
        if use_ipaddr is not None:
            hostname = _address_of(hostname, use_ipaddr)
        return hostname, _free_port()

    @endpoint
    def setup_env(self, master_addr: str, master_port: int) -> None:
        """Set torchrun's environment variables in this proc."""
        self._setup_env(master_addr, master_port)

    @endpoint
    def main(self, master_addr: str, master_port: int, script_args: list[str]) -> bool:
        """Set the environment, then run ``script_args`` as ``python`` would:
        ``["train.py", "--lr", "0.1"]`` or ``["-m", "pkg.train", ...]``."""
        self._setup_env(master_addr, master_port)
        if not script_args:
            raise ValueError("no script or module to run: pass ['path.py', ...] or ['-m', 'mod']")
        if script_args[0] == "-m":
            if len(script_args) < 2:
                raise ValueError("'-m' needs a module name after it")
            sys.argv = [script_args[1], *script_args[2:]]
            runpy.run_module(script_args[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(script_args)
            runpy.run_path(script_args[0], run_name="__main__")
        return True


def _start(
    proc_mesh: ProcMesh, master_addr: str | None, master_port: int | None, use_ipaddr: Any
) -> tuple[Any, Any]:
    """The mesh's SPMD actors, and (unless both are given) the future of
    where its first proc's host can serve the rendezvous."""
    actors: Any = proc_mesh.spawn("_SPMDActor", SPMDActor)
    if master_addr is not None and master_port is not None:
        return actors, None
    labels = proc_mesh.extent.labels
    first = actors.slice(**dict.fromkeys(labels, 0)) if labels else actors
    return actors, first.get_host_port.call_one(use_ipaddr)


async def setup_torch_elastic_env_async(
    proc_mesh: ProcMesh,
    master_addr: str | None = None,
    master_port: int | None = None,
    use_ipaddr: AddrType | None = None,
) -> None:
    """Set torchrun's environment in every proc of ``proc_mesh`` (the master
    on the first proc's host unless given)."""
    actors, found = _start(proc_mesh, master_addr, master_port, use_ipaddr)
    if found is not None:
        addr, port = await found
        master_addr, master_port = master_addr or addr, master_port or port
    await actors.setup_env.call(master_addr, master_port)


def setup_torch_elastic_env(
    proc_mesh: ProcMesh,
    master_addr: str | None = None,
    master_port: int | None = None,
    use_ipaddr: AddrType | None = None,
) -> None:
    """``setup_torch_elastic_env_async``, waited for."""
    actors, found = _start(proc_mesh, master_addr, master_port, use_ipaddr)
    if found is not None:
        addr, port = found.get()
        master_addr, master_port = master_addr or addr, master_port or port
    actors.setup_env.call(master_addr, master_port).get()
