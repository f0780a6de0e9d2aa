"""The life of a proc: forked by the host agent, it sets up the environment
its point in the mesh implies, runs the user's bootstrap, starts its runtime,
tells its owner where it listens, serves until told to stop or until its
owner vanishes, then exits."""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import pickle
import sys
from typing import Any

from monarch_transport import listen, new_event_loop

from ._binding import apply_binding
from ._controller import install_proc_handlers
from ._logs import capture_output
from ._runtime import Runtime, install, join_job, listen_address
from ._supervise import start_heartbeats

log = logging.getLogger("monarch.actor.proc")


def main(blob: bytes) -> int:
    info: dict[str, Any] = pickle.loads(blob)
    os.environ.update(info["env"])
    join_job(os.environ["MONARCH_JOB_DIR"])
    apply_binding(info.get("bind"))
    sys.argv = [info.get("argv0", "monarch-proc")]
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    bootstrap = info.get("bootstrap")
    if bootstrap is not None:
        outcome = bootstrap()
        if inspect.isawaitable(outcome):
            loop.run_until_complete(_wait(outcome))
    listener = loop.run_until_complete(listen(listen_address()))
    runtime = Runtime(loop, listener, "proc")
    runtime.root = info["root"]
    runtime.owner = info["owner"]
    install(runtime)
    install_proc_handlers(runtime, info["owner"])
    capture_output(runtime, info["owner"], info["rank"], info["env"]["HYPERACTOR_PROCESS_NAME"])
    runtime.send(
        info["owner"],
        {
            "k": "r",
            "mesh": info["mesh"],
            "rank": info["rank"],
            "addr": runtime.address,
            "pid": os.getpid(),
        },
        None,
    )
    start_heartbeats(runtime, info["owner"], info["mesh"], info["rank"], info["heartbeat"])
    runtime.serve()
    loop.run_until_complete(runtime.stopped.wait())
    loop.run_until_complete(runtime.close())
    sys.stdout.flush()
    sys.stderr.flush()
    return 0


async def _wait(outcome: Any) -> Any:
    return await outcome
