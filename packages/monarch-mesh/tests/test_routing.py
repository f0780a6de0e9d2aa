import math
import random

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from monarch_mesh import Branch, RoutingTree, Shape, Slice
from monarch_mesh.testing import shapes


def log_ceil(n: int, base: int) -> int:
    """ceil(log_base(n)) in exact integer arithmetic."""
    depth, reach = 0, 1
    while reach < n:
        reach *= base
        depth += 1
    return depth


def check_tree(tree: RoutingTree, destinations: list[int]) -> None:
    """Every destination reached exactly once from the root, no cycles, depth bound."""
    parent_of = {tree.root: None}
    level = {tree.root: 0}
    for parent, child in tree.edges():
        assert child not in parent_of, f"rank {child} reached twice"
        assert parent in parent_of, "edges come parent first (breadth first)"
        parent_of[child] = parent
        level[child] = level[parent] + 1
    assert sorted(parent_of) == sorted(destinations)
    # n nodes, n - 1 edges, every node reached from the root: a tree, so no cycles
    depth = max(level.values())
    assert depth == tree.depth
    if tree.fanout > 1:
        assert depth <= log_ceil(len(destinations), tree.fanout)
    else:
        assert depth == len(destinations) - 1


def check_queries(tree: RoutingTree, sample: list[int]) -> None:
    """children()/parent()/branch() answer without a walk, and agree with each other."""
    for rank in sample:
        branch = tree.branch(rank)
        assert tree.rank(branch.first) == rank
        for child in tree.children(rank):
            assert tree.parent(child) == rank
        parent = tree.parent(rank)
        if parent is None:
            assert rank == tree.root
        else:
            assert rank in tree.children(parent)


@given(st.integers(1, 3000), st.integers(1, 20))
@example(1, 16)
@example(17, 16)
@example(257, 16)
def test_trees_over_slices(size, fanout):
    tree = RoutingTree(Slice.new_row_major([size]), fanout)
    check_tree(tree, list(range(size)))
    check_queries(tree, random.Random(size).sample(range(size), min(size, 50)))


@settings(max_examples=3)
@given(st.integers(1, 1_000_000), st.sampled_from([2, 16]))
@example(1_000_000, 16)
@example(1_000_000, 2)
def test_trees_over_a_million_ranks(size, fanout):
    shape = Shape(["hosts", "gpus"], Slice.new_row_major([-(-size // 8), 8])).flatten("rank")
    shape = shape.select("rank", slice(0, size))
    tree = RoutingTree(shape, fanout)
    check_tree(tree, shape.ranks())
    assert tree.depth <= log_ceil(size, fanout)


@given(shapes(), st.integers(2, 5))
def test_trees_over_sparse_shapes(shape, fanout):
    tree = RoutingTree(shape, fanout)
    check_tree(tree, shape.ranks())
    check_queries(tree, shape.ranks())


@given(st.lists(st.integers(0, 500), unique=True, min_size=1, max_size=200), st.integers(2, 6))
def test_trees_over_arbitrary_rank_lists(ranks, fanout):
    tree = RoutingTree(ranks, fanout)
    check_tree(tree, ranks)
    check_queries(tree, ranks)
    assert tree.root == min(ranks)


def test_subtrees_are_contiguous_so_hosts_stay_together():
    # 4 hosts x 8 gpus, fan-out 4: each of the root's children owns a block of
    # consecutive ranks, so most forwarding stays inside one host.
    tree = RoutingTree(Slice.new_row_major([4, 8]), fanout=4)
    blocks = [tree.branch(child) for child in tree.children(tree.root)]
    assert blocks == [Branch(1, 9), Branch(9, 17), Branch(17, 25), Branch(25, 32)]


def test_no_enumeration_on_huge_meshes():
    # 10**12 ranks: anything that enumerated them would never finish
    huge = Slice.new_row_major([10**6, 10**6])
    tree = RoutingTree(huge, fanout=16)
    assert tree.depth == 10
    last = 10**12 - 1
    path = [last]
    while (parent := tree.parent(path[-1])) is not None:
        path.append(parent)
    assert path[-1] == 0
    assert len(path) - 1 <= tree.depth
    assert all(len(tree.children(r)) <= 16 for r in path)


def test_depth_matches_the_bound_formula():
    for n in [1, 2, 15, 16, 17, 256, 257, 4096, 65536, 65537, 10**6]:
        assert RoutingTree(Slice.new_row_major([n]), 16).depth <= math.ceil(math.log(n, 16) - 1e-12)


def test_errors():
    with pytest.raises(ValueError, match="at least one destination"):
        RoutingTree([])
    with pytest.raises(ValueError, match="fanout must be an int >= 1"):
        RoutingTree([1, 2], fanout=0)
    with pytest.raises(ValueError, match="more than once"):
        RoutingTree([1, 2, 2])
    tree = RoutingTree([1, 5, 6])
    with pytest.raises(ValueError, match="rank 4 is not a destination"):
        tree.children(4)
    with pytest.raises(ValueError, match="not in"):
        RoutingTree(Slice.new_row_major([4])).parent(9)


def _deliver_host_aware(hosts: list[str], root_host: str, fanout: int):
    """Walk the host-aware tree as the runtime does: the root hands on every
    position, each receiver its branch's rest. Returns (reached, hops), hops
    being (from host, to host) per message."""
    from monarch_mesh import host_children

    reached, hops = [], []
    todo = [(root_host, b) for b in host_children(0, hosts, root_host, fanout)]
    while todo:
        sender, branch = todo.pop()
        me = hosts[branch.first]
        reached.append(branch.first)
        hops.append((sender, me))
        rest = hosts[branch.first + 1 : branch.stop]
        todo.extend((me, b) for b in host_children(branch.first + 1, rest, me, fanout))
    return reached, hops


@given(
    st.lists(st.integers(1, 5), min_size=1, max_size=12),
    st.integers(1, 6),
    st.booleans(),
)
def test_host_aware_tree_reaches_each_once_and_crosses_into_each_host_once(runs, fanout, local):
    hosts = [f"h{i}" for i, n in enumerate(runs) for _ in range(n)]
    root = "h0" if local else "controller"
    reached, hops = _deliver_host_aware(hosts, root, fanout)
    assert sorted(reached) == list(range(len(hosts)))
    crossings = [(a, b) for a, b in hops if a != b]
    entered = [b for _, b in crossings]
    assert len(entered) == len(set(entered))  # no host is entered twice
    assert set(entered) == set(hosts) - ({root} if local else set())


def test_host_aware_tree_on_one_host_is_the_plain_tree():
    from monarch_mesh import host_children

    for n in range(1, 40):
        for fanout in (1, 2, 16):
            assert host_children(0, ["a"] * n, "a", fanout) == Branch(-1, n).children(fanout)
