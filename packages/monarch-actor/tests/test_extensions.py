"""The hooks sibling packages plug in (entry points of group monarch.extensions)."""

import pytest

from monarch_actor.extension import extension


def test_a_missing_extension_names_the_package_to_install() -> None:
    assert extension("no-such-hook", required=False) is None
    with pytest.raises(RuntimeError, match="pip install monarch-tensor"):
        extension("rref")  # nothing declares it (monarch-tensor plugs in activate only)
