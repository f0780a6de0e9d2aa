"""Selections: which ranks of a shape a message goes to.

The text syntax, by example::

    *                 every rank
    ?                 any one rank
    (*, 0)            per dimension, in label order: every host, gpu 0
    *, 0              the same (parentheses are optional around one term list)
    (0:2, 1:8:2)      ranges are start:stop[:step], as in Python (negatives too)
    (?, *)            one host chosen at random, all of its gpus
    (0, *) | (*, 0)   union
    (0:2, *) & (*, 1) intersection (binds tighter than |)
    ((0, *) | (1, 0)) & (*, 0:2)   parentheses around an expression group it

Dimensions left out at the end of a term are ``*``.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Union

from ._errors import SelectionSyntaxError, SliceError
from ._shape import Shape

__all__ = ["Selection"]

_RANDOM = random.Random()


# -- the expression tree ----------------------------------------------------------


@dataclass(frozen=True)
class _Every:
    def text(self) -> str:
        return "*"


@dataclass(frozen=True)
class _AnyOne:
    def text(self) -> str:
        return "?"


@dataclass(frozen=True)
class _Index:
    value: int

    def text(self) -> str:
        return str(self.value)


@dataclass(frozen=True)
class _Range:
    start: int | None
    stop: int | None
    step: int | None

    def text(self) -> str:
        start = "" if self.start is None else str(self.start)
        stop = "" if self.stop is None else str(self.stop)
        return f"{start}:{stop}" + ("" if self.step is None else f":{self.step}")


_Term = Union[_Every, _AnyOne, _Index, _Range]  # noqa: UP007


@dataclass(frozen=True)
class _Dims:
    terms: tuple[_Term, ...]

    def text(self) -> str:
        return "(" + ", ".join(t.text() for t in self.terms) + ")"


@dataclass(frozen=True)
class _Both:
    left: _Node
    right: _Node

    def text(self) -> str:
        return f"{_wrap(self.left, _Either)} & {_wrap(self.right, _Either)}"


@dataclass(frozen=True)
class _Either:
    left: _Node
    right: _Node

    def text(self) -> str:
        return f"{self.left.text()} | {self.right.text()}"


_Node = Union[_Every, _AnyOne, _Dims, _Both, _Either]  # noqa: UP007


def _wrap(node: _Node, looser: type) -> str:
    return f"({node.text()})" if isinstance(node, looser) else node.text()


# -- the public type ---------------------------------------------------------------


class Selection:
    """A set of ranks described independently of any particular shape.

    Build one with ``all``, ``any`` or ``from_string``; ``a & b`` selects the
    ranks both select and ``a | b`` those either selects. ``str()`` gives the
    text form. ``eval`` applies it to a shape.

    Args:
        node: the parsed expression; an internal type, so use the constructors
            above rather than calling ``Selection`` directly.

    Examples:
        >>> from monarch_mesh import Shape, Slice
        >>> shape = Shape(["hosts", "gpus"], Slice.new_row_major([2, 4]))
        >>> Selection.from_string("(*, 0) | (1, 3)").eval(shape)
        [0, 4, 7]
    """

    __slots__ = ("_node",)

    def __init__(self, node: _Node) -> None:
        self._node = node

    @staticmethod
    def all() -> Selection:
        """Every rank."""
        return Selection(_Every())

    @staticmethod
    def any() -> Selection:
        """One rank, chosen at random each time the selection is evaluated."""
        return Selection(_AnyOne())

    @staticmethod
    def from_string(text: str) -> Selection:
        """Parse a selection from its text form.

        Each term of a parenthesised list applies to one dimension, in label
        order; dimensions left out at the end are ``*``. By example:

            *                 every rank
            ?                 any one rank
            (*, 0)            every host, gpu 0
            *, 0              the same (parentheses are optional around one list)
            (0:2, 1:8:2)      ranges are start:stop[:step], as in Python (negatives too)
            (?, *)            one host chosen at random, all of its gpus
            (0, *) | (*, 0)   union
            (0:2, *) & (*, 1) intersection (binds tighter than |)
            ((0, *) | (1, 0)) & (*, 0:2)   parentheses around an expression group it

        Args:
            text: the selection text.

        Raises:
            TypeError: ``text`` is not a str.
            SelectionSyntaxError: ``text`` does not parse (a ``ValueError``).
        """
        if not isinstance(text, str):
            raise TypeError(f"selection text must be a str, got {type(text).__name__}")
        return Selection(_Parser(text).parse())

    def __and__(self, other: Selection) -> Selection:
        return Selection(_Both(self._node, other._node))

    def __or__(self, other: Selection) -> Selection:
        return Selection(_Either(self._node, other._node))

    def eval(self, shape: Shape, *, rng: random.Random | None = None) -> list[int]:
        """The selected ranks of ``shape``, in row-major order.

        Args:
            shape: the shape to select from; dimension terms apply to its
                dimensions in label order.
            rng: decides every ``?``; by default one ``random.Random()`` that
                every selection shares.

        Raises:
            TypeError: ``shape`` is not a ``Shape``.
            SliceError: a term list has more terms than ``shape`` has dimensions.
            MeshIndexError: an index is out of range, or a range picks nothing.
        """
        if not isinstance(shape, Shape):
            raise TypeError(f"eval() takes a Shape, got {type(shape).__name__}")
        chooser = rng if rng is not None else _RANDOM
        return _evaluate(self._node, shape, chooser)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Selection):
            return NotImplemented
        return self._node == other._node

    def __hash__(self) -> int:
        return hash(self._node)

    def __str__(self) -> str:
        return self._node.text()

    def __repr__(self) -> str:
        return f"Selection.from_string({self._node.text()!r})"


def _evaluate(node: _Node, shape: Shape, rng: random.Random) -> list[int]:
    if isinstance(node, _Every):
        return shape.ranks()
    if isinstance(node, _AnyOne):
        return [shape.ndslice[rng.randrange(len(shape))]] if len(shape) else []
    if isinstance(node, _Dims):
        return _box(node, shape, rng).ranks()
    left = _evaluate(node.left, shape, rng)
    right = set(_evaluate(node.right, shape, rng))
    if isinstance(node, _Both):
        return [rank for rank in left if rank in right]
    union = right.union(left)
    return [rank for rank in shape.ndslice if rank in union]


def _box(node: _Dims, shape: Shape, rng: random.Random) -> Shape:
    labels = shape.labels
    if len(node.terms) > len(labels):
        raise SliceError(
            f"selection {node.text()} has {len(node.terms)} dimension terms but shape "
            f"{shape} has {len(labels)} dimensions"
        )
    sizes = shape.ndslice.sizes
    for label, size, term in zip(labels, sizes, node.terms, strict=False):
        if isinstance(term, _Every):
            continue
        if isinstance(term, _AnyOne):
            index: int | slice = rng.randrange(size) if size else 0
        elif isinstance(term, _Index):
            index = term.value
        else:
            index = slice(term.start, term.stop, term.step)
        shape = shape.select(label, index)
    return shape


# -- the parser ----------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(?:(?P<int>-?\d+)|(?P<op>[*?(),:&|]))")


class _Parser:
    """Recursive descent over the grammar::

    expr   := conj ('|' conj)*
    conj   := atom ('&' atom)*
    atom   := '(' expr ')'                -- when '(' is followed by '('
            | '(' terms ')' | terms       -- a bare '*' or '?' means every / any one rank
    terms  := term (',' term)*
    term   := '*' | '?' | INT | [INT] ':' [INT] [':' INT]
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, str, int]] = []  # (kind, value, position)
        pos = 0
        while text[pos:].strip():
            match = _TOKEN.match(text, pos)
            if match is None:
                where = len(text) - len(text[pos:].lstrip())
                raise SelectionSyntaxError(f"unexpected character {text[where]!r}", text, where)
            group = "int" if match["int"] is not None else "op"
            kind = "int" if group == "int" else match["op"]
            self.tokens.append((kind, match[group], match.start(group)))
            pos = match.end()
        self.at = 0

    def peek(self) -> str:
        return self.tokens[self.at][0] if self.at < len(self.tokens) else "end"

    def position(self) -> int:
        return self.tokens[self.at][2] if self.at < len(self.tokens) else len(self.text)

    def fail(self, expected: str) -> SelectionSyntaxError:
        found = "end of text" if self.peek() == "end" else repr(self.tokens[self.at][1])
        return SelectionSyntaxError(
            f"expected {expected}, found {found}", self.text, self.position()
        )

    def take(self, kind: str, expected: str) -> str:
        if self.peek() != kind:
            raise self.fail(expected)
        value = self.tokens[self.at][1]
        self.at += 1
        return value

    def parse(self) -> _Node:
        if not self.tokens:
            raise SelectionSyntaxError("empty selection", self.text, 0)
        node = self.expr()
        if self.peek() != "end":
            raise self.fail("'&', '|' or the end")
        return node

    def expr(self) -> _Node:
        node = self.conj()
        while self.peek() == "|":
            self.at += 1
            node = _Either(node, self.conj())
        return node

    def conj(self) -> _Node:
        node = self.atom()
        while self.peek() == "&":
            self.at += 1
            node = _Both(node, self.atom())
        return node

    def atom(self) -> _Node:
        if self.peek() != "(":
            return self.terms(closing=None)
        self.at += 1
        if self.peek() == "(":
            node = self.expr()
            self.take(")", "')'")
            return node
        return self.terms(closing=")")

    def terms(self, closing: str | None) -> _Node:
        """Dimension terms separated by commas. Outside parentheses a lone ``*``
        is every rank and a lone ``?`` is any one rank."""
        terms = [self.term()]
        while self.peek() == ",":
            self.at += 1
            terms.append(self.term())
        if closing is not None:
            self.take(closing, "',' or ')'")
        elif len(terms) == 1 and isinstance(terms[0], _Every | _AnyOne):
            return terms[0]
        return _Dims(tuple(terms))

    def term(self) -> _Term:
        kind = self.peek()
        if kind in ("*", "?"):
            self.at += 1
            return _Every() if kind == "*" else _AnyOne()
        if kind not in ("int", ":"):
            raise self.fail("a dimension term ('*', '?', an int or start:stop[:step])")
        start = self.optional_int()
        if self.peek() != ":":
            assert start is not None
            return _Index(start)
        self.at += 1
        stop = self.optional_int()
        step = None
        if self.peek() == ":":
            self.at += 1
            where = self.position()
            step = self.optional_int()
            if step is not None and step <= 0:
                raise SelectionSyntaxError(f"step must be positive, got {step}", self.text, where)
        return _Range(start, stop, step)

    def optional_int(self) -> int | None:
        if self.peek() != "int":
            return None
        return int(self.take("int", "an int"))
