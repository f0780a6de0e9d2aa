"""The actors living in this process, by key: where ``Kind.CALL`` messages
are delivered, what is remembered of actors that stopped, and messages that
arrived before their actor's spawn."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from monarch_transport import encode_header

from .._core.gather import Gather
from .._core.reply import Reply
from .._core.router import Frames, Runtime
from .._core.wire import Key, Op, call_header, port_header

__all__ = ["Hosted", "LocalActors"]

UNKNOWN_ACTOR_GRACE = 10.0  # seconds a message waits for its actor's spawn message


class Hosted(Protocol):
    """One actor of this process, as its directory sees it."""

    key: str
    name: str

    def post(self, header: dict[str, Any], frames: Frames) -> None:
        """Queue a message for the actor (from the control loop)."""

    def join(self, timeout: float) -> None:
        """Wait for the actor's thread to end."""

    def busy(self) -> bool:
        """Whether a message runs or waits here: a stop would wait behind it."""


class LocalActors:
    """This process's actors (a runtime service; used on the control loop)."""

    def __init__(
        self, runtime: Runtime, make: Callable[[Runtime, dict[str, Any], Frames], Hosted]
    ) -> None:
        self.runtime = runtime
        self.make = make  # starts an actor from its spawn message
        self.hosts: dict[str, Hosted] = {}
        self.gone: dict[str, str] = {}  # actors that stopped here, and why
        # messages for actors whose spawn has not arrived yet, by actor key
        self.waiting: dict[str, list[tuple[dict[str, Any], Frames]]] = {}
        # what this process's bootstrap raised: every spawn here fails with it
        self.setup_error: Exception | None = None

    def deliver(self, header: dict[str, Any], frames: Frames) -> None:
        """The handler of ``Kind.CALL``: the message's actor here gets it."""
        key = header[Key.ACTOR]
        host = self.hosts.get(key)
        if host is not None:
            host.post(header, frames)
        elif header[Key.OP] == Op.SPAWN and self.setup_error is not None:
            raised = getattr(self.setup_error, "exception", self.setup_error)
            self.gone[key] = f"was not started: the bootstrap raised {raised!r}"
            port = header.get(Key.REPLY_TO)
            if port is not None:
                reply = port_header(port[1], header[Key.BRANCH][0], True)
                self.runtime.send(port[0], reply, self.setup_error)
        elif header[Key.OP] == Op.SPAWN:
            self.hosts[key] = host = self.make(self.runtime, header, frames)
            for early_header, early_frames in self.waiting.pop(key, []):
                host.post(early_header, early_frames)
        elif key in self.gone:
            self.undeliverable(
                header, frames, f"actor {header.get(Key.NAME, key)} {self.gone[key]}"
            )
        else:
            # sent by a process that heard of the actor before its spawn reached us
            early = self.waiting.setdefault(key, [])
            if not early:
                self.runtime.loop.call_later(UNKNOWN_ACTOR_GRACE, self._give_up_on, key)
            early.append((header, frames))

    def forget(self, key: str, why: str) -> None:  # on the loop
        """Actor ``key`` stopped: later messages for it are answered with ``why``."""
        self.hosts.pop(key, None)
        self.gone[key] = why

    def _give_up_on(self, key: str) -> None:
        for header, frames in self.waiting.pop(key, []):
            self.undeliverable(
                header, frames, f"no actor {header.get(Key.NAME, key)} in this process"
            )

    def undeliverable(self, header: dict[str, Any], frames: Frames, reason: str) -> None:
        one = dict(header)
        first = header[Key.BRANCH][0]
        one[Key.BRANCH] = [first, first + 1]
        self.runtime.undeliverable([encode_header(one), *frames[1:]], self.runtime.address, reason)

    def stop_all(self, reason: str, leave_busy: bool = False) -> Reply[Any]:
        """Stop every actor here (their ``__cleanup__`` runs; on the loop);
        the future resolves once all have answered, or, when ``leave_busy``
        (the process is about to end), all but those busy in a message, whose
        stop waits behind it and which the end of the process cuts short."""
        hosts = list(self.hosts.values())
        awaited = [host for host in hosts if not (leave_busy and host.busy())]
        gather = Gather(self.runtime, len(awaited), "all")
        if not awaited:
            gather.result.set_result([])
        reply_to = gather.open([self.runtime.address] * len(awaited)) if awaited else None
        for host in hosts:
            answers = host in awaited  # a stop without a reply port answers nobody
            position = awaited.index(host) if answers else 0
            stop = call_header(
                Op.STOP, host.key, host.name, reply_to if answers else None, **{Key.WHY: reason}
            )
            stop[Key.BRANCH] = [position, position + 1]
            host.post(stop, [])
        return gather.result
