"""``OpaqueRef``: a handle, held by the controller, to a Python object that
lives on each process of a mesh (a model, an optimizer, a data loader).

The handle travels as a small integer tensor, its *key*: a remote function
that returns ``OpaqueRef(obj)`` leaves the key in the process's tensor table
like any result, and the controller gets an ``OpaqueRef`` whose key is a
distributed tensor. Passed back to a remote function, the key arrives as
that process's own key tensor, which finds the object again. The objects are
held by their keys weakly: when the controller's handle is dropped, its key
is freed on the processes and the object with it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any, SupportsIndex

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils import _pytree as pytree
from torch.utils.weak import WeakTensorKeyDictionary

__all__ = ["OpaqueRef", "mark_worker"]

_key_table: WeakTensorKeyDictionary = WeakTensorKeyDictionary()
_keys: Iterator[int] = itertools.count(1)
_on_worker = False


def mark_worker() -> None:
    """Say that this process runs remote functions (a mesh's worker is here)."""
    global _on_worker
    _on_worker = True


class OpaqueRef:
    """A reference to a Python object that lives on the processes of a mesh.

    Make one inside a remote function and return it: the controller gets a
    handle it can pass to later remote functions, where ``ref.value`` is the
    object again. The controller itself cannot read or set the value; a
    ``propagate=`` function says "this returns a handle" with ``OpaqueRef(None)``.

    Args:
        value: the object to hold (on a process, or ``None`` in a propagate function).

    Raises:
        RuntimeError: made by the controller outside a remote function's propagation.

    Examples:
        >>> import torch
        >>> from monarch_tensor import OpaqueRef, remote
        >>> def make_model():
        ...     return OpaqueRef(torch.nn.Linear(3, 4))
        >>> make_model_remote = remote(make_model, propagate=lambda: OpaqueRef(None))
    """

    _key: torch.Tensor

    def __init__(self, value: Any = None) -> None:
        self._key = torch.tensor(next(_keys), dtype=torch.int64, device="cpu")
        self._check("create")
        _key_table[self._key] = value

    @classmethod
    def _create(cls, key: torch.Tensor) -> OpaqueRef:
        made = cls.__new__(cls)
        made._key = key
        return made

    def __reduce_ex__(
        self, protocol: SupportsIndex
    ) -> tuple[Callable[[torch.Tensor], OpaqueRef], tuple[torch.Tensor]]:
        return OpaqueRef._create, (self._key,)

    def __repr__(self) -> str:
        return f"OpaqueRef({self._key!r})"

    @property
    def value(self) -> Any:
        """The object, on a process (inside a remote function)."""
        self._check("read")
        return _key_table[self._key]

    @value.setter
    def value(self, value: Any) -> None:
        self._check("set")
        _key_table[self._key] = value

    def _check(self, what: str) -> None:
        if not (_on_worker or isinstance(self._key, FakeTensor)):
            raise RuntimeError(
                f"the controller cannot {what} the value of an OpaqueRef: its object lives on "
                "the processes of a mesh; do it inside a remote function (monarch.remote) and "
                "pass the OpaqueRef to it"
            )


def _flatten(ref: OpaqueRef) -> tuple[list[Any], Any]:
    return [ref._key], None


def _unflatten(keys: Any, context: Any) -> OpaqueRef:
    return OpaqueRef._create(next(iter(keys)))


def _flatten_with_keys(ref: OpaqueRef) -> tuple[list[tuple[Any, Any]], Any]:
    return [(pytree.GetAttrKey("_key"), ref._key)], None


# as a tree, an OpaqueRef is its key: the tensor engine sends, keeps and frees it
pytree.register_pytree_node(
    OpaqueRef,
    _flatten,
    _unflatten,
    serialized_type_name=f"{__name__}.OpaqueRef",
    flatten_with_keys_fn=_flatten_with_keys,
)
