"""``exec_command``: run a command on every host (or one) of a host mesh,
as a shell would, and get the highest exit status back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from monarch_actor import Actor, Future, HostMesh, current_rank, endpoint, returns_future

__all__ = ["CommandActor", "client_workdir", "exec_command", "rank_env"]


def rank_env() -> dict[str, str]:
    """``MONARCH_RANK_<DIM>`` and ``MONARCH_SIZE_<DIM>`` of the calling actor."""
    point = current_rank()
    env = {f"MONARCH_RANK_{k.upper()}": str(v) for k, v in dict(point).items()}
    env.update({f"MONARCH_SIZE_{k.upper()}": str(n) for k, n in point.extent.items()})
    return env


def client_workdir(client_cwd: str | None) -> str | None:
    """The controller's working directory, if this host has it too."""
    return client_cwd if client_cwd and os.path.isdir(client_cwd) else None


class CommandActor(Actor):
    """Runs commands for ``exec_command`` on the host of its proc."""

    @endpoint
    def run(
        self,
        cmd: list[str],
        env: dict[str, str] | None,
        workdir: str | None,
        client_cwd: str | None,
        output_dir: str | None,
    ) -> tuple[int, str, str]:
        """Run ``cmd`` (a Python script or ``-m module`` with this proc's
        interpreter, anything else as a program); return its status and, unless
        ``output_dir`` takes it, its output."""
        merged = {**os.environ, **rank_env(), **(env or {})}
        cwd = workdir or client_workdir(client_cwd)
        argv = list(cmd)
        if argv and (argv[0].endswith(".py") or argv[0] == "-m"):
            argv = [sys.executable, *argv]
        if output_dir is not None:
            point = dict(current_rank())
            folder = Path(
                output_dir.replace("$SUBDIR", "_".join(f"{k}_{v}" for k, v in point.items()))
            )
            folder.mkdir(parents=True, exist_ok=True)
            with open(folder / "stdout.txt", "wb") as out, open(folder / "stderr.txt", "wb") as err:
                done = subprocess.run(
                    argv, env=merged, cwd=cwd, stdout=out, stderr=err, check=False
                )
            return done.returncode, "", ""
        captured = subprocess.run(
            argv, env=merged, cwd=cwd, capture_output=True, text=True, check=False
        )
        return captured.returncode, captured.stdout, captured.stderr


def exec_command(
    host_mesh: HostMesh,
    cmd: list[str],
    env: dict[str, str] | None = None,
    workdir: str | None = None,
    output_dir: str | None = None,
    rank: int | None = None,
    point: dict[str, int] | None = None,
    per_host: dict[str, int] | None = None,
) -> Future[int]:
    """Run a command on every host of a host mesh (or one), as a shell would.

    Each run has ``MONARCH_RANK_<DIM>`` and ``MONARCH_SIZE_<DIM>`` set to its
    place in the mesh. A ``.py`` script or ``-m module`` runs with the
    remote proc's Python; anything else runs as a program. Unless
    ``output_dir`` is given, each run's output is printed here.

    Args:
        host_mesh: the hosts to run on.
        cmd: the command and its arguments, e.g. ``["nvidia-smi"]``.
        env: variables added to the command's environment.
        workdir: where the command runs (default: this script's working
            directory, where that exists on the host).
        output_dir: a folder on each host that takes each run's
            ``stdout.txt`` and ``stderr.txt`` instead; ``$SUBDIR`` in it
            becomes the run's coordinates, e.g. ``hosts_0_gpus_1``.
        rank: run only at this flat rank of ``host_mesh``.
        point: run only at these coordinates, e.g. ``{"hosts": 1}``.
        per_host: procs per host, e.g. ``{"gpus": 8}`` (default: one).

    Returns:
        A future of the highest exit status (0: every run succeeded).

    Raises:
        TypeError: ``cmd`` is a string or empty.
        ValueError: both ``rank`` and ``point`` are given.
    """
    if isinstance(cmd, str) or not cmd:
        raise TypeError(f"cmd is a non-empty list of arguments, e.g. ['nvidia-smi'], got {cmd!r}")
    if rank is not None and point is not None:
        raise ValueError("exec_command: give rank= or point=, not both")

    @returns_future
    async def run() -> int:
        hosts = host_mesh
        if point is not None:
            hosts = host_mesh.slice(**point)
        elif rank is not None:
            hosts = host_mesh.flatten("rank").slice(rank=rank)
        procs = hosts.spawn_procs(per_host=per_host)
        try:
            actors = procs.spawn("monarch_exec", CommandActor)
            results = await actors.run.call(cmd, env, workdir, os.getcwd(), output_dir)
            worst = 0
            for _, (code, out, err) in results.items():
                worst = max(worst, code)
                if out:
                    sys.stdout.write(out)
                if err:
                    sys.stderr.write(err)
            sys.stdout.flush()
            return worst
        finally:
            await procs.stop()

    result: Future[int] = run()
    return result
