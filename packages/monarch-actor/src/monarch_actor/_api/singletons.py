"""``get_or_spawn_controller``: one named actor per job, in the controller's
process, found or made from anywhere (the script or any actor)."""

from __future__ import annotations

import concurrent.futures
from typing import Any, TypeVar

from monarch_transport import decode

from .._core.future import Future
from .._core.ports import PortReceiver
from .._core.process import get_runtime
from .._core.router import Frames, Runtime
from .._core.wire import Key, Kind, port_header
from .mesh import this_proc

__all__ = ["Singletons", "get_or_spawn_controller"]

A = TypeVar("A")


class Singletons:
    """The controller's named actors (a runtime service): it answers
    ``Kind.SINGLETON`` requests from procs. Used on the control loop only."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.actors: dict[str, Any] = {}
        runtime.provide(self)
        runtime.handle(Kind.SINGLETON, self._on_request)

    def spawn_or_find(self, name: str, cls: Any, args: Any, kwargs: Any) -> Any:
        found = self.actors.get(name)
        if found is None:
            found = self.actors[name] = this_proc().spawn(name, cls, *args, **kwargs)
        elif found._class is not cls and found._class.__qualname__ != cls.__qualname__:
            raise ValueError(
                f"a controller named {name!r} exists with class {found._class.__qualname__}, "
                f"not {cls.__qualname__}"
            )
        return found

    def _on_request(self, header: dict[str, Any], frames: Frames) -> None:
        address, pid = header[Key.REPLY_TO]
        try:
            request: Any = decode(frames)[1]
            name, cls, args, kwargs = request
            mesh = self.spawn_or_find(name, cls, args, kwargs)
        except Exception as error:
            self.runtime.send(address, port_header(pid, failed=True), error)
        else:
            self.runtime.send(address, port_header(pid), mesh)


def get_or_spawn_controller(name: str, Class: type[A], *args: Any, **kwargs: Any) -> Future[A]:
    """The actor ``name`` of class ``Class`` in the controller's process.

    Spawned by the first caller (with these arguments) and shared after:
    callable from the script or from any actor.

    Args:
        name: the controller's name, unique in the job.
        Class: the ``Actor`` subclass; ``args`` and ``kwargs`` go to its
            ``__init__`` when it is spawned.

    Returns:
        A ``Future`` of the one-actor mesh. It fails with ``ValueError`` when a
        controller of that name exists with another class.
    """
    runtime = get_runtime()
    if runtime.root == runtime.address:
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def spawn_or_find() -> None:
            try:
                done.set_result(runtime.get(Singletons).spawn_or_find(name, Class, args, kwargs))
            except Exception as error:
                done.set_exception(error)

        # on the control loop, one request at a time, as the procs' requests are
        # served: two threads (or a thread and a proc) asking at once must not
        # both find none and spawn two
        runtime.call_soon(spawn_or_find)
        return Future._of(done)
    receiver: PortReceiver[A] = PortReceiver(once=True)
    reply = [receiver.port._address, receiver.port._pid]
    runtime.send(
        runtime.root, {Key.KIND: Kind.SINGLETON, Key.REPLY_TO: reply}, (name, Class, args, kwargs)
    )
    return receiver.recv()
