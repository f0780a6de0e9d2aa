"""Timing helpers shared by the benchmark workloads. Each workload runs in its
own virtual environment (ours, torchmonarch, Ray), so this module uses the
standard library only; the workloads import it from their own folder."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

SWEEP = (1, 2, 4, 8, 16, 32, 64)  # mesh sizes of the latency sweep


def cuda_skip_reason() -> str | None:
    """Why a CUDA benchmark cannot run here (None: it can). Imports torch."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return f"CUDA is not available here (torch {torch.__version__})"
    return None


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def median_time(fn: Callable[[], object], samples: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def best_time(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def sizes(text: str) -> list[int]:
    """``--sweep 1,2,4``: comma-separated sizes ('' for none)."""
    return [int(n) for n in text.split(",") if n]
