"""``monarch.gradient``: ``GradientGenerator``, gradients one at a time
(``monarch_tensor.gradient``)."""

from monarch_tensor.gradient import GradientGenerator

__all__ = ["GradientGenerator"]
