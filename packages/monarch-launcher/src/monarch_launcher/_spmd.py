"""torchrun-style programs on a mesh: the actor that runs them (``monarch.spmd``).

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
    """Which kind of IP address ``get_host_port`` gives for the master.

    Attributes:
        IPv4: an IPv4 address of the host.
        IPv6: an IPv6 address of the host.
    """

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
    """Sets torchrun's environment in its proc and runs a training script there.

    The proc's place comes from its point in the mesh: the last dimension is
    the one within a host. ``main`` runs a script or module as ``python``
    would; ``setup_env`` only sets the environment.

    Attributes:
        rank: this proc's global rank (``RANK``).
        world_size: the number of procs in the mesh (``WORLD_SIZE``).
        local_world_size: the number of procs on each host, the size of the
            mesh's last dimension (``LOCAL_WORLD_SIZE``).
        local_rank: this proc's rank on its host (``LOCAL_RANK``).
        group_rank: the rank of this proc's host (``GROUP_RANK``).
        group_world_size: the number of hosts (``GROUP_WORLD_SIZE``).
    """

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
        """Find where this proc's host can serve the rendezvous, as rank 0 does.

        Args:
            use_ipaddr: give the host's address of this kind instead of its
                name; None gives the name.

        Returns:
            The host (its name, or its address) and a port free on it.

        Raises:
            ValueError: the host has no address of the kind asked.
        """
        hostname = _reachable_host()
        if use_ipaddr is not None:
            hostname = _address_of(hostname, use_ipaddr)
        return hostname, _free_port()

    @endpoint
    def setup_env(self, master_addr: str, master_port: int) -> None:
        """Set torchrun's environment variables in this proc.

        Args:
            master_addr: the rendezvous host (``MASTER_ADDR``).
            master_port: the rendezvous port (``MASTER_PORT``).
        """
        self._setup_env(master_addr, master_port)

    @endpoint
    def main(self, master_addr: str, master_port: int, script_args: list[str]) -> bool:
        """Set torchrun's environment, then run a script or module as ``python`` would.

        Args:
            master_addr: the rendezvous host (``MASTER_ADDR``).
            master_port: the rendezvous port (``MASTER_PORT``).
            script_args: the script and its arguments, e.g.
                ``["train.py", "--lr", "0.1"]``, or ``["-m", "pkg.train", ...]``
                for a module; they become its ``sys.argv``.

        Returns:
            True once the script has run to its end.

        Raises:
            ValueError: ``script_args`` is empty, or ``-m`` has no module name.
        """
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
    """Set torchrun's environment in every proc of a mesh.

    Client code can then drive ``torch.distributed`` itself in those procs.

    Args:
        proc_mesh: the procs to set up.
        master_addr: the rendezvous host (default: the first proc's host).
        master_port: the rendezvous port (default: a port free on the first
            proc's host).
        use_ipaddr: when the master's host is found, give its address of
            this kind instead of its name.
    """
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
    """Set torchrun's environment in every proc of a mesh, and wait until done.

    The blocking form of ``setup_torch_elastic_env_async``.

    Args:
        proc_mesh: the procs to set up.
        master_addr: the rendezvous host (default: the first proc's host).
        master_port: the rendezvous port (default: a port free on the first
            proc's host).
        use_ipaddr: when the master's host is found, give its address of
            this kind instead of its name.
    """
    actors, found = _start(proc_mesh, master_addr, master_port, use_ipaddr)
    if found is not None:
        addr, port = found.get()
        master_addr, master_port = master_addr or addr, master_port or port
    actors.setup_env.call(master_addr, master_port).get()
