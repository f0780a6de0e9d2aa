import pickle
import random
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monarch_mesh import Selection, SelectionSyntaxError, Shape, Slice
from monarch_mesh.testing import shapes


@pytest.fixture
def mesh():
    return Shape(["hosts", "gpus"], Slice.new_row_major([2, 4]))


@pytest.mark.parametrize(
    ("text", "ranks"),
    [
        ("*", [0, 1, 2, 3, 4, 5, 6, 7]),
        ("(*, 0)", [0, 4]),
        ("*, 0", [0, 4]),
        ("(1)", [4, 5, 6, 7]),
        ("1", [4, 5, 6, 7]),
        ("(*, 1:3)", [1, 2, 5, 6]),
        ("(*, ::2)", [0, 2, 4, 6]),
        ("(*, -1)", [3, 7]),
        ("(*, -2:)", [2, 3, 6, 7]),
        ("(0, *) | (*, 0)", [0, 1, 2, 3, 4]),
        ("(0:2, *) & (*, 1)", [1, 5]),
        ("(*, 0) | (1, 3)", [0, 4, 7]),
        ("(*,0) | (*,1) & (1,*)", [0, 4, 5]),
        ("((*,0) | (*,1)) & (1,*)", [4, 5]),
        ("((0, *) | (1, 0)) & (*, 0:2)", [0, 1, 4]),
    ],
)
def test_eval(mesh, text, ranks):
    assert Selection.from_string(text).eval(mesh) == ranks


def test_any_picks_one(mesh):
    rng = random.Random(7)
    picks = {tuple(Selection.any().eval(mesh, rng=rng)) for _ in range(200)}
    assert all(len(p) == 1 for p in picks)
    assert {p[0] for p in picks} == set(range(8))  # every rank gets a turn
    one_host = Selection.from_string("(?, *)").eval(mesh, rng=rng)
    assert one_host in ([0, 1, 2, 3], [4, 5, 6, 7])
    assert len(Selection.from_string("(1, ?)").eval(mesh, rng=rng)) == 1


def test_all_any_and_operators(mesh):
    assert Selection.all().eval(mesh) == mesh.ranks()
    row = Selection.from_string("(0, *)")
    col = Selection.from_string("(*, 1)")
    assert (row | col).eval(mesh) == [0, 1, 2, 3, 5]
    assert (row & col).eval(mesh) == [1]
    assert str(row | col & row) == "(0, *) | (*, 1) & (0, *)"


def test_value_semantics():
    a = Selection.from_string("(0,*)|(*, 1:3:2)")
    assert a == Selection.from_string(str(a))
    assert hash(a) == hash(Selection.from_string(str(a)))
    assert pickle.loads(pickle.dumps(a)) == a
    assert repr(a) == "Selection.from_string('(0, *) | (*, 1:3:2)')"


@pytest.mark.parametrize(
    ("text", "position", "message"),
    [
        ("", 0, "empty selection"),
        ("(*,", 3, "expected a dimension term"),
        ("(1 2)", 3, "expected ',' or ')', found '2'"),
        ("(0|1, *)", 2, "expected ',' or ')', found '|'"),
        ("*&", 2, "expected a dimension term"),
        ("hosts", 0, "unexpected character 'h'"),
        ("(0:4:0)", 5, "step must be positive"),
        ("((*)", 4, "expected ')'"),
        ("(*) (*)", 4, "expected '&', '|' or the end"),
    ],
)
def test_syntax_errors_say_where(text, position, message):
    with pytest.raises(SelectionSyntaxError, match=re.escape(message)) as info:
        Selection.from_string(text)
    assert info.value.position == position
    assert isinstance(info.value, ValueError)
    assert f"at position {position}" in str(info.value)


def test_eval_errors(mesh):
    with pytest.raises(ValueError, match="3 dimension terms but shape"):
        Selection.from_string("(*, *, *)").eval(mesh)
    with pytest.raises(IndexError, match="dimension 'hosts' of size 2"):
        Selection.from_string("(5, *)").eval(mesh)
    with pytest.raises(TypeError, match="takes a Shape"):
        Selection.all().eval([0, 1])
    with pytest.raises(TypeError, match="must be a str"):
        Selection.from_string(3)


terms = st.one_of(
    st.just("*"),
    st.integers(0, 3).map(str),
    st.tuples(st.integers(0, 3), st.integers(1, 5), st.integers(1, 3)).map(
        lambda t: f"{t[0]}:{t[1]}:{t[2]}"
    ),
)


@st.composite
def boxes(draw, ndim):
    return "(" + ", ".join(draw(st.lists(terms, min_size=1, max_size=max(ndim, 1)))) + ")"


def brute_box(text: str, shape: Shape) -> set[int]:
    """The ranks whose every coordinate is picked by the matching term."""
    parts = [p.strip() for p in text.strip("()").split(",")]
    out = set()
    for rank in shape.ranks():
        coords = shape.coordinates(rank)
        ok = True
        for label, part in zip(shape.labels, parts, strict=False):
            size = shape.extent[label]
            c = coords[label]
            if part == "*":
                continue
            if ":" in part:
                a, b, s = (int(x) for x in part.split(":"))
                ok &= c in range(size)[a:b:s]
            else:
                ok &= c == int(part)
        if ok:
            out.add(rank)
    return out


@given(st.data(), shapes(max_dims=3, max_size=4))
def test_union_and_intersection_are_set_operations(data, shape):
    ndim = len(shape.labels)
    if ndim == 0:
        return
    a, b = data.draw(boxes(ndim)), data.draw(boxes(ndim))
    try:
        left, right = brute_box(a, shape), brute_box(b, shape)
        got_a = Selection.from_string(a).eval(shape)
        got_b = Selection.from_string(b).eval(shape)
    except IndexError:
        return  # a term that picks nothing from this shape: covered by test_eval_errors
    assert set(got_a) == left and set(got_b) == right
    order = {rank: i for i, rank in enumerate(shape.ranks())}
    union = Selection.from_string(f"{a} | {b}").eval(shape)
    both = Selection.from_string(f"{a} & {b}").eval(shape)
    assert set(union) == left | right and set(both) == left & right
    assert union == sorted(union, key=order.get) and both == sorted(both, key=order.get)
