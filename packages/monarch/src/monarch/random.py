"""``monarch.random``: the random state of the processes of the active mesh,
as distributed tensors (``monarch_tensor.random``)."""

from monarch_tensor.random import State, get_state, make_deterministic, new_state, set_state

__all__ = ["State", "get_state", "make_deterministic", "new_state", "set_state"]
