"""The debugger's command language (``list``, ``attach``, ``cast ... ranks(...)``,
``continue``, ...) and the tables it prints. Pure functions: no sockets, no actors."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "HELP",
    "Attach",
    "Cast",
    "Command",
    "CommandError",
    "Continue",
    "Detach",
    "Help",
    "ListSessions",
    "Quit",
    "Ranks",
    "parse_command",
    "parse_ranks",
    "selects",
    "table",
]

DimRanks = int | list[int] | range
Ranks = int | list[int] | range | dict[str, DimRanks]
"""What ``ranks(...)`` selects: one rank, a list, a range, or per-dimension values."""

RANKS_EXAMPLES = "ranks(1), ranks(1,3), ranks(0:4), ranks(0:8:2), ranks(hosts=0, gpus=1:3)"

HELP = f"""\
monarch_dbg commands:
  list                          the sessions: every actor stopped at breakpoint()
  attach <actor> <rank>         an interactive pdb on one session; 'detach' comes back here
  cast <actor> ranks(...) <cmd> send one pdb command to several sessions, print each output
                                ranks: {RANKS_EXAMPLES}
  continue                      clear breakpoints and continue every stopped session
  detach                        (inside a session) come back to this prompt
  help                          this text
  quit                          leave the debugger; the sessions stay for the next client
"""


class CommandError(ValueError):
    """A debugger command that cannot be carried out; the text says what to type instead."""


@dataclass(frozen=True)
class Attach:
    """``attach <actor> <rank>``."""

    actor: str
    rank: int


@dataclass(frozen=True)
class Cast:
    """``cast <actor> ranks(...) <pdb command>``."""

    actor: str
    ranks: Ranks
    command: str


@dataclass(frozen=True)
class ListSessions:
    """``list``."""


@dataclass(frozen=True)
class Continue:
    """``continue``."""


@dataclass(frozen=True)
class Detach:
    """``detach`` (at the top level: nothing to detach from)."""


@dataclass(frozen=True)
class Help:
    """``help``."""


@dataclass(frozen=True)
class Quit:
    """``quit``."""


Command = Attach | Cast | ListSessions | Continue | Detach | Help | Quit

_SIMPLE: dict[str, Command] = {
    "l": ListSessions(),
    "list": ListSessions(),
    "c": Continue(),
    "continue": Continue(),
    "detach": Detach(),
    "h": Help(),
    "help": Help(),
    "?": Help(),
    "q": Quit(),
    "quit": Quit(),
    "exit": Quit(),
}
_INT = re.compile(r"\d+")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_command(line: str) -> Command:
    """The command a line typed at the ``monarch_dbg>`` prompt asks for.

    Raises:
        CommandError: the line is no command, or its arguments are malformed.
    """
    text = line.strip()
    word, _, rest = text.partition(" ")
    rest = rest.strip()
    simple = _SIMPLE.get(word)
    if simple is not None:
        if rest:
            raise CommandError(f"'{word}' takes no arguments, got {rest!r}")
        return simple
    if word in ("a", "attach"):
        parts = rest.split()
        if len(parts) != 2 or not _INT.fullmatch(parts[1]):
            raise CommandError(
                f"usage: attach <actor> <rank>, e.g. 'attach trainers 0'; got {text!r}"
            )
        return Attach(parts[0], int(parts[1]))
    if word == "cast":
        return _parse_cast(rest, text)
    raise CommandError(f"unknown command {word!r}; enter 'help' for the commands")


def _parse_cast(rest: str, text: str) -> Cast:
    usage = f"usage: cast <actor> ranks(...) <pdb command>, with {RANKS_EXAMPLES}; got {text!r}"
    actor, _, rest = rest.partition(" ")
    rest = rest.lstrip()
    if not actor or not rest.startswith("ranks("):
        raise CommandError(usage)
    end = _closing(rest)
    if end < 0:
        raise CommandError(f"ranks( is not closed: {usage}")
    spec = rest[len("ranks(") : end]
    command = rest[end + 1 :].strip()
    if not command:
        raise CommandError(f"no pdb command to cast: {usage}")
    return Cast(actor, parse_ranks(spec), command)


def _closing(text: str) -> int:
    """Where the parenthesis that ``text``'s first one opens closes; -1 if it does not."""
    depth = 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return i
    return -1


def parse_ranks(spec: str) -> Ranks:
    """What the text inside ``ranks(...)`` selects.

    ``1`` is one rank, ``1,3`` a list, ``start:stop:step`` a range (each part
    optional), ``dim=value, ...`` values per dimension (a value is a rank, a
    range or a parenthesized list).

    Raises:
        CommandError: the text is none of these.
    """
    text = spec.strip()
    if not text:
        raise CommandError(f"ranks() is empty: write one of {RANKS_EXAMPLES}")
    if "=" in text:
        dims: dict[str, DimRanks] = {}
        for item in _split_top(text):
            name, equals, value = item.partition("=")
            name = name.strip()
            if not equals or not _NAME.fullmatch(name):
                raise CommandError(f"ranks({spec}): {item.strip()!r} is not dim=value")
            if name in dims:
                raise CommandError(f"ranks({spec}): the dimension {name!r} is given twice")
            dims[name] = _dim_value(value.strip(), spec)
        return dims
    return _value(text, spec)


def _dim_value(text: str, spec: str) -> DimRanks:
    if text.startswith("(") and text.endswith(")"):
        inner = text[1:-1]
        return [_int(part, spec) for part in inner.split(",")] if inner.strip() else []
    return _value(text, spec)


def _value(text: str, spec: str) -> DimRanks:
    if ":" in text:
        parts = text.split(":")
        if len(parts) > 3:
            raise CommandError(f"ranks({spec}): a range is start:stop or start:stop:step")
        start = _int(parts[0], spec) if parts[0].strip() else 0
        stop = _int(parts[1], spec) if parts[1].strip() else sys.maxsize
        step = _int(parts[2], spec) if len(parts) == 3 and parts[2].strip() else 1
        if step == 0:
            raise CommandError(f"ranks({spec}): a range's step cannot be 0")
        return range(start, stop, step)
    if "," in text:
        return [_int(part, spec) for part in text.split(",")]
    return _int(text, spec)


def _int(text: str, spec: str) -> int:
    if not _INT.fullmatch(text.strip()):
        raise CommandError(
            f"ranks({spec}): {text.strip()!r} is not a rank (a whole number >= 0); "
            f"write one of {RANKS_EXAMPLES}"
        )
    return int(text)


def _split_top(text: str) -> list[str]:
    """``text`` split at the commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def selects(ranks: Ranks, rank: int, coords: Mapping[str, int]) -> bool:
    """Whether ``ranks`` selects the actor at ``rank`` (``coords`` in its mesh)."""
    if isinstance(ranks, dict):
        for dim, wanted in ranks.items():
            if dim not in coords or not _has(wanted, coords[dim]):
                return False
        return True
    return _has(ranks, rank)


def _has(wanted: DimRanks, value: int) -> bool:
    if isinstance(wanted, int):
        return value == wanted
    return value in wanted


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """``rows`` under ``headers`` in aligned columns, one line each."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"
