"""The configuration reference, written from the registry."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any

from ._kinds import Choice, Int
from ._registry import Setting, settings

__all__ = ["reference_markdown"]


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _default(setting: Setting[Any]) -> str:
    if setting.default is None:
        return "unset"
    if isinstance(setting.default, enum.Enum):
        return f"`{type(setting.default).__name__}.{setting.default.name}`"
    return f"`{setting.kind.show(setting.default)!r}`".replace("'", '"')


def _kind(setting: Setting[Any]) -> str:
    kind = setting.kind
    if isinstance(kind, Choice):
        return "one of " + ", ".join(f"`{c}`" for c in kind.choices)
    if isinstance(kind, Int) and kind.minimum is not None:
        return f"{kind.what}, at least {kind.minimum}"
    return kind.what


def reference_markdown(selected: Iterable[Setting[Any]] | None = None) -> str:
    """The settings as Markdown tables, one per declaring distribution.

    Args:
        selected: the settings to list; all those declared so far by default.

    Returns:
        A section per distribution (``### monarch-actor``) with a table of
        key, default, environment variables, kind and meaning.
    """
    chosen = list(settings().values() if selected is None else selected)
    lines: list[str] = []
    for owner in sorted({s.owner for s in chosen}):
        lines += [
            f"### {owner}",
            "",
            "| key | default | environment | kind | what it changes |",
            "|---|---|---|---|---|",
        ]
        for s in sorted((s for s in chosen if s.owner == owner), key=lambda s: s.name):
            env = "<br>".join(f"`{v}`" for v in s.env) or "—"
            row = [f"`{s.name}`", _default(s), env, _cell(_kind(s)), _cell(s.doc)]
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    return "\n".join(lines)
