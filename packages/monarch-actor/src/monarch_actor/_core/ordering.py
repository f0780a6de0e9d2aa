"""Per-pair message order across multicast paths.

A message for an actor may reach its process directly or through the
forwarders of a multicast tree, so a later direct call could overtake an
earlier broadcast. The sender therefore numbers its messages per (receiving
address, actor), and the receiver hands them over in that order, holding any
that arrive early until the ones before them are in.

A number can go missing only when its message was lost on the way (a
forwarder died with it). The sender tells the rest of a branch it could not
deliver (``Kind.SKIP``); a gap nobody explains is waited out for
``MONARCH_ORDER_GAP_WAIT`` seconds (30), then the held messages go on, with
a warning.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["InOrder", "Numbering"]

log = logging.getLogger("monarch.actor.runtime")

Deliver = Callable[[dict[str, Any], Any], None]
Stream = tuple[str, str, str]  # (sender's origin, receiving address, actor key)


class Numbering:
    """The sender's side: the next number per (address, actor), from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next: dict[str, dict[str, int]] = {}

    def take(self, addresses: Sequence[str], actor: str) -> list[int]:
        """One number for each of ``addresses`` (for one message to ``actor``
        on each), in the order this call is made."""
        with self._lock:
            numbers = []
            for address in addresses:
                per_actor = self._next.get(address)
                if per_actor is None:
                    per_actor = self._next[address] = {}
                n = per_actor.get(actor, 0) + 1
                per_actor[actor] = n
                numbers.append(n)
            return numbers

    def forget(self, address: str) -> None:
        """``address`` is gone: a new process there starts from 1."""
        with self._lock:
            self._next.pop(address, None)


class _Waiting:
    __slots__ = ("expected", "held", "timer")

    def __init__(self) -> None:
        self.expected = 1
        self.held: dict[int, tuple[dict[str, Any], Any] | None] = {}  # None: skipped
        self.timer: Any = None


class InOrder:
    """The receiver's side (on the loop): hands messages to ``deliver`` in
    their sender's order, per (sender, address, actor)."""

    def __init__(self, deliver: Deliver, call_later: Callable[..., Any], gap_wait: float) -> None:
        self.deliver = deliver
        self.gap_wait = gap_wait
        self.call_later = call_later
        self.streams: dict[Stream, _Waiting] = {}

    def arrive(self, stream: Stream, n: int, header: dict[str, Any], frames: Any) -> None:
        """Message number ``n`` of ``stream`` is here."""
        waiting = self.streams.get(stream)
        if waiting is None:
            waiting = self.streams[stream] = _Waiting()
        if n == waiting.expected:  # the common case, with no call it can do without
            waiting.expected += 1
            try:
                self.deliver(header, frames)
            except Exception:  # one bad message must not hold up the ones after it
                log.exception("could not handle a message for actor %s", header.get("n", "?"))
            if waiting.held:
                self._release(stream, waiting)
        elif n > waiting.expected:
            waiting.held[n] = (header, frames)
            self._arm(stream, waiting)
        else:  # its gap was given up on: late, but not lost
            log.warning(
                "a message for actor %s from %s arrived after later ones (it was held up more "
                "than %g s on its way)",
                header.get("n", stream[2]),
                stream[0],
                self.gap_wait,
            )
            self._hand(header, frames)

    def skip(self, stream: Stream, n: int) -> None:
        """Message number ``n`` of ``stream`` will never come."""
        waiting = self._waiting(stream)
        if n == waiting.expected:
            waiting.expected += 1
            self._release(stream, waiting)
        elif n > waiting.expected:
            waiting.held[n] = None
            self._arm(stream, waiting)

    def _waiting(self, stream: Stream) -> _Waiting:
        waiting = self.streams.get(stream)
        if waiting is None:
            waiting = self.streams[stream] = _Waiting()
        return waiting

    def _hand(self, header: dict[str, Any], frames: Any) -> None:
        try:
            self.deliver(header, frames)
        except Exception:  # one bad message must not hold up the ones after it
            log.exception("could not handle a message for actor %s", header.get("n", "?"))

    def _release(self, stream: Stream, waiting: _Waiting) -> None:
        while waiting.expected in waiting.held:
            message = waiting.held.pop(waiting.expected)
            waiting.expected += 1
            if message is not None:
                self._hand(*message)
        if waiting.timer is not None and not waiting.held:
            waiting.timer.cancel()
            waiting.timer = None

    def _arm(self, stream: Stream, waiting: _Waiting) -> None:
        if waiting.timer is None:
            waiting.timer = self.call_later(self.gap_wait, self._give_up, stream, waiting.expected)

    def _give_up(self, stream: Stream, expected: int) -> None:
        waiting = self.streams.get(stream)
        if waiting is None:
            return
        waiting.timer = None
        if waiting.expected != expected or not waiting.held:
            if waiting.held:
                self._arm(stream, waiting)
            return
        missing = min(waiting.held) - waiting.expected
        log.warning(
            "%d message(s) for actor %s from %s did not arrive within %g s (lost with a "
            "process that forwarded them); the %d after them go on",
            missing,
            stream[2],
            stream[0],
            self.gap_wait,
            len(waiting.held),
        )
        waiting.expected = min(waiting.held)
        self._release(stream, waiting)
        if waiting.held:
            self._arm(stream, waiting)
