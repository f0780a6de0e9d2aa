"""The tensor engine's settings, declared in the registry of ``monarch_config``."""

from __future__ import annotations

from monarch_config import Duration, declare

__all__ = ["TENSOR_WAIT"]

TENSOR_WAIT = declare(
    "tensor_wait",
    Duration(),
    300.0,
    env="MONARCH_TENSOR_WAIT",
    doc="How long a process waits for a tensor it needs from an operation not done "
    "yet (a collective's peers may be that slow) before failing the operation.",
    owner="monarch-tensor",
)
