"""Gathering the replies of one cast on a port of this process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from monarch_transport import DecodeError, decode_payload

from .errors import SupervisionError
from .reply import Reply
from .router import Frames, Runtime
from .wire import Key

__all__ = ["Gather"]


class Gather:
    """Collects the replies of one cast (on the loop). ``mode`` is ``"one"``
    (the result is the only reply), ``"all"`` (the result is
    ``finish(values in position order)``) or ``"stream"`` (one future per
    reply, in arrival order). A failed reply fails the result at once; a
    position whose process is lost fails with ``describe(position, why)``."""

    def __init__(
        self,
        runtime: Runtime,
        count: int,
        mode: str,
        finish: Callable[[list[Any]], Any] = list,
        describe: Callable[[int, str], str] | None = None,
    ) -> None:
        self.runtime = runtime
        self.count = count
        self.mode = mode
        self.finish = finish
        self.describe = describe  # the error message of position i's loss, and why
        self.values: dict[int, Any] = {}
        self.addresses: list[str] = []
        self.result: Reply[Any] = Reply()
        self.stream: list[Reply[Any]] = [Reply() for _ in range(count)] if mode == "stream" else []
        self.pid = 0

    def open(self, addresses: list[str]) -> list[str | int]:
        """Open the port the replies come to; position ``i`` is answered by
        ``addresses[i]``, whose loss fails that position. Returns the port's
        ``[address, id]`` for the message's header."""
        self.addresses = addresses
        self.pid = self.runtime.open_port(self.deliver, self.lost)
        self.runtime.watch(self.pid, addresses if len(addresses) == 1 else list(set(addresses)))
        return [self.runtime.address, self.pid]

    def deliver(self, header: dict[str, Any], frames: Frames) -> None:
        position = header.get(Key.RANK, 0)
        if position in self.values:
            return  # a second reply (explicit ports may send twice): the first counts
        try:
            value = decode_payload(frames)  # the router has read the header
            failed = Key.FAILED in header
        except DecodeError as error:
            value, failed = error, True
        self._settle(position, value, failed)

    def _settle(self, position: int, value: Any, failed: bool) -> None:
        self.values[position] = value
        if self.mode == "stream":
            waiter = self.stream[len(self.values) - 1]
            if failed:
                waiter.set_exception(value)
            else:
                waiter.set_result(value)
        elif failed and not self.result.done():
            self.result.set_exception(value)
        if len(self.values) == self.count:
            self.runtime.close_port(self.pid)
            if not self.result.done():
                if self.mode == "one":
                    self.result.set_result(self.values[0])
                else:
                    self.result.set_result(self.finish([self.values[i] for i in range(self.count)]))

    def fail(self, error: BaseException) -> None:
        """Every position fails with ``error`` (the target is known to be dead)."""
        for position in range(self.count):
            if position not in self.values:
                self._settle(position, error, True)

    def lost(self, address: str, reason: str) -> None:
        for position, where in enumerate(self.addresses):
            if where == address and position not in self.values:
                text = self.describe(position, reason) if self.describe else reason
                self._settle(position, SupervisionError(text), True)
