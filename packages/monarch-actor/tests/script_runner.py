"""Running a short controller script in a subprocess (shared by the process
tests; a module of its own, so no test module imports another by name)."""

import signal
import subprocess
import sys
import textwrap

SCRIPT_HEAD = textwrap.dedent(
    """
    import os, sys, time, asyncio
    from monarch_actor import Actor, endpoint, this_host, current_rank
    from monarch_actor._api.proc_control import host_agent

    class Pid(Actor):  # defined in __main__: travels by value
        @endpoint
        def pid(self) -> int:
            return os.getpid()

        @endpoint
        def say(self, text: str) -> None:
            print(text, flush=True)
    """
)


def run_script(body: str, **kw):
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT_HEAD + textwrap.dedent(body)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # as from a terminal, even when the tests run as a background job (SIGINT ignored)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        **kw,
    )
