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
                header, frames, f"no actor {header.get(Key.NAME, key)} in this process", loud=True
            )

    def undeliverable(
        self, header: dict[str, Any], frames: Frames, reason: str, loud: bool = False
    ) -> None:
        one = dict(header)
        first = header[Key.BRANCH][0]
        one[Key.BRANCH] = [first, first + 1]
        encoded = [encode_header(one), *frames[1:]]
        self.runtime.undeliverable(encoded, self.runtime.address, reason, loud)

    def idle(self) -> list[Hosted]:
        """The actors here that no message keeps busy (on the loop)."""
        return [host for host in self.hosts.values() if not host.busy()]

    def stop_all(self, reason: str, awaited: list[Hosted] | None = None) -> Reply[Any]:
        """Stop every actor here (their ``__cleanup__`` runs; on the loop);
        the future resolves once those of ``awaited`` (default: all) have
        answered. A process about to end awaits its ``idle`` ones: a busy
        actor's stop waits behind its message, which the end cuts short."""
        hosts = list(self.hosts.values())
        positions = {id(host): i for i, host in enumerate(hosts if awaited is None else awaited)}
        gather = Gather(self.runtime, len(positions), "all")
        if not positions:
            gather.result.set_result([])
        reply_to = gather.open([self.runtime.address] * len(positions)) if positions else None
        for host in hosts:
            position = positions.get(id(host))  # none: the stop answers nobody
            answer_to = None if position is None else reply_to
            stop = call_header(Op.STOP, host.key, host.name, answer_to, **{Key.WHY: reason})
            stop[Key.BRANCH] = [position or 0, (position or 0) + 1]
            host.post(stop, [])
        return gather.result
