"""``Uid`` and ``ProcId``: Monarch's identifiers, with the same string forms.

A uid is either a *singleton* (a label alone, ``"controller"``) or an
*instance*: a random 64-bit number written in base58 (Flickr alphabet),
optionally after a label, ``"worker<43B9igyLqVe>"`` or ``"<43B9igyLqVe>"``.
Two instance uids are equal when their numbers are, whatever their labels.
"""

from __future__ import annotations

import re
import secrets

__all__ = ["ProcId", "Uid"]

_ALPHABET = "123456789abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ"
_DIGITS = {c: i for i, c in enumerate(_ALPHABET)}
_MAX_LABEL = 63
_LABEL = re.compile(r"[a-z](?:[a-z0-9_-]*[a-z0-9])?")
_UID = re.compile(r"(?P<label>[^<>]*)(?:<(?P<num>[^<>]+)>)?")


def _encode(number: int) -> str:
    if number == 0:
        return _ALPHABET[0]
    digits = []
    while number:
        number, digit = divmod(number, 58)
        digits.append(_ALPHABET[digit])
    return "".join(reversed(digits))


def _decode(text: str) -> int:
    number = 0
    for char in text:
        if char not in _DIGITS:
            raise ValueError(f"invalid uid: {text!r} is not base58")
        number = number * 58 + _DIGITS[char]
    if number >= 1 << 64:
        raise ValueError(f"invalid uid: {text!r} does not fit in 64 bits")
    return number


def _label(label: str) -> str:
    if len(label) > _MAX_LABEL or not _LABEL.fullmatch(label):
        raise ValueError(
            f"invalid uid label: {label!r} (a label is 1 to {_MAX_LABEL} lowercase letters, "
            "digits, '-' or '_', starting with a letter and ending with a letter or digit)"
        )
    return label


class Uid:
    """A unique actor-system identifier: a singleton label, or a random
    instance number with an optional label.

    Make one with ``Uid.anonymous()``, ``Uid.instance(label)`` or
    ``Uid.from_string(text)``.

    Args:
        number: the instance number (below 2**64), or ``None`` for a singleton.
        label: the label, or ``None`` for an unlabelled instance.

    Examples:
        >>> uid = Uid.from_string("worker<43B9igyLqVe>")
        >>> uid.label, uid.is_instance, str(uid)
        ('worker', True, 'worker<43B9igyLqVe>')
        >>> Uid.from_string("controller").is_singleton
        True
    """

    __slots__ = ("_label", "_number")

    def __init__(self, number: int | None, label: str | None) -> None:
        self._number = number
        self._label = label

    @staticmethod
    def anonymous() -> Uid:
        """A fresh instance uid without a label."""
        return Uid(secrets.randbits(64), None)

    @staticmethod
    def instance(label: str | None = None) -> Uid:
        """A fresh instance uid, with ``label`` shown in front of its number.

        Args:
            label: 1 to 63 lowercase letters, digits, ``-`` or ``_``, starting with a
                letter and ending with a letter or digit; ``None``: no label.

        Raises:
            ValueError: ``label`` is not a valid label.
        """
        return Uid(secrets.randbits(64), None if label is None else _label(label))

    @staticmethod
    def from_string(uid: str) -> Uid:
        """The uid ``uid`` is the string form of (``str(uid)`` reads back).

        Args:
            uid: ``label``, ``label<base58>`` or ``<base58>``.

        Raises:
            ValueError: ``uid`` is not a uid's string form.
        """
        match = _UID.fullmatch(uid)
        if match is None:
            raise ValueError(f"invalid uid: {uid!r}")
        label, number = match["label"], match["num"]
        if number is None:
            return Uid(None, _label(label))
        return Uid(_decode(number), _label(label) if label else None)

    @property
    def label(self) -> str | None:
        """The label, or ``None`` for an unlabelled instance."""
        return self._label

    @property
    def is_instance(self) -> bool:
        """Whether this is an instance uid (it has a number)."""
        return self._number is not None

    @property
    def is_singleton(self) -> bool:
        """Whether this is a singleton uid (a label alone)."""
        return self._number is None

    def __str__(self) -> str:
        if self._number is None:
            return self._label or ""
        return f"{self._label or ''}<{_encode(self._number)}>"

    def __repr__(self) -> str:
        return f"Uid({self})"

    def __hash__(self) -> int:
        return hash((self._number,) if self._number is not None else ("", self._label))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Uid):
            return NotImplemented
        if self._number is not None or other._number is not None:
            return self._number == other._number
        return self._label == other._label

    def __reduce__(self) -> tuple[object, ...]:
        return (Uid.from_string, (str(self),))


class ProcId:
    """The unique identity of a proc: its ``Uid``, shown the same way.

    Args:
        uid: the proc's uid.

    Examples:
        >>> proc = ProcId(Uid.instance("trainer"))
        >>> proc.label, ProcId.from_string(str(proc)) == proc
        ('trainer', True)
    """

    __slots__ = ("_uid",)

    def __init__(self, uid: Uid) -> None:
        if not isinstance(uid, Uid):
            raise TypeError(f"ProcId() takes a Uid, got {type(uid).__name__}")
        self._uid = uid

    @staticmethod
    def from_string(proc_id: str) -> ProcId:
        """The proc id ``proc_id`` is the string form of.

        Args:
            proc_id: its uid's string form.

        Raises:
            ValueError: ``proc_id`` is not a uid's string form.
        """
        return ProcId(Uid.from_string(proc_id))

    @property
    def uid(self) -> Uid:
        """The proc's uid."""
        return self._uid

    @property
    def label(self) -> str | None:
        """The uid's label."""
        return self._uid.label

    def __str__(self) -> str:
        return str(self._uid)

    def __repr__(self) -> str:
        label = self._uid.label
        return f"<'{label}' {self._uid}>" if label is not None else f"<{self._uid}>"

    def __hash__(self) -> int:
        return hash(self._uid)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ProcId):
            return NotImplemented
        return self._uid == other._uid

    def __reduce__(self) -> tuple[object, ...]:
        return (ProcId.from_string, (str(self),))
