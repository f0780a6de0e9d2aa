"""What the topology screen shows of each node: its one-line label in the
tree and its detail pane (a job, host, process or actor of the topology the
server returns). Pure functions from the server's JSON to rich renderables.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ._format import (
    ACTOR_STYLE,
    PROC_STYLE,
    _clock,
    _count,
    _duration,
    _proc_name,
    _proc_status,
)


def _actor_label(actor: dict[str, Any]) -> Text:
    """An actor's line in the tree: name, class, state badge and counters."""
    status = str(actor.get("status", "?"))
    label = Text()
    label.append(f"{actor.get('name')}[{actor.get('rank')}]", style="bold")
    label.append(f" {actor.get('class', '')}", style="cyan")
    label.append("  ")
    if status == "busy" and actor.get("current"):
        label.append(
            f"busy {actor['current']} {_duration(float(actor.get('current_for', 0)))}",
            style=ACTOR_STYLE["busy"],
        )
    else:
        shown = status.upper() if status == "failed" else status
        label.append(shown, style=ACTOR_STYLE.get(status, ""))
    label.append(f"  {actor.get('messages', 0)} msgs", style="dim")
    if actor.get("failures"):
        label.append(f"  {actor['failures']} failed", style="red")
    if actor.get("mailbox"):
        label.append(f"  {actor['mailbox']} queued", style="yellow")
    return label


def _proc_label(proc: dict[str, Any]) -> Text:
    """A process's line in the tree: name, pid, state and its actors."""
    status = _proc_status(proc)
    label = Text()
    label.append(_proc_name(proc), style="bold")
    if proc.get("pid"):
        label.append(f"  pid {proc['pid']}", style="dim")
    label.append("  ")
    label.append(status, style=PROC_STYLE.get(status, "bold red"))
    actors = proc.get("actors", [])
    if actors:
        label.append(f"  {_count(len(actors), 'actor')}", style="dim")
    failed = sum(actor.get("status") == "failed" for actor in actors)
    if failed:
        label.append(f"  {failed} failed", style="bold red")
    return label


def _host_label(host: dict[str, Any]) -> Text:
    """A host's line in the tree: its processes, actors and failures."""
    procs = host.get("procs", [])
    actors = [actor for proc in procs for actor in proc.get("actors", [])]
    bad = sum(_proc_status(proc) in ("no answer", "exited", "failed") for proc in procs)
    bad += sum(actor.get("status") == "failed" for actor in actors)
    label = Text()
    label.append(str(host.get("host")), style="bold magenta")
    label.append(f"  {_count(len(procs), 'proc')}  {_count(len(actors), 'actor')}", style="dim")
    if bad:
        label.append(f"  {bad} failed", style="bold red")
    return label


def _fields(rows: Sequence[tuple[str, RenderableType]]) -> Table:
    """A two-column grid of names and values, as every detail pane lays out."""
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    for name, value in rows:
        table.add_row(name, value)
    return table


def _styled(value: str, style: str | None) -> Text:
    """``value`` in ``style`` (none for ``None``)."""
    return Text(value, style=style or "")


def _actor_detail(actor: dict[str, Any], proc: dict[str, Any]) -> RenderableType:
    """The detail pane of an actor (in process ``proc``): its fields and recent events."""
    status = str(actor.get("status", "?"))
    point = actor.get("point") or {}
    where = ", ".join(f"{dim}={value}" for dim, value in point.items())
    current = actor.get("current") or ""
    rows: list[tuple[str, RenderableType]] = [
        ("actor", Text(f"{actor.get('name')}[{actor.get('rank')}]", style="bold")),
        ("class", Text(str(actor.get("class", "")))),
        ("rank", Text(f"{actor.get('rank')}" + (f"  ({where})" if where else ""))),
        ("status", _styled(status, ACTOR_STYLE.get(status))),
    ]
    if actor.get("reason"):
        rows.append(("reason", Text(str(actor["reason"]).rstrip(), style="red")))
    rows += [
        ("messages", Text(str(actor.get("messages", 0)))),
        (
            "failures",
            _styled(str(actor.get("failures", 0)), "red" if actor.get("failures") else ""),
        ),
        ("busy", Text(_duration(float(actor.get("busy_seconds", 0.0))))),
        (
            "mailbox",
            _styled(str(actor.get("mailbox", 0)), "yellow" if actor.get("mailbox") else ""),
        ),
        ("last handler", Text(str(actor.get("last_handler") or "-"))),
        (
            "running now",
            _styled(
                f"{current} for {_duration(float(actor.get('current_for', 0.0)))}"
                if current
                else "nothing (idle)",
                "yellow" if current else "dim",
            ),
        ),
        ("started", Text(_clock(actor.get("started_at")))),
        ("process", Text(f"{_proc_name(proc)}  pid {proc.get('pid')}  on {proc.get('host')}")),
        ("key", Text(str(actor.get("key", "")), style="dim")),
    ]
    parts: list[RenderableType] = [_fields(rows), Text()]
    recorded = actor.get("events")
    if recorded is None:
        parts.append(Text("recent events: loading…", style="dim"))
    elif not recorded:
        parts.append(Text("recent events: none", style="dim"))
    else:
        table = Table(title="recent events", title_justify="left", expand=True, box=None)
        table.add_column("at", no_wrap=True)
        table.add_column("event", no_wrap=True)
        table.add_column("detail")
        table.add_column("took", justify="right", no_wrap=True)
        for event in reversed(recorded[-20:]):
            style = "red" if event.get("event") == "failed" else None
            seconds = float(event.get("seconds") or 0.0)
            table.add_row(
                _clock(event.get("at")),
                Text(str(event.get("event", "")), style=style or ""),
                Text(str(event.get("detail", ""))),
                _duration(seconds) if seconds else "",
                style=style,
            )
        parts.append(table)
    return Group(*parts)


def _proc_detail(proc: dict[str, Any]) -> RenderableType:
    """The detail pane of a process."""
    status = _proc_status(proc)
    started = proc.get("started_at")
    actors = proc.get("actors", [])
    counts: dict[str, int] = {}
    for actor in actors:
        counts[actor.get("status", "?")] = counts.get(actor.get("status", "?"), 0) + 1
    mesh = proc.get("mesh")
    rows: list[tuple[str, RenderableType]] = [
        ("process", Text(_proc_name(proc), style="bold")),
        ("status", _styled(status, PROC_STYLE.get(status, "bold red"))),
    ]
    if proc.get("error"):
        rows.append(("error", Text(str(proc["error"]), style="red")))
    rows += [
        ("pid", Text(str(proc.get("pid") or "-"))),
        ("address", Text(str(proc.get("address") or "-"))),
        ("host", Text(str(proc.get("host") or "-"))),
        (
            "mesh / rank",
            Text(f"{mesh}  rank {proc.get('rank')}" if mesh is not None else "- (the controller)"),
        ),
        ("kind", Text(str(proc.get("kind") or "proc"))),
        (
            "up since",
            Text(f"{_clock(started)}  ({_duration(time.time() - started)})" if started else "-"),
        ),
        (
            "actors",
            Text(
                f"{len(actors)}"
                + (
                    "  (" + ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) + ")"
                    if counts
                    else ""
                )
            ),
        ),
        ("messages", Text(str(sum(actor.get("messages", 0) for actor in actors)))),
    ]
    meshes = proc.get("proc_meshes") or []
    if meshes:
        rows.append(
            (
                "started meshes",
                Text(", ".join(f"{m.get('name')} ({m.get('size')} procs)" for m in meshes)),
            )
        )
    if proc.get("owner"):
        rows.append(("started by", Text(str(proc["owner"]), style="dim")))
    return _fields(rows)


def _host_detail(host: dict[str, Any]) -> RenderableType:
    """The detail pane of a host: tallies of its processes and actors."""
    procs = host.get("procs", [])
    actors = [actor for proc in procs for actor in proc.get("actors", [])]

    def tally(states: Sequence[str]) -> str:
        counts: dict[str, int] = {}
        for state in states:
            counts[state] = counts.get(state, 0) + 1
        return ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "none"

    return _fields(
        [
            ("host", Text(str(host.get("host")), style="bold magenta")),
            ("processes", Text(f"{len(procs)}  ({tally([_proc_status(p) for p in procs])})")),
            ("actors", Text(f"{len(actors)}  ({tally([a.get('status', '?') for a in actors])})")),
            ("messages", Text(str(sum(actor.get("messages", 0) for actor in actors)))),
            ("failures", Text(str(sum(actor.get("failures", 0) for actor in actors)))),
            ("mailboxes", Text(f"{sum(actor.get('mailbox', 0) for actor in actors)} queued")),
        ]
    )


def _job_detail(found: dict[str, Any], url: str) -> RenderableType:
    """The detail pane of the job (the tree's root): the server at ``url`` and the summary."""
    summary = found.get("summary", {})
    rows: list[tuple[str, RenderableType]] = [
        ("server", Text(url)),
        ("controller", Text(str(found.get("controller", "-")))),
    ]
    for name in ("hosts", "procs", "actors", "failed_actors", "failed_procs", "messages"):
        value = summary.get(name, 0)
        style = "bold red" if name.startswith("failed") and value else None
        rows.append((name.replace("_", " "), _styled(str(value), style)))
    return _fields(rows)
