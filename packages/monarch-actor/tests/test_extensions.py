"""The hooks sibling packages plug in (entry points of group monarch.extensions)."""

import pytest
from actors import Counter

from monarch_actor import ActorMesh, ProcMesh
from monarch_actor._core import extensions
from monarch_actor.extension import (
    actor_mesh_name,
    actor_procs,
    endpoint_mesh,
    extension,
    mesh_shape,
    proc_mesh_id,
    with_shape,
)


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


def test_the_seam_shows_a_sibling_what_it_may_know_of_meshes_and_endpoints(procs) -> None:
    shape = mesh_shape(procs)
    assert list(shape.labels) == ["gpus"] and list(shape.ndslice) == [0, 1, 2, 3]
    half = procs.slice(gpus=slice(2, 4))
    assert list(mesh_shape(half).ndslice) == [2, 3]
    assert proc_mesh_id(half) == proc_mesh_id(procs)  # the same processes
    again = with_shape(procs, mesh_shape(half))
    assert isinstance(again, ProcMesh) and list(mesh_shape(again).ndslice) == [2, 3]
    counters = procs.spawn("seam", Counter, 0)  # returns at once: nothing here waits for it
    one = counters.slice(gpus=1)
    assert isinstance(one, ActorMesh) and list(mesh_shape(one).ndslice) == [1]
    assert actor_procs(one) is procs and actor_mesh_name(one) == "seam"
    assert endpoint_mesh(one.get) is one
