"""The ``monarch`` command: serve a host (``monarch worker``), manage the
jobs a project applies (``monarch job apply|status|kill``) and debug the
actors of a running program (``monarch debug``)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from monarch_actor import DebugClient, DebugConnectionError

from ._current import import_job, set_current_job
from ._errors import LauncherError, WorkerAddressError
from ._job import DEFAULT_JOB_PATH, JobTrait, job_file, job_load
from ._kubernetes import KubernetesJob
from ._process import ProcessJob
from ._slurm import SlurmJob, slurm_worker_address
from ._worker import FORMS, serve

__all__ = ["build_parser", "debug_session", "main"]

log = logging.getLogger("monarch.launcher.cli")

DESCRIPTION = """\
Monarch in Python: run a worker on a host, or manage a job's workers.

A Monarch program (the controller) runs actors on hosts. Each host runs a
worker; the program attaches to the workers and spawns processes there. A
job (ProcessJob, SlurmJob, KubernetesJob) starts the workers for you; these
commands apply, inspect and end a job saved in a job file.
"""

EPILOG = """\
examples:
  monarch worker --address tcp://{hostname}:26600
      serve this machine to controllers at port 26600
  monarch job apply myjobs.trainers
      start the job object `trainers` of myjobs.py and save it to
      .monarch/job_state.pkl (this user's cache for the folder), where
      job.state() in your script finds it
  monarch job status
  monarch job kill
  monarch debug
      attach to the pdb sessions that breakpoint() opened in the actors of a
      running program (its debug server, localhost:27000 by default)

Workers and controllers must share MONARCH_JOB_SECRET (hex, at least 32
digits) or MONARCH_JOB_SECRET_FILE; jobs that start workers set this up.
"""


def _worker(args: argparse.Namespace) -> int:
    if (args.address is None) == (args.slurm_port is None):
        raise WorkerAddressError(
            "give the worker --address ADDRESS (or, in a Slurm job, --slurm-port PORT)"
        )
    address = args.address
    if args.slurm_port is not None:
        address = slurm_worker_address(args.slurm_port, args.slurm_bind)
    ca: Any = args.ca
    if ca != "trust_all_connections" and not Path(ca).is_file():
        raise WorkerAddressError(
            f"--ca {ca!r} is neither 'trust_all_connections' nor a PEM file of this machine"
        )
    if args.private_key is not None and not Path(args.private_key).is_file():
        raise WorkerAddressError(f"--private-key {args.private_key!r} is not a file")
    serve(address, ca=ca, private_key=args.private_key, lifeline=args.lifeline)
    return 0


def _load(path: str) -> JobTrait:
    try:
        return job_load(path)
    except FileNotFoundError:
        where = job_file(path)
        raise LauncherError(
            f"no job file at {path}{'' if where == path else f' ({where})'}: apply a job first "
            "(`monarch job apply module.attr`) or name the file with --file"
        ) from None


def _spec(text: str) -> JobTrait:
    if Path(job_file(text)).is_file():
        return job_load(text)
    return import_job(text)


def _apply(args: argparse.Namespace) -> int:
    path: str = args.file
    if args.spec is None:
        job = _load(path)
        if job.active:
            sys.stdout.write(f"{job!r} runs already (apply id {job.apply_id}); {path} unchanged\n")
            return 0
    else:
        job = _spec(args.spec)
        if os.path.exists(job_file(path)):
            cached = _load(path)
            running = cached._running
            if running is not None and running.can_run(job):
                sys.stdout.write(
                    f"{cached!r} from {path} runs already and serves {args.spec} "
                    f"(apply id {cached.apply_id})\n"
                )
                return 0
            if running is not None:
                sys.stdout.write(f"ending {cached!r} from {path}: it cannot run {args.spec}\n")
                cached.kill()
        if not Path(args.spec).is_file() and "." in args.spec and ":" not in args.spec:
            set_current_job(args.spec)
    job.apply(args.client_script)
    job.dump(path)
    sys.stdout.write(f"applied {job!r} (apply id {job.apply_id}); saved to {path}\n")
    for line in _details(job):
        sys.stdout.write(f"  {line}\n")
    return 0


def _details(job: JobTrait) -> list[str]:
    running = job._running
    if running is None:
        return []
    if isinstance(running, ProcessJob):
        return [
            f"{key}: pid {proc.pid} at {proc.address} "
            f"({'running' if proc.alive() else 'gone'}), log {running.log_files.get(key, '-')}"
            for key, proc in running.workers.items()
        ]
    if isinstance(running, SlurmJob):
        job_id = running.slurm_job_id
        if job_id is None:
            return ["no Slurm job id"]
        try:
            found = running._query(job_id)
        except LauncherError as error:
            return [f"Slurm job {job_id}: {error}"]
        if found is None:
            return [f"Slurm job {job_id}: no longer queued"]
        state, nodes, reason = found
        return [f"Slurm job {job_id}: {state} on {nodes or '(no nodes yet)'} {reason}".rstrip()]
    if isinstance(running, KubernetesJob):
        return [f"namespace {running.namespace}"]
    return []


def _alive(job: JobTrait) -> bool:
    running = job._running
    if running is None:
        return False
    if isinstance(running, ProcessJob):
        return bool(running.workers) and all(p.alive() for p in running.workers.values())
    if isinstance(running, SlurmJob):
        return running._job_active()
    return True


def _status(args: argparse.Namespace) -> int:
    job = _load(args.file)
    alive = _alive(job)
    what = (
        "running"
        if alive
        else ("applied, but its workers are gone" if job.active else "not running")
    )
    sys.stdout.write(f"{job!r}: {what} (apply id {job.apply_id}; file {args.file})\n")
    for line in _details(job):
        sys.stdout.write(f"  {line}\n")
    return 0 if alive else 3


def _kill(args: argparse.Namespace) -> int:
    job = _load(args.file)
    job.kill()
    if args.keep_file:
        job.dump(args.file)
    else:
        Path(os.path.realpath(job_file(args.file))).unlink(missing_ok=True)
    sys.stdout.write(
        f"killed {job!r}" + ("" if args.keep_file else f"; removed {args.file}") + "\n"
    )
    return 0


DEBUG_CONNECT_TIMEOUT = 30.0  # seconds to connect to the debug server and hear its greeting


def _debug(args: argparse.Namespace) -> int:
    try:
        client = DebugClient(
            args.host, args.port, timeout=DEBUG_CONNECT_TIMEOUT, takeover=args.takeover
        )
    except DebugConnectionError as error:
        raise LauncherError(str(error)) from None
    return debug_session(client, sys.stdin, sys.stdout)


def debug_session(client: DebugClient, stdin: TextIO, stdout: TextIO) -> int:
    """Relay a terminal to the debug server until either side ends the conversation.

    Lines typed at a terminal are read with line editing; lines piped in are
    echoed after the prompt, so the transcript reads as a session would. The
    end of input leaves the debugger with the sessions in place.

    Args:
        client: the connection to the debug server.
        stdin: where the commands come from.
        stdout: where the server's output goes.

    Returns:
        The exit status: 0, or 1 when the connection broke.
    """
    interactive = stdin.isatty() and stdout.isatty()
    stdout.write(client.greeting)
    try:
        while not client.closed:
            line = _debug_line(client.prompt, stdin, stdout, interactive)
            if line is None:
                break
            stdout.write(client.send(line))
            stdout.flush()
    except KeyboardInterrupt:
        stdout.write("\n")
    except DebugConnectionError as error:
        sys.stderr.write(f"monarch debug: {error}\n")
        return 1
    finally:
        client.close()
        stdout.flush()
    return 0


def _debug_line(prompt: str, stdin: TextIO, stdout: TextIO, interactive: bool) -> str | None:
    """The next line typed at ``prompt``; ``None`` at the end of input."""
    if interactive:
        try:
            return input(prompt)
        except EOFError:
            stdout.write("\n")
            return None
    stdout.write(prompt)
    line = stdin.readline()
    if not line:
        stdout.write("\n")
        return None
    line = line.rstrip("\r\n")
    stdout.write(f"{line}\n")
    return line


def _add_file(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--file",
        "-f",
        default=DEFAULT_JOB_PATH,
        metavar="JOB.pkl",
        help=f"the job file (a pickled job, as job.dump() writes; default: {DEFAULT_JOB_PATH}, "
        "where job.state() caches the job it applies)",
    )


def _add_apply(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "spec",
        nargs="?",
        default=None,
        metavar="SPEC",
        help="the job to apply: module.attr (or module:attr) naming a job object importable "
        "from this folder, or a job file; default: the job in --file",
    )
    parser.add_argument(
        "--client-script",
        default=None,
        metavar="SCRIPT",
        help="also run SCRIPT as the job's client where the job supports it (LocalJob, "
        "SlurmJob), with MONARCH_BATCH_JOB=1",
    )
    _add_file(parser)
    parser.set_defaults(run=_apply)


def _add_kill(parser: argparse.ArgumentParser) -> None:
    _add_file(parser)
    parser.add_argument(
        "--keep-file",
        action="store_true",
        help="keep the job file (marked not running) instead of removing it",
    )
    parser.set_defaults(run=_kill)


def build_parser() -> argparse.ArgumentParser:
    """Build the ``monarch`` command's argument parser.

    Its commands are ``worker``, ``job apply|status|kill`` (with ``apply``
    and ``kill`` also at the top level, as in Monarch) and ``debug``.

    Returns:
        The parser; each command sets ``run`` to the function that runs it.
    """
    parser = argparse.ArgumentParser(
        prog="monarch",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="how much to log to stderr (default: INFO)",
    )
    commands = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")

    worker = commands.add_parser(
        "worker",
        help="serve this host to Monarch controllers",
        description="Serve this host to Monarch controllers until one shuts it down "
        "(hosts.shutdown()); then exit with status 0. Controllers attach with "
        "attach_to_workers(workers=[ADDRESS, ...]).",
    )
    worker.add_argument(
        "--address",
        metavar="ADDRESS",
        help=f"where to serve: {FORMS}. {{hostname}} and {{fqdn}} are replaced by this "
        "machine's names",
    )
    worker.add_argument(
        "--ca",
        default="trust_all_connections",
        metavar="CA",
        help="'trust_all_connections' (default: peers prove MONARCH_JOB_SECRET) or a PEM file "
        "of the authority that signed every side's certificate (mutual TLS)",
    )
    worker.add_argument(
        "--private-key",
        default=None,
        metavar="PEM",
        help="with --ca: this worker's certificate and key, in one PEM file",
    )
    worker.add_argument(
        "--slurm-port",
        type=int,
        default=None,
        metavar="PORT",
        help="in a Slurm job step (srun), instead of --address: serve at this node's address "
        "as Slurm knows it (NodeAddr) and PORT, as SlurmJob dials it",
    )
    worker.add_argument(
        "--slurm-bind",
        default=None,
        metavar="HOST",
        help="with --slurm-port: listen on this interface (e.g. 0.0.0.0) instead",
    )
    worker.add_argument("--lifeline", type=int, default=None, help=argparse.SUPPRESS)
    worker.set_defaults(run=_worker)

    job = commands.add_parser(
        "job",
        help="apply, inspect or end a job saved in a job file",
        description="Apply, inspect or end a job saved in a job file.",
    )
    job_commands = job.add_subparsers(title="job commands", dest="job_command", metavar="ACTION")
    _add_apply(
        job_commands.add_parser(
            "apply",
            help="start a job (unless the job file's job runs and serves it) and save it",
            description="Start a job and save it to the job file, where job.state() in your "
            "scripts finds it and attaches to its workers. A job in the file that runs already "
            "and can serve SPEC is kept; one that cannot is ended first.",
        )
    )
    status = job_commands.add_parser(
        "status",
        help="show whether the job runs, and its workers",
        description="Show the job in the job file and whether it runs. Exit status: 0 when it "
        "runs, 3 when it does not.",
    )
    _add_file(status)
    status.set_defaults(run=_status)
    _add_kill(
        job_commands.add_parser(
            "kill",
            help="end the job and remove its job file",
            description="End the job in the job file (its workers exit, its allocation is "
            "released) and remove the file.",
        )
    )
    job.set_defaults(run=lambda _args: _missing(job))

    debug = commands.add_parser(
        "debug",
        help="attach to the pdb sessions of actors stopped at breakpoint()",
        description="Connect to the debug server of a running Monarch program: breakpoint() "
        "in an actor opens a pdb session there. Commands: list, attach <actor> <rank>, "
        "cast <actor> ranks(...) <pdb command>, continue, detach, help, quit. Both ends prove "
        "the job's secret: $MONARCH_JOB_SECRET (hex), else the file $MONARCH_JOB_SECRET_FILE "
        "names, else the record the program leaves for its own user on its machine.",
    )
    debug.add_argument(
        "--host",
        default=None,
        help="where the program's debug server listens (default: $MONARCH_DEBUG_SERVER_HOST, "
        "else localhost)",
    )
    debug.add_argument(
        "--port",
        type=int,
        default=None,
        help="its port (default: $MONARCH_DEBUG_SERVER_PORT, else 27000)",
    )
    debug.add_argument(
        "--takeover",
        action="store_true",
        help="replace the `monarch debug` already attached (it is told and disconnected); "
        "without this, the server refuses a second one",
    )
    debug.set_defaults(run=_debug)

    _add_apply(
        commands.add_parser(
            "apply",
            help="same as `monarch job apply` (Monarch's spelling)",
            description="Same as `monarch job apply`.",
        )
    )
    _add_kill(
        commands.add_parser(
            "kill",
            help="same as `monarch job kill` (Monarch's spelling)",
            description="Same as `monarch job kill`.",
        )
    )
    return parser


def _missing(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> None:
    """Run the ``monarch`` command and exit with its status.

    Errors the launcher expects (a bad address, a missing job file, no debug
    server, ...) are printed as one line, with status 2 for a bad worker
    address or usage and 1 for the rest; ``job status`` exits with 3 when the
    job does not run.

    Args:
        argv: the arguments (default: the command line's).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    run = getattr(args, "run", None)
    if run is None:
        parser.print_help(sys.stderr)
        sys.exit(2)
    try:
        code = run(args)
    except WorkerAddressError as error:
        parser.exit(2, f"monarch {args.command}: error: {error}\n")
    except (LauncherError, ValueError, TypeError, FileNotFoundError) as error:
        parser.exit(1, f"monarch {args.command}: error: {error}\n")
    sys.exit(code)
