"""How a host starts its processes: the command of its fork server.

Processes are forked from one pre-warmed interpreter per host (the host
agent's fork server, ``monarch_actor._procs.zygote``); ``BootstrapCommand``
is the command line and environment that interpreter is launched with, and
``default_bootstrap_cmd()`` the one this runtime uses.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from .._core.config import PRELOAD

__all__ = [
    "FORK_SERVER_MODULE",
    "PROC_FLAG",
    "RUNTIME_PREFIXES",
    "STARTED_BY_ENV",
    "BootstrapCommand",
    "command_spec",
    "default_bootstrap_cmd",
    "proc_environment",
]

FORK_SERVER_MODULE = "monarch_actor._procs.zygote"
PROC_FLAG = "--proc"  # the fork server's arguments for one process launched by a command
# variables of the runtime itself: a command that does not inherit the host's
# environment still gets these, or its process could not join the job
RUNTIME_PREFIXES = ("MONARCH_", "HYPERACTOR_")
# the pid of the process whose host agent this is, in the environment of the agent
# (the fork server) and so of every proc it starts, whether forked or launched by
# a command: a proc is a process that has it and whose parent is not that pid (the
# test suites' leak check looks for them)
STARTED_BY_ENV = "MONARCH_STARTED_BY"


class BootstrapCommand:
    """A command that starts a Python interpreter serving Monarch processes,
    and the environment it runs in.

    Args:
        program: the executable (a path, or a name looked up on ``PATH``).
        arg0: what the program sees as its own name (``argv[0]``); ``None``: ``program``.
        args: the arguments after ``argv[0]``.
        env: variables set on top of the environment; a ``None`` value removes one.
        inherit_env: start from the environment of the process that launches
            the command (``True``), or from an empty one.

    Attributes:
        program: the executable.
        arg0: ``argv[0]``, or ``None`` for ``program``.
        args: the arguments after ``argv[0]``.
        env: the variables set (``str``) or removed (``None``) on top of the base.
        inherit_env: whether the base is the launching process's environment.
    """

    def __init__(
        self,
        program: str,
        arg0: str | None = None,
        args: Sequence[str] = (),
        env: Mapping[str, str | None] | None = None,
        inherit_env: bool = True,
    ) -> None:
        if not isinstance(program, str) or not program:
            raise TypeError(f"program must be a non-empty str, got {program!r}")
        self.program = program
        self.arg0 = arg0
        self.args = [str(arg) for arg in args]
        self.env: dict[str, str | None] = dict(env or {})
        self.inherit_env = inherit_env

    def with_env(self, env: Mapping[str, str | None]) -> BootstrapCommand:
        """A copy of this command with ``env`` set on top of its variables.

        Args:
            env: variables to set; a ``None`` value removes one.

        Returns:
            The new command (this one is unchanged).
        """
        return BootstrapCommand(
            self.program, self.arg0, self.args, {**self.env, **env}, self.inherit_env
        )

    def argv(self) -> list[str]:
        """The full argument vector: ``argv[0]`` then ``args``."""
        return [self.arg0 or self.program, *self.args]

    def environment(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment the command runs in.

        Args:
            base: the launching process's environment; ``None``: ``os.environ``.

        Returns:
            ``base`` (or nothing, without ``inherit_env``) with ``env`` applied.
        """
        made = dict(os.environ if base is None else base) if self.inherit_env else {}
        for name, value in self.env.items():
            if value is None:
                made.pop(name, None)
            else:
                made[name] = value
        return made

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BootstrapCommand):
            return NotImplemented
        return (self.program, self.arg0, self.args, self.env, self.inherit_env) == (
            other.program,
            other.arg0,
            other.args,
            other.env,
            other.inherit_env,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, as Monarch's

    def __repr__(self) -> str:
        return (
            f"BootstrapCommand(program={self.program!r}, arg0={self.arg0!r}, args={self.args!r}, "
            f"env={self.env!r}, inherit_env={self.inherit_env!r})"
        )


def default_bootstrap_cmd() -> BootstrapCommand:
    """The command a host of this runtime starts its processes' fork server
    with: this interpreter running ``monarch_actor._procs.zygote``, with the
    ``preload`` setting resolved for this script (the modules every process
    imports once, before forking: torch when this script uses it).

    Every process a host mesh spawns is forked from that server, so it starts
    with the server's interpreter and environment. The host adds the fork
    server's own arguments (where to report, what each process runs) after ``args``.

    Returns:
        The command, to inspect or to copy with ``with_env``.
    """
    configured = PRELOAD.get().strip()
    if configured == "auto":
        preload = "torch" if "torch" in sys.modules else ""
    else:
        preload = "" if configured == "none" else configured
    return BootstrapCommand(
        sys.executable, None, ["-m", FORK_SERVER_MODULE], {PRELOAD.env[0]: preload}
    )


def command_spec(command: BootstrapCommand) -> dict[str, object]:
    """``command`` as plain data (msgpack-able), as a host's fork server receives it."""
    return {
        "program": command.program,
        "argv": command.argv(),
        "env": dict(command.env),
        "inherit": bool(command.inherit_env),
    }


def proc_environment(spec: Mapping[str, object], base: Mapping[str, str]) -> dict[str, str]:
    """The environment a process launched by the command ``spec`` runs in.

    Args:
        spec: a command as ``command_spec`` gives it.
        base: the environment of the host's fork server (the host's own).

    Returns:
        ``base`` (with ``inherit_env``; otherwise only the runtime's own
        ``MONARCH_*``/``HYPERACTOR_*`` variables of it), then the command's
        variables set or removed.
    """
    if spec.get("inherit", True):
        made = dict(base)
    else:
        made = {k: v for k, v in base.items() if k.startswith(RUNTIME_PREFIXES)}
    env = spec.get("env") or {}
    assert isinstance(env, Mapping)
    for name, value in env.items():
        if value is None:
            made.pop(name, None)
        else:
            made[str(name)] = str(value)
    return made
