"""This process's runtime: where it is kept, the job's folder, where the
process listens, and how the controller's runtime starts on first use.

How a runtime starts is the composition root's business (``_boot``): it
registers the starter here, so this layer needs nothing above it.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Callable

from monarch_transport import Address, default_listen_address

from .router import Runtime

__all__ = [
    "LISTEN_ENV",
    "get_runtime",
    "install",
    "job_dir",
    "join_job",
    "listen_address",
    "maybe_runtime",
    "set_starter",
]

JOB_DIR_ENV = "MONARCH_JOB_DIR"

_job_dir: str | None = None


def job_dir() -> str:
    """A folder of this job's own (Unix sockets live there), made by the
    controller and removed when it ends; its procs inherit it. A controller
    always makes its own, even when started by another job's process."""
    global _job_dir
    if _job_dir is None:
        _job_dir = os.environ[JOB_DIR_ENV] = tempfile.mkdtemp(prefix="monarch-job-")
        atexit.register(shutil.rmtree, _job_dir, True)
    return _job_dir


def join_job(folder: str) -> None:
    """In a proc: use the job folder of the controller that started it."""
    global _job_dir
    _job_dir = folder


LISTEN_ENV = "MONARCH_LISTEN_ADDRESS"


def listen_address() -> Address:
    """Where this process listens: the configured kind; Unix sockets in the
    job's folder; ``$MONARCH_LISTEN_ADDRESS`` where a worker set it for the
    procs it starts (``tcp://HOST:0`` or ``tls+tcp://HOST:0``: so that the
    other hosts reach them)."""
    configured = os.environ.get(LISTEN_ENV)
    if configured:
        return Address.parse(configured)
    address = default_listen_address()
    if address.scheme == "ipc":
        name = os.path.basename(address.path or "") or f"{uuid.uuid4().hex[:16]}.sock"
        address = Address("ipc", path=os.path.join(job_dir(), name))
    return address


_runtime: Runtime | None = None
_lock = threading.Lock()
_starter: Callable[[], Runtime] | None = None


def set_starter(starter: Callable[[], Runtime]) -> None:
    """How a plain script's runtime (the controller's) is started on first use."""
    global _starter
    _starter = starter


def maybe_runtime() -> Runtime | None:
    """This process's runtime, or ``None`` if none has started."""
    return _runtime


def install(runtime: Runtime) -> None:
    global _runtime
    _runtime = runtime


def get_runtime() -> Runtime:
    """This process's runtime; in a plain script, started on first use on a
    background thread (the controller)."""
    runtime = _runtime
    if runtime is not None:
        return runtime
    with _lock:
        if _runtime is None:
            if _starter is None:
                raise RuntimeError("no way to start the runtime: import monarch_actor first")
            install(_starter())
        assert _runtime is not None
        return _runtime
