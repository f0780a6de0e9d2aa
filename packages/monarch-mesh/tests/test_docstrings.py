"""The examples in the docstrings are right."""

import doctest

import pytest

import monarch_mesh
from monarch_mesh import _errors, _indexing, _labels, _routing, _selection, _shape, _slice


@pytest.mark.parametrize(
    "module",
    [monarch_mesh, _errors, _indexing, _labels, _routing, _selection, _shape, _slice],
)
def test_docstring_examples(module):
    globs = {name: getattr(monarch_mesh, name) for name in monarch_mesh.__all__}
    result = doctest.testmod(module, extraglobs=globs, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
