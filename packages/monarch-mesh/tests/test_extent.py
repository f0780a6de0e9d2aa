import pickle

import pytest

from monarch_mesh import DimensionNotFoundError, Extent, Point, Shape, Slice


def test_extent_is_an_ordered_mapping():
    ext = Extent(["hosts", "gpus"], [2, 4])
    assert repr(ext) == str(ext) == "{hosts: 2, gpus: 4}"
    assert list(ext) == list(ext.keys()) == ext.labels == ["hosts", "gpus"]
    assert (ext["gpus"], ext.sizes, ext.nelements, len(ext)) == (4, [2, 4], 8, 2)
    assert dict(ext) == {"hosts": 2, "gpus": 4}
    assert "hosts" in ext and "racks" not in ext
    assert ext.get("racks") is None
    assert ext == Extent(["hosts", "gpus"], [2, 4])
    assert ext != Extent(["gpus", "hosts"], [4, 2])
    assert ext != {"hosts": 2, "gpus": 4}
    assert pickle.loads(pickle.dumps(ext)) == ext
    assert ext.region == Shape(["hosts", "gpus"], Slice.new_row_major([2, 4]))


def test_empty_extent():
    ext = Extent([], [])
    assert (repr(ext), ext.nelements, len(ext)) == ("{}", 1, 0)


def test_labels_that_are_not_plain_words_are_quoted():
    assert repr(Extent(["a-b", "a_b"], [1, 2])) == '{"a-b": 1, a_b: 2}'


def test_missing_label_is_a_key_value_and_type_error():
    ext = Extent(["hosts", "gpus"], [2, 4])
    with pytest.raises(DimensionNotFoundError, match="Dimension 'racks' not found") as info:
        ext["racks"]
    assert "hosts, gpus" in str(info.value)
    for kind in (KeyError, ValueError, TypeError):
        with pytest.raises(kind):
            ext["racks"]


@pytest.mark.parametrize(
    ("labels", "sizes", "message"),
    [
        (["a"], [2, 3], "1 labels but 2 sizes"),
        (["a", "a"], [2, 3], "label 'a' appears more than once"),
        ("ab", [2, 3], "not the str 'ab'"),
        ([1], [2], "non-empty str"),
        (["a"], [-1], "size of 'a' must be an int >= 0"),
    ],
)
def test_bad_extents(labels, sizes, message):
    with pytest.raises(ValueError, match=message):
        Extent(labels, sizes)


def test_point():
    ext = Extent(["hosts", "gpus"], [2, 4])
    p = Point(7, ext)
    assert repr(p) == str(p) == "{'hosts': 1/2, 'gpus': 3/4}"
    assert (p.rank, p.extent, p["hosts"], p["gpus"], p.size("gpus")) == (7, ext, 1, 3, 4)
    assert dict(p) == {"hosts": 1, "gpus": 3}
    assert dict(**p) == {"hosts": 1, "gpus": 3}
    assert "gpus" in p and "racks" not in p  # Monarch raises here; we answer
    assert p.get("racks") is None
    assert p == Point(7, ext) and p != Point(6, ext)
    assert p != Point(7, Extent(["a", "b"], [2, 4]))
    assert pickle.loads(pickle.dumps(p)) == p
    assert ext.point(7) == p
    with pytest.raises(TypeError, match="unhashable"):
        hash(p)
    assert repr(Point(0, Extent([], []))) == "{}"


def test_point_errors():
    ext = Extent(["hosts", "gpus"], [2, 4])
    with pytest.raises(ValueError, match="total ranks 8; does not contain rank 8"):
        Point(8, ext)
    with pytest.raises(IndexError):
        Point(-1, ext)
    with pytest.raises(ValueError, match="Dimension 'racks' not found"):
        Point(0, ext)["racks"]
    with pytest.raises(TypeError, match="must be an Extent"):
        Point(0, {"hosts": 2})


def test_point_coordinates_are_row_major():
    ext = Extent(["a", "b", "c"], [2, 3, 4])
    for rank in range(ext.nelements):
        p = Point(rank, ext)
        assert (p["a"] * 3 + p["b"]) * 4 + p["c"] == rank
