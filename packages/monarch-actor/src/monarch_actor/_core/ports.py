"""Ports: where answers go. ``Channel.open()`` makes a ``Port`` (picklable,
send it anywhere) and the ``PortReceiver`` that reads what arrives on it."""

from __future__ import annotations

import collections
import concurrent.futures
from typing import Any, Generic, TypeVar

from monarch_transport import DecodeError, decode_payload

from .future import Future
from .process import get_runtime
from .router import Frames
from .wire import Key, port_header

__all__ = ["Channel", "Port", "PortReceiver", "RankedPortReceiver"]

R = TypeVar("R")


class Port(Generic[R]):
    """The sending end of a channel: picklable, so it can be passed to any actor.

    ``send`` is fire-and-forget and ordered; callable from any thread. Made by
    ``Channel.open()`` (or given to an ``explicit_response_port`` endpoint).

    Args:
        address: the address of the process that receives.
        pid: the id of the receiving port in that process.
        rank: the rank the messages are tagged with, for a ranked receiver.

    Attributes:
        return_undeliverable: kept for compatibility with Monarch's ports; this
            runtime does not read it.
    """

    __slots__ = ("_address", "_pid", "_rank", "return_undeliverable")

    def __init__(self, address: str, pid: int, rank: int = 0) -> None:
        self._address = address
        self._pid = pid
        self._rank = rank
        self.return_undeliverable = True

    def send(self, obj: R) -> None:
        """Send ``obj`` (pickled) to the receiver, without waiting.

        Args:
            obj: the message.
        """
        get_runtime().send(self._address, port_header(self._pid, self._rank), obj)

    def exception(self, exc: BaseException) -> None:
        """Make the receiver's next ``recv()`` raise ``exc``.

        Args:
            exc: the exception to raise at the receiver.
        """
        get_runtime().send(self._address, port_header(self._pid, self._rank, failed=True), exc)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Port, (self._address, self._pid, self._rank))

    def __repr__(self) -> str:
        return f"Port({self._address}#{self._pid})"


class PortReceiver(Generic[R]):
    """The receiving end: ``recv()`` is a ``Future`` of the next message.

    Messages are kept in arrival order until received.

    Args:
        once: close the port after its first message.
        ranked: deliver each message as ``(sender's rank, value)``.

    Attributes:
        port: the sending end, to hand to whoever answers.
    """

    def __init__(self, once: bool = False, ranked: bool = False) -> None:
        self._runtime = get_runtime()
        self._items: collections.deque[tuple[bool, Any]] = collections.deque()
        self._waiters: collections.deque[concurrent.futures.Future[Any]] = collections.deque()
        self._once = once
        self._ranked = ranked
        self._pid = self._runtime.run_sync(self._runtime.open_port, self._deliver)
        self.port: Port[R] = Port(self._runtime.address, self._pid)

    def _deliver(self, header: dict[str, Any], frames: Frames) -> None:  # on the loop
        try:
            value = decode_payload(frames)  # the router has read the header
            failed = Key.FAILED in header
        except DecodeError as error:
            value, failed = error, True
        if self._ranked and not failed:
            value = (header.get(Key.RANK, 0), value)
        if self._waiters:
            waiter = self._waiters.popleft()
            if failed:
                waiter.set_exception(_as_error(value))
            else:
                waiter.set_result(value)
        else:
            self._items.append((failed, value))
        if self._once:
            self._runtime.close_port(self._pid)

    def _take(self, waiter: concurrent.futures.Future[Any]) -> None:  # on the loop
        if self._items:
            failed, value = self._items.popleft()
            if failed:
                waiter.set_exception(_as_error(value))
            else:
                waiter.set_result(value)
        else:
            self._waiters.append(waiter)

    def recv(self) -> Future[R]:
        """A ``Future`` of the next message; it raises what the sender passed to ``exception``."""
        waiter: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._runtime.call_soon(self._take, waiter)
        return Future._of(waiter)

    def close(self) -> None:
        """Close the port: what is sent to it afterwards is not received."""
        self._runtime.call_soon(self._runtime.close_port, self._pid)


def _as_error(value: object) -> BaseException:
    if isinstance(value, BaseException):
        return value
    return RuntimeError(f"the port received a failure that is not an exception: {value!r}")


class RankedPortReceiver(PortReceiver[R]):
    """A receiver whose messages arrive as ``(sender's rank, value)``.

    Args:
        once: close the port after its first message.
    """

    def __init__(self, once: bool = False) -> None:
        super().__init__(once, ranked=True)


class Channel(Generic[R]):
    """Ports and their receivers: ``Channel.open()`` gives ``(port, receiver)``."""

    @staticmethod
    def open(once: bool = False) -> tuple[Port[R], PortReceiver[R]]:
        """A new port of this process and its receiver.

        Args:
            once: close the port after its first message.

        Returns:
            ``(port, receiver)``.
        """
        receiver: PortReceiver[R] = PortReceiver(once)
        return receiver.port, receiver

    @staticmethod
    def open_ranked(once: bool = False) -> tuple[Port[R], RankedPortReceiver[R]]:
        """As ``open``, with a receiver that gives ``(sender's rank, value)`` pairs.

        Args:
            once: close the port after its first message.

        Returns:
            ``(port, receiver)``.
        """
        receiver: RankedPortReceiver[R] = RankedPortReceiver(once)
        return receiver.port, receiver
