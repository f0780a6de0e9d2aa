"""What the overlays show: the diagnostics report and one process's stacks,
as the server returns them. Pure functions from JSON to rich renderables.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from .._collect import summarize
from ._format import LABELS, _clock, _proc_name

OUTCOME_STYLE = {"pass": "green", "slow": "yellow", "fail": "bold red"}


def _diagnostics_view(
    report: dict[str, Any], failed_actors: list[str], lang: str = "en"
) -> RenderableType:
    """The diagnostics overlay: ``report`` (``AdminClient.diagnostics``) as
    tables by phase, then ``failed_actors``, labelled in ``lang``."""
    words = LABELS.get(lang, LABELS["en"])
    nodes = report.get("nodes", [])
    checks = report.get("checks", [])
    summary = report.get("summary") or summarize(checks)
    good = sum(bool(node.get("ok")) for node in nodes)
    headline = Text()
    headline.append(words["Diagnostics"], style="bold")
    headline.append(
        f"  {summary['passed']}/{summary['total']} {words['checks passed']}",
        style="green" if summary["healthy"] else "bold red",
    )
    headline.append(
        f"  ·  {good}/{len(nodes)} {words['processes answered']}",
        style="green" if good == len(nodes) else "bold red",
    )
    headline.append(f"  (at {_clock(report.get('at'))})", style="dim")
    parts: list[RenderableType] = [headline]
    for phase in ("admin_infra", "mesh"):
        ok, total = summary[f"{phase}_passed"], summary[f"{phase}_total"]
        state = words["healthy"] if ok == total else words["failing"]
        title = Text()
        title.append(f"\n{words[phase]}", style="bold")
        title.append(f"  {ok}/{total} {state}", style="green" if ok == total else "bold red")
        parts.append(title)
        table = Table(expand=True)
        table.add_column("probe", no_wrap=True)
        table.add_column("node", no_wrap=True)
        table.add_column("check", no_wrap=True)
        table.add_column("host", no_wrap=True)
        table.add_column("latency", justify="right", no_wrap=True)
        table.add_column("note")
        for check in checks:
            if check.get("phase") != phase:
                continue
            outcome = str(check.get("outcome", "fail"))
            latency = check.get("latency_ms")
            where = check.get("process")
            reason = [line.strip() for line in str(check.get("reason") or "").splitlines()]
            reason = [line for line in reason if line]
            note = check.get("error") or (
                f"failed: {reason[-1] if reason else ''}" if check.get("status") == "failed" else ""
            )
            table.add_row(
                Text(outcome.upper(), style=OUTCOME_STYLE.get(outcome, "bold red")),
                Text(str(check.get("node", ""))),
                Text(str(check.get("label", "?")) + (f" on {where}" if where else "")),
                Text(str(check.get("host") or "-")),
                Text("-" if latency is None else f"{float(latency):.2f} ms"),
                Text(str(note), style="red" if note else ""),
                style="red" if outcome == "fail" else None,
            )
        parts.append(table)
    if failed_actors:
        parts.append(Text("\n" + words["failed actors"], style="bold red"))
        parts.extend(Text("  " + line, style="red") for line in failed_actors)
    parts.append(Text("\n" + words["diag keys"], style="dim"))
    return Group(*parts)


def _stacks_view(proc: dict[str, Any], answer: dict[str, Any] | None, error: str | None) -> Text:
    """The stacks overlay for ``proc``: the server's ``answer``, or why there is none
    (``error``, or the answer's own)."""
    text = Text()
    text.append(f"Stacks of {_proc_name(proc)}", style="bold")
    text.append(f"  pid {proc.get('pid')} on {proc.get('host')}", style="dim")
    if answer is not None and answer.get("source") == "py-spy":
        text.append("  (py-spy)\n\n", style="green")
        text.append(str(answer.get("text", "")))
    elif answer is not None and "error" not in answer:
        text.append("\n\n")
        note = answer.get("note") or "py-spy did not answer"
        text.append(f"unavailable: {note}", style="bold red")
        text.append(
            "\nshowing the interpreter's own view instead: Python frames of each thread, "
            "no native frames, no GIL owner\n\n",
            style="yellow",
        )
        text.append(str(answer.get("text", "")))
    else:
        problem = error or (answer or {}).get("error") or "no answer"
        text.append("\n\n")
        text.append(f"unavailable: {problem}", style="bold red")
    text.append("\n\nEsc closes · p fetches again · j/k scroll · q quits", style="dim")
    return text
