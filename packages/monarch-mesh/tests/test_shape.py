import pickle
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monarch_mesh import Extent, Shape, Slice
from monarch_mesh.testing import dense_shapes, python_slices, shapes


@pytest.fixture
def mesh():
    return Shape(["hosts", "gpus"], Slice.new_row_major([2, 4]))


def test_basics(mesh):
    assert str(mesh) == "{hosts=2,gpus=4}"
    assert repr(mesh) == (
        "Shape { labels: ['hosts', 'gpus'], slice: Slice { offset: 0, sizes: [2, 4], "
        "strides: [4, 1] } }"
    )
    assert (mesh.labels, mesh.extent, len(mesh)) == (
        ["hosts", "gpus"],
        Extent(["hosts", "gpus"], [2, 4]),
        8,
    )
    assert mesh.ranks() == list(range(8))
    assert mesh.coordinates(6) == {"hosts": 1, "gpus": 2}
    assert mesh.location(hosts=1, gpus=2) == 6
    assert pickle.loads(pickle.dumps(mesh)) == mesh
    assert hash(mesh) == hash(Shape(["hosts", "gpus"], Slice.new_row_major([2, 4])))


def test_unity():
    one = Shape.unity()
    assert (str(one), one.labels, one.ranks(), len(one), one.coordinates(0)) == (
        "{}",
        [],
        [0],
        1,
        {},
    )


def test_select_keeps_and_at_drops(mesh):
    odd = mesh.select("gpus", slice(1, None, 2))
    assert (str(odd), odd.ranks()) == ("{hosts=2,gpus=2}", [1, 3, 5, 7])
    assert mesh.select("gpus", -1).ranks() == [3, 7]
    assert str(mesh.select("hosts", 1)) == "{hosts=1,gpus=4}"
    host1 = mesh.at("hosts", 1)
    assert (str(host1), host1.ranks()) == ("{gpus=4}", [4, 5, 6, 7])
    assert mesh.at("gpus", -1).ranks() == [3, 7]
    assert mesh.select("gpus", slice(-3, -1)).ranks() == [1, 2, 5, 6]


def test_index_is_mesh_slice(mesh):
    assert mesh.index(hosts=1).ranks() == [4, 5, 6, 7]
    assert mesh.index(hosts=1, gpus=slice(0, 2)).ranks() == [4, 5]
    assert mesh.index(gpus=3, hosts=0) == mesh.index(hosts=0, gpus=3)
    assert mesh.index() == mesh
    assert mesh.index(hosts=1, gpus=2).labels == []


def test_errors_name_the_label_and_range(mesh):
    with pytest.raises(
        TypeError, match=r"Shape does not have dimension labeled 'racks'.*hosts, gpus"
    ):
        mesh.select("racks", 0)
    with pytest.raises(ValueError, match="Shape does not have dimension labeled 'racks'"):
        mesh.index(hosts=0, racks=0)
    with pytest.raises(
        IndexError, match=r"index 4 out of range for dimension 'gpus' of size 4 \(valid: 0..3\)"
    ):
        mesh.at("gpus", 4)
    with pytest.raises(IndexError, match=r"index -3 out of range for dimension 'hosts' of size 2"):
        mesh.select("hosts", -3)
    with pytest.raises(
        IndexError, match=r"slice 5:9 selects nothing from dimension 'gpus' of size 4"
    ):
        mesh.select("gpus", slice(5, 9))
    with pytest.raises(ValueError, match="step for dimension 'gpus' must be positive"):
        mesh.select("gpus", slice(None, None, -1))
    with pytest.raises(TypeError, match="must be an int or a slice"):
        mesh.select("gpus", "0")
    with pytest.raises(ValueError, match="not in"):
        mesh.coordinates(8)
    with pytest.raises(ValueError, match="2 labels"):
        Shape(["a", "b"], Slice.new_row_major([2]))
    with pytest.raises(ValueError, match="more than once"):
        Shape(["a", "a"], Slice.new_row_major([2, 2]))


def test_rename_split_flatten(mesh):
    assert str(mesh.rename(hosts="dp")) == "{dp=2,gpus=4}"
    assert mesh.rename(hosts="dp").ranks() == mesh.ranks()
    split = mesh.split(gpus=("a", "b"), b=2)
    assert (str(split), split.ndslice.strides) == ("{hosts=2,a=2,b=2}", [4, 2, 1])
    big = Shape(["host", "gpu"], Slice.new_row_major([4, 8]))
    both = big.split(host=("dp", "pp"), gpu=("tp", "cp"), pp=2, cp=2)
    assert (both.labels, both.ndslice.sizes, both.ndslice.strides) == (
        ["dp", "pp", "tp", "cp"],
        [2, 2, 4, 2],
        [16, 8, 2, 1],
    )
    assert str(mesh.flatten("rank")) == "{rank=8}"
    assert mesh.at("hosts", 1).flatten("g").ndslice == Slice(offset=4, sizes=[4], strides=[1])
    # evenly spaced but not contiguous still flattens
    assert mesh.select("gpus", slice(None, None, 2)).select("hosts", 0).flatten("r").ranks() == [
        0,
        2,
    ]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: m.split(hosts=("dp", "pp")), "give the sizes of all but one"),
        (lambda m: m.split(gpus=("a", "b"), b=3), "not divisible by 3"),
        (lambda m: m.split(gpus=("a", "b"), a=3, b=2), r"product 6"),
        (lambda m: m.split(gpus="a"), "tuple of new labels"),
        (lambda m: m.split(gpus=("a", "b"), b=2, zz=3), r"size given for \['zz'\]"),
        (lambda m: m.split(gpus=("hosts", "b"), b=2), "appears more than once"),
        (lambda m: m.rename(hosts="gpus"), "appears more than once"),
        (lambda m: m.rename(racks="x"), "racks"),
        (lambda m: m.select("gpus", slice(0, 2)).flatten("r"), "cannot flatten sparse mesh"),
    ],
)
def test_reshape_errors(mesh, call, message):
    with pytest.raises(ValueError, match=message):
        call(mesh)


@given(st.data(), shapes())
def test_slicing_composes(data, shape):
    """A slice of a slice equals one direct slice of the original."""
    if not shape.labels:
        return
    label = data.draw(st.sampled_from(shape.labels))
    size = shape.extent[label]
    first = data.draw(python_slices(size))
    once = shape.select(label, first)
    second = data.draw(python_slices(once.extent[label]))
    direct = range(size)[first][second]
    assert once.select(label, second) == shape.select(
        label, slice(direct.start, direct.stop, direct.step)
    )


@given(st.data(), shapes())
def test_select_picks_exactly_the_matching_coordinates(data, shape):
    if not shape.labels:
        return
    label = data.draw(st.sampled_from(shape.labels))
    picked = data.draw(python_slices(shape.extent[label]))
    keep = set(range(shape.extent[label])[picked])
    expected = [r for r in shape.ranks() if shape.coordinates(r)[label] in keep]
    assert shape.select(label, picked).ranks() == expected


@given(st.data(), shapes())
def test_at_equals_select_then_drop(data, shape):
    if not shape.labels:
        return
    label = data.draw(st.sampled_from(shape.labels))
    index = data.draw(st.integers(0, shape.extent[label] - 1))
    assert shape.at(label, index).ranks() == shape.select(label, index).ranks()
    assert label not in shape.at(label, index).labels


@given(shapes())
def test_rename_keeps_ranks(shape):
    renamed = shape.rename(**{label: label.upper() for label in shape.labels})
    assert renamed.ranks() == shape.ranks()
    assert renamed.labels == [label.upper() for label in shape.labels]


@given(st.data(), shapes())
def test_split_keeps_rank_order_and_count(data, shape):
    if not shape.labels:
        return
    label = data.draw(st.sampled_from(shape.labels))
    size = shape.extent[label]
    inner = data.draw(st.sampled_from([d for d in range(1, size + 1) if size % d == 0]))
    split = shape.split(**{label: ("outer", "inner"), "inner": inner})
    assert split.ranks() == shape.ranks()
    assert split.extent["outer"] * split.extent["inner"] == size
    for rank in shape.ranks():
        before, after = shape.coordinates(rank), split.coordinates(rank)
        assert after["outer"] * inner + after["inner"] == before[label]


@given(dense_shapes())
def test_dense_shapes_flatten_in_rank_order(shape):
    flat = shape.flatten("rank")
    assert flat.ranks() == shape.ranks()
    assert flat.labels == ["rank"]


@given(shapes())
def test_flatten_works_exactly_when_ranks_are_evenly_spaced(shape):
    ranks = shape.ranks()
    steps = {b - a for a, b in pairwise(ranks)}
    if len(steps) <= 1:
        assert shape.flatten("rank").ranks() == ranks
    else:
        with pytest.raises(ValueError, match="cannot flatten"):
            shape.flatten("rank")
