"""The kinds of value a setting holds: how each is parsed from the environment
or a ``configure`` argument, checked, and shown.

Durations are seconds (a float) inside the program and read and shown as
Monarch shows them: ``"30s"``, ``"5m"``, ``"1h 30m"``, ``"250ms"``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "Bool",
    "Choice",
    "Duration",
    "Float",
    "Int",
    "Kind",
    "Size",
    "Text",
    "format_duration",
    "parse_duration",
]

_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off"})

_UNITS: Final = {
    "ns": 1e-9,
    "nsec": 1e-9,
    "us": 1e-6,
    "usec": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "msec": 1e-3,
    "millis": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "mins": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "hrs": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
    "days": 86400.0,
}
_PART: Final = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zµ]+)\s*")
_SHOWN_UNITS: Final = (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0))

_SIZE_UNITS: Final = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1000,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mb": 1000**2,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gb": 1000**3,
    "gib": 1 << 30,
    "t": 1 << 40,
    "tb": 1000**4,
    "tib": 1 << 40,
}
_SIZE: Final = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*")


def parse_duration(text: str) -> float:
    """Seconds in a duration written as Monarch writes them.

    Args:
        text: one or more number-and-unit parts (``"1h 30m"``, ``"250ms"``,
            ``"1.5s"``), or a bare number of seconds (``"30"``).

    Returns:
        The duration in seconds.

    Raises:
        ValueError: ``text`` is not a duration.

    Examples:
        >>> parse_duration("1h 30m"), parse_duration("250ms"), parse_duration("30")
        (5400.0, 0.25, 30.0)
    """
    stripped = text.strip().lower()
    try:
        return float(stripped)
    except ValueError:
        pass
    total, position = 0.0, 0
    while position < len(stripped):
        part = _PART.match(stripped, position)
        if part is None or part.group(2) not in _UNITS:
            raise ValueError(f"{text!r} is not a duration (write e.g. '30s', '5m', '1h 30m')")
        total += float(part.group(1)) * _UNITS[part.group(2)]
        position = part.end()
    if position == 0:
        raise ValueError(f"{text!r} is not a duration (write e.g. '30s', '5m', '1h 30m')")
    return total


def format_duration(seconds: float) -> str:
    """A duration as Monarch shows it: the largest units first.

    Args:
        seconds: the duration.

    Returns:
        The text, such as ``"5m"`` for 300 or ``"1m 30s"`` for 90; below a
        second, milliseconds (``"250ms"``).

    Examples:
        >>> format_duration(300), format_duration(90), format_duration(0.25)
        ('5m', '1m 30s', '250ms')
    """
    if seconds < 1 and seconds != 0:
        millis = seconds * 1000
        return f"{millis:g}ms"
    parts = []
    left = seconds
    for unit, size in _SHOWN_UNITS:
        count = math.floor(left / size + 1e-9)
        if count:
            parts.append(f"{count}{unit}")
            left -= count * size
    if left > 1e-9:
        parts.append(f"{left * 1000:g}ms")
    return " ".join(parts) or "0s"


@dataclass(frozen=True)
class Kind:
    """What a setting's values are: the base of every kind.

    Attributes:
        what: the kind in words, for error messages and the reference page.
    """

    what: str = "a value"

    def parse(self, text: str) -> Any:
        """A value from an environment variable's text.

        Args:
            text: the variable's value.

        Returns:
            The value.

        Raises:
            ValueError: the text is not a value of this kind.
        """
        return self.check(text)

    def check(self, value: Any) -> Any:
        """The value ``configure`` stores for ``value``.

        Args:
            value: what the caller passed.

        Returns:
            The value, converted where the kind allows it (a duration's text
            becomes seconds).

        Raises:
            TypeError: ``value`` is not of this kind.
            ValueError: ``value`` is of this kind but out of range.
        """
        return value

    def show(self, value: Any) -> Any:
        """``value`` as ``get_global_config`` shows it.

        Args:
            value: a value of this kind.

        Returns:
            What users read back (a duration as text, anything else as is).
        """
        return value


@dataclass(frozen=True)
class Bool(Kind):
    """True or false; in the environment ``1``/``true``/``yes``/``on`` or
    ``0``/``false``/``no``/``off``.

    Attributes:
        what: the kind in words.
    """

    what: str = "a boolean"

    def parse(self, text: str) -> bool:
        """A value from an environment variable's text (see ``Kind.parse``)."""
        word = text.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
        raise ValueError(f"{text!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")

    def check(self, value: Any) -> bool:
        """The value ``configure`` stores for ``value`` (see ``Kind.check``)."""
        if not isinstance(value, bool):
            raise TypeError(f"expected a bool, got {type(value).__name__} {value!r}")
        return value


@dataclass(frozen=True)
class Int(Kind):
    """A whole number, at least ``minimum``; with ``optional``, ``None`` (and an
    empty variable) means unset.

    Attributes:
        what: the kind in words.
        minimum: the smallest value allowed.
        optional: whether ``None`` is allowed.
    """

    what: str = "an integer"
    minimum: int | None = None
    optional: bool = False

    def parse(self, text: str) -> int | None:
        """A value from an environment variable's text (see ``Kind.parse``)."""
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError(f"{text!r} is not an integer") from None
        return self.check(value)

    def check(self, value: Any) -> int | None:
        """The value ``configure`` stores for ``value`` (see ``Kind.check``)."""
        if value is None and self.optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"expected an int, got {type(value).__name__} {value!r}")
        if self.minimum is not None and value < self.minimum:
            raise ValueError(f"must be at least {self.minimum}, got {value}")
        return value


@dataclass(frozen=True)
class Size(Int):
    """A number of bytes: an int, or text such as ``"4GiB"`` or ``"512 MiB"``.

    Attributes:
        what: the kind in words.
        minimum: the smallest value allowed.
        optional: whether ``None`` is allowed.
    """

    what: str = "a size in bytes (4294967296, '4GiB')"

    def parse(self, text: str) -> int | None:
        """A value from an environment variable's text (see ``Kind.parse``)."""
        return self.check(text)

    def check(self, value: Any) -> int | None:
        """The value ``configure`` stores for ``value`` (see ``Kind.check``)."""
        if isinstance(value, str):
            match = _SIZE.fullmatch(value.lower())
            if match is None or match.group(2) not in _SIZE_UNITS:
                raise ValueError(f"{value!r} is not a size (write e.g. 1048576, '64MiB', '4GiB')")
            value = int(float(match.group(1)) * _SIZE_UNITS[match.group(2)])
        return super().check(value)


@dataclass(frozen=True)
class Duration(Kind):
    """A duration: seconds inside the program, ``"30s"``-style text outside.

    ``configure`` takes text (``"5m"``) or a number of seconds; with
    ``units_required`` (Monarch's own duration settings) only text with units,
    as Monarch does: anything else is a ``TypeError``.

    Attributes:
        what: the kind in words.
        positive: whether zero is refused.
        units_required: whether only text with units is a duration (``"30"``,
            ``30`` and ``30.0`` are not).
    """

    what: str = "a duration ('30s', '5m', '1h 30m')"
    positive: bool = True
    units_required: bool = False

    def parse(self, text: str) -> float:
        """A value from an environment variable's text (see ``Kind.parse``)."""
        return self.check(text if self.units_required else parse_duration(text))

    def check(self, value: Any) -> float:
        """The value ``configure`` stores for ``value`` (see ``Kind.check``)."""
        if self.units_required:
            value = _text_duration(value)
        elif isinstance(value, str):
            value = parse_duration(value)
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(
                f"expected a duration such as '30s' or a number of seconds, "
                f"got {type(value).__name__} {value!r}"
            )
        seconds = float(value)
        if not math.isfinite(seconds) or seconds < 0 or (self.positive and seconds == 0):
            raise ValueError(f"must be a {'positive' if self.positive else 'finite'} duration")
        return seconds

    def show(self, value: Any) -> str:
        """``value`` as ``get_global_config`` shows it (see ``Kind.show``)."""
        return format_duration(value)


def _text_duration(value: Any) -> float:
    """Seconds in ``value``, a duration written with units (as Monarch takes them)."""
    if not isinstance(value, str):
        raise TypeError(
            f"expected a duration string such as '30s', '5m' or '1h 30m', "
            f"got {type(value).__name__} {value!r}"
        )
    try:
        float(value.strip())
    except ValueError:
        pass
    else:
        raise TypeError(
            f"Invalid duration format: {value!r} has no unit (write e.g. '{value.strip()}s')"
        )
    try:
        return parse_duration(value)
    except ValueError:
        raise TypeError(
            f"Invalid duration format: {value!r} (write e.g. '30s', '5m', '1h 30m')"
        ) from None


@dataclass(frozen=True)
class Float(Kind):
    """A number, from ``minimum`` to ``maximum`` where they are given; an int
    is taken as the same float.

    Attributes:
        what: the kind in words.
        minimum: the smallest value allowed.
        maximum: the largest value allowed.
    """

    what: str = "a number"
    minimum: float | None = None
    maximum: float | None = None

    def parse(self, text: str) -> float:
        """A value from an environment variable's text (see ``Kind.parse``)."""
        try:
            value = float(text.strip())
        except ValueError:
            raise ValueError(f"{text!r} is not a number") from None
        return self.check(value)

    def check(self, value: Any) -> float:
        """The value ``configure`` stores for ``value`` (see ``Kind.check``)."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"expected a float, got {type(value).__name__} {value!r}")
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(f"must be a finite number, got {value!r}")
        if self.minimum is not None and number < self.minimum:
            raise ValueError(f"must be at least {self.minimum}, got {value!r}")
        if self.maximum is not None and number > self.maximum:
            raise ValueError(f"must be at most {self.maximum}, got {value!r}")
        return number


@dataclass(frozen=True)
class Text(Kind):
    """A string; with ``optional``, ``None`` (and an empty variable) means unset.

    Attributes:
        what: the kind in words.
        optional: whether ``None`` is allowed.
    """

    what: str = "a string"
    optional: bool = False

    def parse(self, text: str) -> str | None:
        """A value from an environment variable's text (see ``Kind.parse``)."""
        return self.check(text.strip() or None if self.optional else text)

    def check(self, value: Any) -> str | None:
        """The value ``configure`` stores for ``value`` (see ``Kind.check``)."""
        if value is None and self.optional:
            return None
        if not isinstance(value, str):
            raise TypeError(f"expected a string, got {type(value).__name__} {value!r}")
        return value


@dataclass(frozen=True)
class Choice(Kind):
    """One of a few words (case does not matter).

    Attributes:
        what: the kind in words.
        choices: the words allowed.
    """

    what: str = "one of the listed words"
    choices: Sequence[str] = ()

    def parse(self, text: str) -> str:
        """A value from an environment variable's text (see ``Kind.parse``)."""
        return self.check(text)

    def check(self, value: Any) -> str:
        """The value ``configure`` stores for ``value`` (see ``Kind.check``)."""
        if not isinstance(value, str):
            raise TypeError(f"expected one of {list(self.choices)}, got {value!r}")
        word = value.strip().lower()
        if word not in self.choices:
            raise ValueError(f"{value!r} is not one of {', '.join(map(repr, self.choices))}")
        return word
