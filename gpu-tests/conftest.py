"""The GPU suite: tests marked ``gpu`` (or ``gpu(n)`` for n GPUs) run where
torch sees CUDA and enough GPUs, and are skipped, saying why, elsewhere.

Run it alone with ``hatch test gpu-tests``, or through ``tools/gpu-check`` on
a machine with a GPU and no network."""

from __future__ import annotations

import functools

import pytest

from monarch_actor.testing import no_leaked_procs  # noqa: F401 (an autouse fixture)


@functools.cache
def visible_gpus() -> int:
    """How many GPUs torch sees here (0 without CUDA or without torch)."""
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        marker = item.get_closest_marker("gpu")
        if marker is None:
            continue
        need = int(marker.args[0]) if marker.args else 1
        have = visible_gpus()
        if have < need:
            reason = "no CUDA here" if have == 0 else f"needs {need} GPUs, {have} here"
            item.add_marker(pytest.mark.skip(reason=reason))
