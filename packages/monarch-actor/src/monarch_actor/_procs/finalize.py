"""What a process does before it exits cleanly, in place of the interpreter's own
finalization: a process forked from the host agent ends with ``os._exit`` (the
agent's interpreter state is not its to tear down), so without this the
``atexit`` handlers user code registered and the ``__del__`` of objects held in
module globals would never run, as they do in Monarch's processes."""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import os
import sys
import sysconfig
import types


def forget_inherited_exit_handlers() -> frozenset[str]:
    """Drop the ``atexit`` handlers inherited from the host agent (they are the
    agent's, not this process's) and return the modules imported so far."""
    atexit._clear()
    return frozenset(sys.modules)


@functools.cache
def _installed_code() -> tuple[str, ...]:
    """Where installed libraries and the standard library live (the same for
    every process of one interpreter: a fork server works it out once,
    ``prepare``, and its procs inherit it)."""
    paths = sysconfig.get_paths()
    return tuple(
        {
            os.path.realpath(paths[key]) + os.sep
            for key in ("stdlib", "platstdlib", "purelib", "platlib")
        }
    )


def prepare() -> None:
    """Work out now what ``finalize`` needs to tell the user's modules from
    installed ones (it reads the interpreter's configuration: milliseconds),
    so that a fork server's procs inherit it instead of each working it out
    as it exits."""
    _installed_code()


def _users(
    name: str, module: object, inherited: frozenset[str], installed: tuple[str, ...]
) -> bool:
    # the user's own modules (a script's siblings, test modules): installed libraries
    # and this runtime keep their state until the process is gone
    if name in inherited or name.split(".")[0].startswith("monarch"):
        return False
    file = getattr(module, "__file__", None)
    return isinstance(file, str) and not os.path.realpath(file).startswith(installed)


def finalize(inherited: frozenset[str]) -> None:
    """Run this process's ``atexit`` handlers, then release what the user's own
    modules hold in their globals, so that their objects' finalizers run.

    Functions, classes and modules stay bound, so a ``__del__`` can still use the
    names it needs; installed libraries are left as they are.

    Args:
        inherited: the modules the process started with (left alone).
    """
    installed = _installed_code()
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    kept = (types.ModuleType, types.FunctionType, type, types.BuiltinFunctionType)
    for name in reversed(list(sys.modules)):
        module = sys.modules.get(name)
        if module is None or not _users(name, module, inherited, installed):
            continue
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for key in [
            k
            for k, v in list(namespace.items())
            if not k.startswith("__") and not isinstance(v, kept)
        ]:
            with contextlib.suppress(BaseException):
                del namespace[key]
    with contextlib.suppress(BaseException):
        gc.collect()
