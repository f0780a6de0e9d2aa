import pickle
from itertools import pairwise, product

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from monarch_mesh import MeshIndexError, RankNotFoundError, Slice, SliceError
from monarch_mesh.testing import shapes


def brute_force(s: Slice) -> list[int]:
    """Ranks in row-major order, straight from the definition."""
    return [
        s.offset + sum(c * st for c, st in zip(coords, s.strides, strict=True))
        for coords in product(*(range(n) for n in s.sizes))
    ]


def test_row_major_basics():
    s = Slice(offset=0, sizes=[2, 3], strides=[3, 1])
    assert s == Slice.new_row_major([2, 3])
    assert repr(s) == "Slice { offset: 0, sizes: [2, 3], strides: [3, 1] }"
    assert (s.offset, s.sizes, s.strides, len(s)) == (0, [2, 3], [3, 1], 6)
    assert list(s) == [0, 1, 2, 3, 4, 5]
    assert (s[4], s[-1], s.index(4), s.coordinates(4)) == (4, 5, 4, [1, 1])
    assert 5 in s and 6 not in s and -1 not in s and "1" not in s


def test_strided_slice_with_offset():
    s = Slice(offset=5, sizes=[2, 2], strides=[8, 3])
    assert list(s) == [5, 8, 13, 16]
    assert s.coordinates(13) == [1, 0]
    assert s.index(16) == 3
    assert 6 not in s


def test_errors_say_what_is_wrong():
    s = Slice.new_row_major([2, 3])
    with pytest.raises(IndexError, match="position 6 out of range for a slice of 6"):
        s[6]
    with pytest.raises(ValueError, match="rank 9 is not in Slice"):
        s.index(9)
    with pytest.raises(ValueError, match="rank 9 is not in Slice"):
        s.coordinates(9)
    with pytest.raises(ValueError, match="alias"):
        Slice(offset=0, sizes=[2, 2], strides=[1, 1])
    with pytest.raises(ValueError, match="alias"):
        Slice(offset=0, sizes=[3, 2], strides=[1, 2])
    with pytest.raises(ValueError, match="same length"):
        Slice(offset=0, sizes=[2, 2], strides=[1])
    with pytest.raises(ValueError, match="strides\\[0\\] must be >= 1"):
        Slice(offset=0, sizes=[2], strides=[0])
    with pytest.raises(ValueError, match="offset must be >= 0"):
        Slice(offset=-1, sizes=[2], strides=[1])
    with pytest.raises(ValueError, match="must be an int"):
        Slice(offset=0, sizes=[2.0], strides=[1])
    assert issubclass(MeshIndexError, IndexError)
    assert issubclass(RankNotFoundError, ValueError)
    assert issubclass(SliceError, ValueError)


def test_non_aliasing_strides_that_are_not_nested_still_work():
    # 3 x 2 with strides 2 and 3: ranks 0,3,2,5,4,7 are distinct, though the
    # strides are not ordered as a row-major layout's would be.
    s = Slice(offset=0, sizes=[3, 2], strides=[2, 3])
    assert list(s) == [0, 3, 2, 5, 4, 7]
    assert [s.index(r) for r in s] == list(range(6))
    assert 6 not in s


def test_degenerate_slices():
    point = Slice(offset=7, sizes=[], strides=[])
    assert (len(point), list(point), point.index(7), point.coordinates(7)) == (1, [7], 0, [])
    empty = Slice(offset=0, sizes=[2, 0], strides=[1, 2])
    assert (len(empty), list(empty), 0 in empty) == (0, [], False)


def test_value_semantics():
    a = Slice(offset=1, sizes=[2, 3], strides=[6, 2])
    b = Slice(offset=1, sizes=[2, 3], strides=[6, 2])
    assert a == b and hash(a) == hash(b) and a != Slice.new_row_major([2, 3])
    assert pickle.loads(pickle.dumps(a)) == a
    assert len({a, b}) == 1


@pytest.mark.parametrize(
    ("ranks", "expected"),
    [
        ([0, 2, 4, 6], [(0, 4, 2)]),
        ([6, 0, 4, 2], [(0, 4, 2)]),
        ([0, 1, 2, 5, 6, 7], [(0, 3, 1), (5, 3, 1)]),
        ([3], [(3, 1, 1)]),
        ([], []),
        # greedy-longest-first would take [0,1,2] and then need three more
        ([0, 1, 2, 4, 6, 7, 8], [(0, 3, 1), (4, 2, 2), (7, 2, 1)]),
        ([1, 2, 4, 6, 8, 9], [(1, 2, 1), (4, 3, 2), (9, 1, 1)]),
    ],
)
def test_from_list(ranks, expected):
    slices = Slice.from_list(ranks)
    assert [(s.offset, s.sizes[0], s.strides[0]) for s in slices] == expected


def test_from_list_rejects_duplicates_and_negatives():
    with pytest.raises(ValueError, match="rank 2 appears more than once"):
        Slice.from_list([1, 2, 2])
    with pytest.raises(ValueError, match="rank must be >= 0"):
        Slice.from_list([-1, 2])


@given(shapes())
def test_indexing_agrees_with_brute_force(shape):
    s = shape.ndslice
    ranks = brute_force(s)
    assert list(s) == ranks
    assert len(s) == len(ranks)
    for position, rank in enumerate(ranks):
        assert s[position] == rank
        assert s.index(rank) == position
        assert s.location(s.coordinates(rank)) == rank
        assert rank in s
    for rank in set(range(max(ranks) + 3)) - set(ranks):
        assert rank not in s
        with pytest.raises(ValueError):
            s.index(rank)


@given(st.lists(st.integers(0, 60), unique=True))
def test_from_list_round_trips(ranks):
    slices = Slice.from_list(ranks)
    assert [r for s in slices for r in s] == sorted(ranks)
    assert all(s.ndim == 1 for s in slices)


@given(st.integers(0, 100), st.integers(1, 50), st.integers(1, 7))
@example(0, 1_000_000, 1)
def test_from_list_is_one_slice_for_a_progression(start, count, step):
    (s,) = Slice.from_list(range(start, start + count * step, step))
    assert (s.offset, s.sizes, len(s)) == (start, [count], count)


def fewest_runs(values: list[int]) -> int:
    """Exhaustive minimum over all ways to cut ``values`` into progressions."""
    best = [0] + [len(values)] * len(values)
    for j in range(1, len(values) + 1):
        for i in range(j):
            run = values[i:j]
            if len({b - a for a, b in pairwise(run)}) <= 1:
                best[j] = min(best[j], best[i] + 1)
    return best[-1]


@given(st.lists(st.integers(0, 30), unique=True, max_size=14))
def test_from_list_is_minimal(ranks):
    assert len(Slice.from_list(ranks)) == fewest_runs(sorted(ranks))


@given(shapes())
def test_slices_round_trip_through_pickle(shape):
    s = shape.ndslice
    assert pickle.loads(pickle.dumps(s)) == s
