"""``proc_bind``: pin each process of a mesh to CPUs, as Monarch's
``spawn_procs(proc_bind=[...])`` does. Keys: ``cpus`` or ``physcpubind`` (a CPU
list such as ``"0-3,8"``) and ``cpunodebind`` (NUMA nodes, whose CPUs are read
from sysfs). ``membind`` needs a NUMA memory policy, which this runtime does
not set: it is refused with a clear error rather than ignored."""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["apply_binding", "check_binding", "cpu_list"]

KNOWN = frozenset({"cpus", "physcpubind", "cpunodebind", "membind"})
NODE_CPUS = "/sys/devices/system/node/node{}/cpulist"


def cpu_list(text: str) -> set[int]:
    """``"0-3,8"`` -> ``{0, 1, 2, 3, 8}``."""
    cpus: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            raise ValueError(f"{text!r} is not a CPU list such as '0-3,8'") from None
        if first < 0 or last < first:
            raise ValueError(f"{text!r} is not a CPU list such as '0-3,8'")
        cpus.update(range(first, last + 1))
    if not cpus:
        raise ValueError(f"{text!r} names no CPU")
    return cpus


def _cpus_of(binding: Mapping[str, str]) -> set[int]:
    cpus: set[int] | None = None
    for key in ("cpus", "physcpubind"):
        if key in binding:
            cpus = cpu_list(binding[key])
    if "cpunodebind" in binding:
        on_nodes: set[int] = set()
        for node in cpu_list(binding["cpunodebind"]):
            try:
                with open(NODE_CPUS.format(node)) as f:
                    on_nodes |= cpu_list(f.read().strip())
            except OSError:
                raise ValueError(f"this host has no NUMA node {node}") from None
        cpus = on_nodes if cpus is None else cpus & on_nodes
    return cpus if cpus is not None else set()


def check_binding(binding: object) -> None:
    """Reject a binding this runtime cannot apply, at ``spawn_procs`` time."""
    if not isinstance(binding, Mapping):
        raise TypeError(f"each proc_bind entry is a dict, got {type(binding).__name__}")
    unknown = set(binding) - KNOWN
    if unknown:
        raise ValueError(f"proc_bind keys are {sorted(KNOWN)}; unknown: {sorted(unknown)}")
    if "membind" in binding:
        raise ValueError(
            "proc_bind 'membind' (a NUMA memory policy) is not supported; bind CPUs with "
            "'cpunodebind' and memory follows first touch"
        )
    cpus = _cpus_of(binding)
    available = os.sched_getaffinity(0)
    if cpus and not cpus & available:
        raise ValueError(f"proc_bind {dict(binding)} names no CPU this process may use")


def apply_binding(binding: Mapping[str, str] | None) -> None:
    """In a new process: restrict it to the binding's CPUs."""
    if binding:
        cpus = _cpus_of(binding) & os.sched_getaffinity(0)
        if cpus:
            os.sched_setaffinity(0, cpus)
