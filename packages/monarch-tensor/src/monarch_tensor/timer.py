"""Timing code where it runs (Monarch's ``monarch.timer``): ``ExecutionTimer``
measures sections of a process's work, with CUDA events on the GPU's stream
(so the time is the kernels', not the launch's) or ``time.perf_counter`` on
the CPU. The module's functions are what remote functions name to time work
on every process of a mesh, e.g.
``remote("monarch_tensor.timer.execution_timer_start", propagate="inspect")``,
and to fetch the result as a tensor.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import ClassVar

import torch

__all__ = [
    "ExecutionTimer",
    "execution_timer_start",
    "execution_timer_stop",
    "get_execution_timer_average_ms",
    "get_execution_timer_summary",
    "get_latest_timer_measurement",
    "get_time_perfcounter",
]

log = logging.getLogger("monarch.timer")

DEFAULT = "default"


class ExecutionTimer:
    """Times named sections of this process's work; every section may be
    timed many times. A class with class methods only: one set of timings per
    process, shared by every thread.

    GPU sections are timed between CUDA events recorded on the current stream
    and read when a summary or a measurement is asked for; CPU sections (or
    any section, where CUDA is missing) with ``time.perf_counter``.

    Attributes:
        cuda: whether sections are timed on the GPU by default (CUDA is available).
    """

    cuda: ClassVar[bool] = torch.cuda.is_available()
    _lock: ClassVar[threading.Lock] = threading.Lock()
    _times: ClassVar[dict[str, list[float]]] = {}
    _cpu_started: ClassVar[dict[str, list[float]]] = {}
    # (begin, end) CUDA events of each section, started and ended but not yet read
    _gpu_started: ClassVar[dict[str, list[tuple[torch.cuda.Event, torch.cuda.Event]]]] = {}
    _gpu_pending: ClassVar[dict[str, list[tuple[torch.cuda.Event, torch.cuda.Event]]]] = {}

    @classmethod
    @contextlib.contextmanager
    def time(cls, name: str | None = None, use_cpu: bool = False) -> Iterator[None]:
        """Time the ``with`` block as section ``name``.

        Args:
            name: the section; ``None``: ``"default"``.
            use_cpu: time on the CPU clock even where CUDA is available.
        """
        cls.start(name, use_cpu)
        try:
            yield
        finally:
            cls.stop(name, use_cpu)

    @classmethod
    def start(cls, name: str | None = None, use_cpu: bool = False) -> None:
        """Start timing section ``name`` (sections of one name may nest).

        Args:
            name: the section; ``None``: ``"default"``.
            use_cpu: time on the CPU clock even where CUDA is available.
        """
        name = name or DEFAULT
        with cls._lock:
            cls._times.setdefault(name, [])
            if use_cpu or not cls.cuda:
                cls._cpu_started.setdefault(name, []).append(time.perf_counter())
                return
        begin = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        begin.record(torch.cuda.current_stream())
        with cls._lock:
            cls._gpu_started.setdefault(name, []).append((begin, end))

    @classmethod
    def stop(cls, name: str | None = None, use_cpu: bool = False) -> None:
        """Stop the latest ``start`` of section ``name`` and keep its time.

        Args:
            name: the section; ``None``: ``"default"``.
            use_cpu: as given to ``start``.

        Raises:
            RuntimeError: the section was not started.
        """
        name = name or DEFAULT
        if use_cpu or not cls.cuda:
            with cls._lock:
                started = cls._cpu_started.get(name)
                if not started:
                    raise RuntimeError(f"timer section {name!r} was not started on the CPU")
                cls._times[name].append((time.perf_counter() - started.pop()) * 1000)
            return
        with cls._lock:
            running = cls._gpu_started.get(name)
            if not running:
                raise RuntimeError(f"timer section {name!r} was not started on the GPU")
            begin, end = running.pop()
        end.record(torch.cuda.current_stream())
        with cls._lock:
            cls._gpu_pending.setdefault(name, []).append((begin, end))

    @classmethod
    def _settle(cls, name: str | None = None) -> None:
        """Wait for the GPU sections measured so far and keep their times."""
        with cls._lock:
            names = list(cls._gpu_pending) if name is None else [name]
            pending = [(n, cls._gpu_pending.pop(n, [])) for n in names]
        for section, pairs in pending:
            for begin, end in pairs:
                end.synchronize()
                elapsed = float(begin.elapsed_time(end))
                with cls._lock:
                    cls._times.setdefault(section, []).append(elapsed)

    @classmethod
    def reset(cls) -> None:
        """Forget every measurement (sections being timed stay started)."""
        cls._settle()
        with cls._lock:
            cls._times = {}

    @classmethod
    def summary(cls) -> dict[str, dict[str, float]]:
        """Statistics of every section measured at least once.

        Returns:
            ``{section: {"count", "mean_ms", "total_ms", "min_ms", "max_ms"}}``.
        """
        cls._settle()
        with cls._lock:
            return {
                name: {
                    "count": len(times),
                    "mean_ms": sum(times) / len(times),
                    "total_ms": sum(times),
                    "min_ms": min(times),
                    "max_ms": max(times),
                }
                for name, times in cls._times.items()
                if times
            }

    @classmethod
    def get_latest_measurement(cls, name: str | None = None) -> float:
        """The last time measured for section ``name``, in milliseconds.

        Args:
            name: the section; ``None``: ``"default"``.

        Returns:
            The time, or ``0.0`` (with a warning) if the section was never measured.
        """
        name = name or DEFAULT
        cls._settle(name)
        with cls._lock:
            times = cls._times.get(name)
            if not times:
                log.warning("timer section %r has no measurement", name)
                return 0.0
            return times[-1]


def execution_timer_start(name: str | None = None, use_cpu: bool = False) -> None:
    """``ExecutionTimer.start`` (a remote function's body).

    Args:
        name: the section; ``None``: ``"default"``.
        use_cpu: time on the CPU clock even where CUDA is available.
    """
    ExecutionTimer.start(name, use_cpu)


def execution_timer_stop(name: str | None = None, use_cpu: bool = False) -> None:
    """``ExecutionTimer.stop`` (a remote function's body).

    Args:
        name: the section; ``None``: ``"default"``.
        use_cpu: as given to ``execution_timer_start``.
    """
    ExecutionTimer.stop(name, use_cpu)


def get_execution_timer_average_ms(name: str = DEFAULT) -> torch.Tensor:
    """The mean time of section ``name`` in milliseconds, as a float64 scalar tensor.

    Args:
        name: the section.

    Raises:
        KeyError: the section was never measured.
    """
    stats = ExecutionTimer.summary().get(name)
    if stats is None:
        raise KeyError(f"timer section {name!r} has no measurement")
    return torch.tensor(stats["mean_ms"], dtype=torch.float64)


def get_latest_timer_measurement(name: str | None = None) -> torch.Tensor:
    """The last time of section ``name`` in milliseconds, as a float64 scalar tensor.

    Args:
        name: the section; ``None``: ``"default"``.
    """
    return torch.tensor(ExecutionTimer.get_latest_measurement(name), dtype=torch.float64)


def get_execution_timer_summary() -> dict[str, dict[str, float]]:
    """``ExecutionTimer.summary()`` (a remote function's body)."""
    return ExecutionTimer.summary()


def get_time_perfcounter() -> torch.Tensor:
    """This process's ``time.perf_counter()`` in seconds, as a float64 scalar tensor."""
    return torch.tensor(time.perf_counter(), dtype=torch.float64)
