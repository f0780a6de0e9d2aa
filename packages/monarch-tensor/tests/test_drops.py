"""A tensor's finalizer frees its shards through ``DeviceMesh._drop``, on
whatever thread the garbage collector happens to run: it must never wait for
the mesh's lock, whose holder may be waiting for that very thread."""

from __future__ import annotations

import collections
import threading

from monarch_tensor._mesh import DeviceMesh
from monarch_tensor._table import Table


def bare_mesh() -> DeviceMesh:
    """The batching state of a device mesh, without processes behind it."""
    mesh = object.__new__(DeviceMesh)
    mesh._lock = threading.RLock()
    mesh._batches = {}
    mesh._dropped = collections.deque()
    mesh._timer = None
    return mesh


def test_a_drop_never_waits_for_the_lock() -> None:
    mesh = bare_mesh()
    dropped = threading.Event()

    def finalizer() -> None:
        mesh._drop("main", 7)
        dropped.set()

    # held, as by a thread that starts the batch timer's thread and waits
    # for it to start while the collector runs a finalizer there
    with mesh._lock:
        thread = threading.Thread(target=finalizer)
        thread.start()
        assert dropped.wait(10)
    thread.join(10)


def test_drops_join_the_next_batch_in_order_and_merge() -> None:
    mesh = bare_mesh()
    mesh._batches = {"main": [("op", "a")]}
    mesh._drop("main", 1)
    mesh._drop("main", 2)
    mesh._drop("other", 3)
    with mesh._lock:
        mesh._take_drops_locked()
    assert mesh._batches == {"main": [("op", "a"), ("drop", [1, 2])], "other": [("drop", [3])]}
    assert not mesh._dropped


def test_a_value_made_after_its_drop_is_let_go() -> None:
    # an rref result its actor keeps after the stream already ran its drop
    table = Table()
    table.pop(5)
    table.put(5, "late")
    assert 5 not in table and len(table) == 0
    table.put(5, "again")  # the drop was used up: a ref is dropped once
    assert table.get(5) == "again"


def test_a_lent_shard_is_taken_by_its_one_reader() -> None:
    table = Table()
    table.put(3, "shard")
    assert table.take(3) == "shard"
    assert 3 not in table
