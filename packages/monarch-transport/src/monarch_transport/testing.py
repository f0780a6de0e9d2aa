"""Helpers for tests: playing another local user against a running job, and
waiting on the loop for a state nothing signals.

An attacker on a shared machine is a process of another uid: it can connect
to loopback ports and to world-reachable sockets, but cannot read the job
user's environment, files or memory. ``run_as_other_user`` runs a short
Python program as such a process (uid and gid 65534, ``nobody``, no
supplementary groups, via ``setpriv``) with the system's interpreter and the
standard library only, as a real intruder would have.

Examples:
    >>> from monarch_transport.testing import other_user_unavailable
    >>> isinstance(other_user_unavailable(), (str, type(None)))
    True
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from typing import Final

__all__ = ["OTHER_UID", "other_user_unavailable", "run_as_other_user", "until"]

OTHER_UID: Final = 65534
"""The uid (and gid) the other user runs as: ``nobody``."""


def _interpreter() -> str | None:
    # the test's own interpreter may live under a folder only its user can
    # enter (a virtual environment in /root); the system's is everyone's
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3", sys.executable):
        if os.path.exists(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def other_user_unavailable() -> str | None:
    """Why ``run_as_other_user`` cannot run here, or ``None`` when it can.

    It needs root (to switch uid) and ``setpriv`` (util-linux).
    """
    if os.geteuid() != 0:
        return "switching to another uid needs root"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed"
    if _interpreter() is None:
        return "no Python interpreter the other user can run"
    return None


def run_as_other_user(
    code: str, *args: str, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (a Python program; ``sys.argv[1:]`` are ``args``) as uid
    65534 with no supplementary groups, and return how it ended, its output
    captured as text. The program is written to a file the other user can
    read; nothing of this process's environment is passed on but ``PATH``.

    Args:
        code: the program's source; dedented first.
        args: its command-line arguments.
        timeout: the most seconds it may run.

    Raises:
        RuntimeError: another user cannot be played here (``other_user_unavailable``).
        subprocess.TimeoutExpired: it ran longer than ``timeout``.
    """
    why = other_user_unavailable()
    if why is not None:
        raise RuntimeError(f"cannot run as another user: {why}")
    interpreter = _interpreter()
    assert interpreter is not None
    folder = tempfile.mkdtemp(prefix="monarch-intruder-")
    try:
        os.chmod(folder, 0o755)
        script = os.path.join(folder, "intruder.py")
        with open(script, "w") as file:
            file.write(textwrap.dedent(code))
        os.chmod(script, 0o644)
        command = [
            "setpriv",
            f"--reuid={OTHER_UID}",
            f"--regid={OTHER_UID}",
            "--clear-groups",
            interpreter,
            "-I",  # isolated: no user site, no PYTHON* variables, no cwd on the path
            script,
            *args,
        ]
        return subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=folder,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": folder},
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def until(condition: Callable[[], object], timeout: float = 10.0) -> bool:
    """Wait on the running loop until ``condition()`` is true, looking every
    few milliseconds, for at most ``timeout`` seconds: for an async test that
    waits on a state nothing signals (a listener's count of connections).
    Where an event exists, wait on it instead; a synchronous test has
    ``monarch_actor.testing.wait_for``.

    Args:
        condition: what to wait for; called until it returns something true.
        timeout: seconds to wait at most.

    Returns:
        Whether the condition came true (it is looked at once more at the deadline).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if condition():
            return True
        await asyncio.sleep(0.01)  # the poll's pace; the condition is what is waited on
    return bool(condition())
