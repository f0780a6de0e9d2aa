"""Timing helpers shared by the benchmark workloads. Each workload runs in its
own virtual environment (ours, torchmonarch, Ray), so this module uses the
standard library only; the workloads import it from their own folder."""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

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


def _machine_busy() -> float:
    """CPU seconds every core of this machine has spent working since boot:
    user, nice, system, irq and softirq (not idle, iowait or steal)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    return sum(values[i] for i in (0, 1, 2, 5, 6)) / os.sysconf("SC_CLK_TCK")


def machine_cpu(fn: Callable[[], object], calls: int) -> float:
    """CPU seconds the whole machine spends per ``fn()`` (every process,
    user and kernel: Linux's ``/proc/stat``), over ``calls`` calls back to
    back. On a machine with ``n`` cores a call cannot take less than this
    divided by ``n``, however its work is spread."""
    before = _machine_busy()
    for _ in range(calls):
        fn()
    return (_machine_busy() - before) / calls


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


def note_calls(
    owner: Any, name: str, log: list[tuple[str, float]], before: str = "", after: str = ""
) -> None:
    """Wrap ``owner.name`` so that each call appends ``(before, clock)`` to
    ``log`` as it starts and ``(after, clock)`` as it ends (an empty label
    notes nothing). The clock is ``time.perf_counter()``: ``CLOCK_MONOTONIC``,
    the same in every process of a host, so two processes' notes compare."""
    real = getattr(owner, name)

    def noted(*args: Any, **kwargs: Any) -> Any:
        if before:
            log.append((before, time.perf_counter()))
        try:
            return real(*args, **kwargs)
        finally:
            if after:
                log.append((after, time.perf_counter()))

    setattr(owner, name, noted)


def report_stages(
    title: str, stages: dict[str, list[float]], totals: list[float], result: dict[str, Any]
) -> dict[str, Any]:
    """Print the median of each stage and of the whole (seconds in, µs out)
    and add them to ``result``, with ``matched`` (how many were traced
    through every stage), ``total_us`` and ``stages`` (the names, in order)."""
    result["matched"] = min((len(values) for values in stages.values()), default=0)
    result["total_us"] = statistics.median(totals) * 1e6 if totals else None
    result["stages"] = list(stages)
    width = max(len(stage) for stage in [*stages, "whole"])
    print(title)
    for stage, values in stages.items():
        result[stage] = statistics.median(values) * 1e6 if values else None
        shown = "-" if not values else f"{result[stage]:8.1f} µs"
        print(f"  {stage:<{width}} {shown}")
    if totals:
        print(f"  {'whole':<{width}} {result['total_us']:8.1f} µs ({len(totals)})")
    return result
