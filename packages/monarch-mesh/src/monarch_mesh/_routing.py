"""Multicast routing: the spanning tree a broadcast travels down.

The destinations are numbered by position (row-major for a shape or slice,
ascending for a list of ranks). Every node of the tree owns a *branch*, a run
of consecutive positions ``[first, stop)``: it receives the message, delivers
it locally, and splits the rest of its run into at most ``fanout`` nearly
equal runs, one per child. So

* each destination is reached exactly once, with no cycles;
* the depth is at most ``ceil(log_fanout(N))``: a run of ``n <= fanout**k``
  positions leaves runs of at most ``fanout**(k-1)`` positions to its children;
* a subtree covers consecutive positions, so a broadcast to ``{hosts, gpus}``
  crosses between hosts as little as the fan-out allows;
* nothing is enumerated: a forwarding node needs only its own branch, and
  any rank's branch is found by descending from the root in ``depth`` steps.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable, Iterator, Sequence
from typing import NamedTuple, Protocol

from ._errors import RankNotFoundError, SliceError
from ._shape import Shape
from ._slice import Slice

__all__ = ["Branch", "RoutingTree", "host_children"]


class Branch(NamedTuple):
    """The positions ``[first, stop)`` one node of a routing tree is responsible for.

    The node itself is at ``first``; its subtree covers the rest.

    Attributes:
        first: the node's own position, the first of the run.
        stop: one past the last position of the run.
    """

    first: int
    stop: int

    @property
    def size(self) -> int:
        """The number of positions in the branch, the node's own included."""
        return self.stop - self.first

    def children(self, fanout: int) -> list[Branch]:
        """The branches handed to this node's children.

        Args:
            fanout: the most children a node has.

        Returns:
            At most ``fanout`` consecutive runs of nearly equal length (the
            longer ones first) covering ``[first + 1, stop)``; empty for a leaf.
        """
        rest = self.stop - self.first - 1
        if rest <= 0:
            return []
        count = min(fanout, rest)
        small, big = divmod(rest, count)  # the first `big` runs get one extra
        out = []
        start = self.first + 1
        for i in range(count):
            stop = start + small + (i < big)
            out.append(Branch(start, stop))
            start = stop
        return out

    def child_containing(self, position: int, fanout: int) -> Branch:
        """The child branch that holds ``position``, without listing the children.

        Args:
            position: a position in ``(first, stop)``; not ``first`` itself.
            fanout: the fan-out the children are split with, as in ``children``.

        Returns:
            The branch of ``children(fanout)`` that contains ``position``.
        """
        rest = self.stop - self.first - 1
        count = min(fanout, rest)
        small, big = divmod(rest, count)
        offset = position - self.first - 1
        if offset < big * (small + 1):
            start = self.first + 1 + offset // (small + 1) * (small + 1)
            return Branch(start, start + small + 1)
        start = self.first + 1 + big * (small + 1)
        start += (offset - big * (small + 1)) // small * small
        return Branch(start, start + small)


def host_children(
    start: int, hosts: Sequence[Hashable], own: Hashable, fanout: int
) -> list[Branch]:
    """The branches a node hands on when its destinations live on hosts.

    Positions of one host are a run (meshes are host-major). The rest of the
    node's own run goes down the plain tree (``Branch.children``); every
    other run is entered once, at its first position, which then serves its
    host: a broadcast crosses each host boundary once. With more runs than
    ``fanout``, runs are grouped, and a group's first host forwards to the
    others. With one host throughout, this is ``Branch(start - 1, ...).children``.

    Args:
        start: the position of ``hosts[0]``, normally the one after the node's own.
        hosts: the host of each position from ``start`` on: ``hosts[i]`` is the
            host of position ``start + i``. Any hashable values.
        own: the host of the node itself.
        fanout: the most branches the node's own run is split into, and,
            separately, the most branches across other hosts.

    Returns:
        The branches, in position order; each is handed to the node at its
        ``first`` position.

    Examples:
        >>> [tuple(b) for b in host_children(0, ["a", "a", "b", "b", "c"], "a", 16)]
        [(0, 1), (1, 2), (2, 4), (4, 5)]
    """
    runs: list[tuple[int, int]] = []
    for i, host in enumerate(hosts):
        if i and host == hosts[i - 1]:
            runs[-1] = (runs[-1][0], start + i + 1)
        else:
            runs.append((start + i, start + i + 1))
    children: list[Branch] = []
    if runs and hosts[0] == own:
        children.extend(Branch(start - 1, runs[0][1]).children(fanout))
        runs = runs[1:]
    if len(runs) <= fanout:
        children.extend(Branch(lo, hi) for lo, hi in runs)
        return children
    small, big = divmod(len(runs), fanout)
    at = 0
    for i in range(fanout):
        take = small + (i < big)
        children.append(Branch(runs[at][0], runs[at + take - 1][1]))
        at += take
    return children


class _Ranks(Protocol):
    def __len__(self) -> int: ...
    def __getitem__(self, position: int) -> int: ...
    def index(self, rank: int) -> int: ...


class _RankList:
    """Ranks that no single strided slice holds: a sorted list and its inverse."""

    def __init__(self, ranks: list[int]) -> None:
        self._ranks = ranks
        self._positions = {rank: i for i, rank in enumerate(ranks)}

    def __len__(self) -> int:
        return len(self._ranks)

    def __getitem__(self, position: int) -> int:
        return self._ranks[position]

    def index(self, rank: int) -> int:
        try:
            return self._positions[rank]
        except KeyError:
            raise RankNotFoundError(f"rank {rank} is not a destination") from None


def _as_ranks(destinations: Shape | Slice | Iterable[int]) -> _Ranks:
    if isinstance(destinations, Shape):
        return destinations.ndslice
    if isinstance(destinations, Slice):
        return destinations
    ranks = sorted(destinations)
    slices = Slice.from_list(ranks)  # also rejects duplicates and bad values
    return slices[0] if len(slices) == 1 else _RankList(ranks)


def tree_depth(size: int, fanout: int) -> int:
    """The depth of a routing tree over ``size`` destinations."""
    depth = 0
    while size > 1:
        rest = size - 1
        size = -(-rest // min(fanout, rest))
        depth += 1
    return depth


class RoutingTree:
    """The spanning tree for multicasting to ``destinations`` with ``fanout``.

    Nodes are identified by their ranks. Nothing is enumerated up front: a
    rank's branch, parent and children are found by descending from the root
    in ``depth`` steps.

    Args:
        destinations: the ranks to reach: a ``Shape`` or ``Slice`` (positions in
            row-major order) or any iterable of distinct ranks (positions in
            ascending order).
        fanout: the most children any node forwards to; an int >= 1.

    Attributes:
        fanout: the most children any node forwards to.

    Raises:
        SliceError: ``fanout`` is not an int >= 1, there are no destinations, or
            a listed rank is not an int, is negative, or appears twice.

    Examples:
        >>> tree = RoutingTree(Slice.new_row_major([1000, 1000]), fanout=16)
        >>> tree.root, tree.depth, len(tree.children(tree.root))
        (0, 5, 16)
    """

    def __init__(self, destinations: Shape | Slice | Iterable[int], fanout: int = 16) -> None:
        if isinstance(fanout, bool) or not isinstance(fanout, int) or fanout < 1:
            raise SliceError(f"fanout must be an int >= 1, got {fanout!r}")
        self._ranks = _as_ranks(destinations)
        if len(self._ranks) == 0:
            raise SliceError("a routing tree needs at least one destination")
        self.fanout = fanout

    @property
    def size(self) -> int:
        """The number of destinations."""
        return len(self._ranks)

    def __len__(self) -> int:
        return len(self._ranks)

    @property
    def depth(self) -> int:
        """Edges on the longest root-to-leaf path."""
        return tree_depth(len(self._ranks), self.fanout)

    @property
    def root(self) -> int:
        """The rank the sender hands the message to."""
        return self._ranks[0]

    @property
    def whole(self) -> Branch:
        """The root's branch: every position."""
        return Branch(0, len(self._ranks))

    def rank(self, position: int) -> int:
        """The destination rank at ``position``.

        Args:
            position: a position among the destinations; negative counts from the end.

        Raises:
            IndexError: ``position`` is out of range.
        """
        return self._ranks[position]

    def position(self, rank: int) -> int:
        """The position of ``rank`` among the destinations.

        Args:
            rank: a destination rank.

        Raises:
            RankNotFoundError: ``rank`` is not a destination.
        """
        return self._ranks.index(rank)

    def branch(self, rank: int) -> Branch:
        """The branch ``rank`` is responsible for.

        Args:
            rank: a destination rank.

        Raises:
            RankNotFoundError: ``rank`` is not a destination.
        """
        return self._descend(self._ranks.index(rank))[1]

    def children(self, rank: int) -> list[int]:
        """The ranks ``rank`` forwards to, in position order; empty for a leaf.

        Args:
            rank: a destination rank.

        Raises:
            RankNotFoundError: ``rank`` is not a destination.
        """
        return [self._ranks[b.first] for b in self.branch(rank).children(self.fanout)]

    def parent(self, rank: int) -> int | None:
        """The rank that forwards to ``rank``; ``None`` for the root.

        Args:
            rank: a destination rank.

        Raises:
            RankNotFoundError: ``rank`` is not a destination.
        """
        parent = self._descend(self._ranks.index(rank))[0]
        return None if parent is None else self._ranks[parent.first]

    def _descend(self, position: int) -> tuple[Branch | None, Branch]:
        parent, branch = None, self.whole
        while branch.first != position:
            parent, branch = branch, branch.child_containing(position, self.fanout)
        return parent, branch

    def edges(self) -> Iterator[tuple[int, int]]:
        """Every ``(parent, child)`` pair, breadth first. Enumerates the tree."""
        ranks = list(self._ranks) if isinstance(self._ranks, Slice) else self._ranks
        queue = deque([self.whole])
        while queue:
            branch = queue.popleft()
            source = ranks[branch.first]
            for child in branch.children(self.fanout):
                yield source, ranks[child.first]
                if child.stop - child.first > 1:
                    queue.append(child)
