"""The hooks sibling packages plug in (entry points of group monarch.extensions)."""

import pytest

from monarch_actor._core import extensions
from monarch_actor.extension import extension


def test_a_missing_extension_names_the_package_to_install(monkeypatch) -> None:
    monkeypatch.setattr(extensions, "_entry_points", dict)  # as if nothing were installed
    assert extension("no-such-hook", required=False) is None
    for hook in ("activate", "device_mesh", "rref", "keep"):
        with pytest.raises(RuntimeError, match="pip install monarch-tensor"):
            extension(hook)
    with pytest.raises(RuntimeError, match="the 'no-such-hook' extension"):
        extension("no-such-hook")


def test_argument_transforms_apply_in_order_of_registration(monkeypatch) -> None:
    monkeypatch.setattr(extensions, "_transforms", [])
    extensions.transform_arguments(lambda mesh, args, kwargs: ((*args, mesh), kwargs))
    extensions.transform_arguments(lambda mesh, args, kwargs: (args, {**kwargs, "n": len(args)}))
    assert extensions.transformed("m", (1,), {}) == ((1, "m"), {"n": 2})
