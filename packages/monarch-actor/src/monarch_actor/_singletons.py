"""``get_or_spawn_controller``: one named actor per job, in the controller's
process, found or made from anywhere (the script or any actor)."""

from __future__ import annotations

import concurrent.futures
from typing import Any, TypeVar

from monarch_transport import decode

from ._future import Future
from ._runtime import Frames, Runtime, get_runtime

__all__ = ["get_or_spawn_controller", "install_singletons"]

A = TypeVar("A")


def _spawn_or_find(runtime: Runtime, name: str, cls: Any, args: Any, kwargs: Any) -> Any:
    from ._mesh import this_proc

    found = runtime.singletons.get(name)
    if found is None:
        found = runtime.singletons[name] = this_proc().spawn(name, cls, *args, **kwargs)
    elif found._class is not cls and found._class.__qualname__ != cls.__qualname__:
        raise ValueError(
            f"a controller named {name!r} exists with class {found._class.__qualname__}, "
            f"not {cls.__qualname__}"
        )
    return found


def get_or_spawn_controller(name: str, Class: type[A], *args: Any, **kwargs: Any) -> Future[A]:
    """The actor ``name`` of class ``Class`` in the controller's process,
    spawned by the first caller (with these arguments) and shared after."""
    runtime = get_runtime()
    if runtime.root == runtime.address:
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            done.set_result(_spawn_or_find(runtime, name, Class, args, kwargs))
        except Exception as error:
            done.set_exception(error)
        return Future._of(done)
    from ._port import PortReceiver

    receiver: PortReceiver[A] = PortReceiver(once=True)
    reply = [receiver.port._address, receiver.port._pid]
    runtime.send(runtime.root, {"k": "n", "p": reply}, (name, Class, args, kwargs))
    return receiver.recv()


def install_singletons(runtime: Runtime) -> None:
    def handle(header: dict[str, Any], frames: Frames) -> None:
        port = header["p"]
        answer = {"k": "p", "pid": port[1], "r": 0}
        try:
            request: Any = decode(frames)[1]
            name, cls, args, kwargs = request
            mesh = _spawn_or_find(runtime, name, cls, args, kwargs)
        except Exception as error:
            runtime.send(port[0], {**answer, "x": 1}, error)
        else:
            runtime.send(port[0], answer, mesh)

    runtime.handlers["n"] = handle
