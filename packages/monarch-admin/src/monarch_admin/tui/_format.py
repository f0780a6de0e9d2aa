"""The small words and styles every view shares: times, durations, counts,
a process's name and state, which processes and actors are the system's, and
the UI's labels in each language Monarch's TUI speaks.
"""

from __future__ import annotations

import time
from typing import Any

ACTOR_STYLE = {"idle": "green", "busy": "yellow", "failed": "bold red", "stopped": "dim"}
PROC_STYLE = {
    "running": "green",
    "starting": "yellow",
    "stopped": "dim",
    "exited": "bold red",
    "failed": "bold red",
}


def _clock(at: float | None) -> str:
    """A time of day to the millisecond (``-`` for none), as the panes show times."""
    if not at:
        return "-"
    seconds = time.localtime(at)
    return time.strftime("%H:%M:%S", seconds) + f".{int(at % 1 * 1000):03d}"


def _duration(seconds: float) -> str:
    """``seconds`` in the unit that reads best: ms, s, or minutes and hours."""
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 120:
        return f"{seconds:.2f} s"
    minutes, rest = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{rest:02d}s" if hours else f"{minutes}m{rest:02d}s"


def _count(n: Any, what: str) -> str:
    """``n`` and ``what``, plural unless ``n`` is 1."""
    return f"{n} {what}{'' if n == 1 else 's'}"


def _proc_name(proc: dict[str, Any]) -> str:
    """What a process is called: its name, else ``mesh[rank]``, else its address."""
    if proc.get("name"):
        return str(proc["name"])
    if proc.get("mesh") is not None:
        return f"{proc['mesh']}[{proc.get('rank')}]"
    return str(proc.get("address") or "?")


def _proc_status(proc: dict[str, Any]) -> str:
    """A process's state; ``no answer`` when the server could not reach it."""
    if "error" in proc:
        return "no answer"
    return str(proc.get("status") or "running")


def _is_system_proc(proc: dict[str, Any]) -> bool:
    # the controller and host workers run the job; the procs the script spawned do its work
    """Whether the process runs the job (the controller, a host worker) rather than its work."""
    return proc.get("kind") not in (None, "proc")


def _is_system_actor(actor: dict[str, Any]) -> bool:
    """Whether the actor is the runtime's own (its name starts with ``_``)."""
    return str(actor.get("name", "")).startswith("_")


LANGS = ("en", "zh")  # Monarch's --lang values
LABELS: dict[str, dict[str, str]] = {
    "en": {
        "topology": "topology",
        "detail": "detail",
        "diagnostics": "diagnostics",
        "Diagnostics": "Diagnostics",
        "processes answered": "processes answered",
        "checks passed": "checks passed",
        "admin_infra": "Admin infrastructure",
        "mesh": "Mesh",
        "healthy": "healthy",
        "failing": "failing",
        "probing": "probing every node of the job…",
        "failed actors": "Failed actors (from the topology):",
        "diag keys": "Esc closes · d or r runs again · j/k scroll · q quits",
        "updated": "updated",
        "every": "every",
        "help": "? help",
    },
    "zh": {  # Monarch's 简体中文 labels where it has them
        "topology": "拓扑",
        "detail": "详情",
        "diagnostics": "诊断",
        "Diagnostics": "诊断",
        "processes answered": "个进程已应答",
        "checks passed": "项检查通过",
        "admin_infra": "管理",
        "mesh": "网格",
        "healthy": "健康",
        "failing": "失败",
        "probing": "运行中…",
        "failed actors": "失败执行器:",
        "diag keys": "Esc: 返回拓扑 · d/r: 重新运行 · j/k: 滚动 · q: 退出",
        "updated": "更新于",
        "every": "每",
        "help": "?: 帮助",
    },
}
