"""Each process's tensors (its shards), by reference number.

One table per process, shared by every worker actor there (one per mesh
view and stream), by the actors whose rref results it keeps, and by the
endpoints that receive shards as arguments. A reference appears when the
operation that makes it has run, on whichever thread ran it; whoever needs
it waits for it. Reference numbers are never reused, so this is the only
ordering streams, rref results and shard arguments need.

Two things arrive on other threads than the stream that frees a reference,
so they must not race its ``drop``: a shard sent to an endpoint is *lent*
under a reference of its own, in stream order, which its one reader takes
(the drop of the original may then come at once); and an rref result kept
after its tensor was already dropped is let go as it arrives.
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Any

import torch
from torch.utils import _pytree as pytree

from ._config import TENSOR_WAIT
from ._errors import RemoteTensorError

__all__ = ["TABLE", "Poison", "Ref", "Shard", "Table", "keep", "local_shard", "wait_limit"]


def wait_limit() -> float:
    """How long a process waits for a tensor it needs, in seconds (the
    ``tensor_wait`` setting, ``MONARCH_TENSOR_WAIT``: a collective's peers may be slow)."""
    return TENSOR_WAIT.get()


class Ref:
    """A tensor's number in the processes' tables, inside a command."""

    __slots__ = ("id",)

    def __init__(self, id: int) -> None:
        self.id = id

    def __reduce__(self) -> tuple[Any, ...]:
        return (Ref, (self.id,))

    def __repr__(self) -> str:
        return f"Ref({self.id})"


class Poison:
    """What a failed operation leaves in place of its results."""

    __slots__ = ("error",)

    def __init__(self, error: RemoteTensorError) -> None:
        self.error = error


class Table:
    """Tensors by reference number; ``get`` waits for one not made yet."""

    def __init__(self) -> None:
        self._values: dict[int, Any] = {}
        # dropped before they were made (an rref result its actor keeps late)
        self._gone: set[int] = set()
        self._changed = threading.Condition()
        self._waiting = 0

    def put(self, ref: int, value: Any) -> None:
        """Make ``ref`` hold ``value`` (a tensor, a ``Poison`` or a marker);
        a ``ref`` already dropped stays empty."""
        self._values[ref] = value
        if self._gone:
            with self._changed:
                if ref in self._gone:
                    self._gone.discard(ref)
                    self._values.pop(ref, None)
                    return
        if self._waiting:
            with self._changed:
                self._changed.notify_all()

    def get(self, ref: int, timeout: float | None = None) -> Any:
        """The value of ``ref``, once it is made (a ``RemoteTensorError``
        after ``timeout``, default ``wait_limit()``)."""
        value = self._values.get(ref)
        if value is not None:
            return value
        limit = wait_limit() if timeout is None else timeout
        deadline = time.monotonic() + limit
        with self._changed:
            self._waiting += 1
            try:
                while (value := self._values.get(ref)) is None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise RemoteTensorError(
                            f"tensor {ref} was not made on this process within {limit:.0f} s "
                            "(MONARCH_TENSOR_WAIT): the operation that makes it never ran here, "
                            "or is still running"
                        )
                    self._changed.wait(left)
            finally:
                self._waiting -= 1
        return value

    def tensor(self, ref: int) -> Any:
        """The tensor ``ref`` (waiting for it); a poisoned one raises its error."""
        value = self.get(ref)
        if isinstance(value, Poison):
            raise value.error
        return value

    def pop(self, ref: int) -> None:
        """Forget ``ref``; one not made yet is forgotten when it is."""
        if self._values.pop(ref, None) is None:
            with self._changed:
                self._gone.add(ref)
                if self._values.pop(ref, None) is not None:  # made meanwhile
                    self._gone.discard(ref)

    def take(self, ref: int) -> Any:
        """``tensor(ref)``, forgetting ``ref``: a lent shard has one reader."""
        try:
            return self.tensor(ref)
        finally:
            self._values.pop(ref, None)

    def __contains__(self, ref: int) -> bool:
        return ref in self._values

    def __len__(self) -> int:
        return len(self._values)


TABLE = Table()


class Shard:
    """A distributed tensor sent to an actor endpoint: it arrives as the
    receiving process's own shard (a plain ``torch.Tensor``). ``ref`` is the
    reference the shard is lent under (see ``TensorWorker._lend``)."""

    __slots__ = ("ref",)

    def __init__(self, ref: int) -> None:
        self.ref = ref

    def __reduce__(self) -> tuple[Any, ...]:
        return (local_shard, (self.ref,))


def local_shard(ref: int) -> Any:
    """This process's shard lent under ``ref`` (waiting until the stream
    lends it), taken: an endpoint's message is decoded once."""
    return TABLE.take(ref)


def keep(refs: list[int], outcome: Any) -> None:
    """The ``keep`` extension: an rref call's result becomes this process's
    shards of ``refs`` (an error poisons them)."""
    if isinstance(outcome, BaseException):
        error = (
            outcome
            if isinstance(outcome, RemoteTensorError)
            else RemoteTensorError(
                f"the endpoint raised {type(outcome).__name__}: {outcome}\n"
                + "".join(traceback.format_exception(outcome)).rstrip()
            )
        )
        for ref in refs:
            TABLE.put(ref, Poison(error))
        return
    tensors = [leaf for leaf in pytree.tree_leaves(outcome) if isinstance(leaf, torch.Tensor)]
    if len(tensors) != len(refs):
        error = RemoteTensorError(
            f"the endpoint returned {len(tensors)} tensors but its propagate= said {len(refs)}"
        )
        for ref in refs:
            TABLE.put(ref, Poison(error))
        return
    for ref, tensor in zip(refs, tensors, strict=True):
        TABLE.put(ref, tensor)
