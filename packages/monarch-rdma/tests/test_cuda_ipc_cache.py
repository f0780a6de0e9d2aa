"""The bookkeeping behind cuda_ipc's cached sharing, without CUDA: the peer
shares each storage once while it lives and tells every owner it was sent
to when it is gone; the owner keeps a bounded number of opened storages
per connection."""

from monarch_rdma._cuda_ipc import MAX_FORGET, ExportCache, OpenedCache, export_key


class Ref:
    """A weak reference like torch's ``StorageWeakRef``: ``cdata`` names the
    storage, ``expired()`` says whether it is gone."""

    def __init__(self, storage):
        self.storage = storage
        self.cdata = storage.cdata

    def expired(self):
        return self.storage.freed


class Storage:
    def __init__(self, cdata):
        self.cdata = cdata
        self.freed = False


def exports():
    shared = []

    def describe(storage):
        shared.append(storage.cdata)
        return ["handle", storage.cdata, len(shared)]  # a new ref-counter slot per share

    return ExportCache(Ref, describe), shared


def test_a_storage_is_shared_once_while_it_lives():
    cache, shared = exports()
    a = Storage(1)
    first = cache.items_for(a, "owner-1")
    assert cache.items_for(a, "owner-1") == first
    assert cache.items_for(a, "owner-2") == first
    assert shared == [1]
    assert cache.take_forgotten("owner-1") == []


def test_owners_are_told_once_each_when_the_storage_is_gone():
    cache, _ = exports()
    a, b = Storage(1), Storage(2)
    items = cache.items_for(a, "owner-1")
    cache.items_for(a, "owner-2")
    cache.items_for(b, "owner-1")
    a.freed = True
    assert cache.take_forgotten("owner-1") == [export_key(items)]
    assert cache.take_forgotten("owner-1") == []  # told once
    assert cache.take_forgotten("owner-2") == [export_key(items)]
    assert cache.take_forgotten("owner-3") == []  # never sent it
    assert len(cache) == 1


def test_a_new_storage_with_a_reused_identity_is_shared_anew():
    cache, shared = exports()
    old = Storage(7)
    before = cache.items_for(old, "owner")
    old.freed = True
    new = Storage(7)  # torch gives a gone storage's identity to a new one
    after = cache.items_for(new, "owner")
    assert after != before and shared == [7, 7]
    assert cache.take_forgotten("owner") == [export_key(before)]


def test_forgetting_is_sent_in_bounded_batches():
    cache, _ = exports()
    storages = [Storage(n) for n in range(MAX_FORGET + 5)]
    for storage in storages:
        cache.items_for(storage, "owner")
        storage.freed = True
    assert len(cache.take_forgotten("owner")) == MAX_FORGET
    assert len(cache.take_forgotten("owner")) == 5
    assert cache.take_forgotten("owner") == []


def test_the_owner_keeps_the_most_recently_used_and_opens_each_once():
    opened = []
    cache = OpenedCache(limit=2)

    def opener(key):
        return lambda: opened.append(key) or f"mapping of {key}"

    assert cache.get("a", opener("a")) == "mapping of a"
    cache.get("a", opener("a"))
    cache.get("b", opener("b"))
    cache.get("a", opener("a"))  # a is now the most recently used
    cache.get("c", opener("c"))  # closes b
    assert len(cache) == 2
    cache.get("a", opener("a"))
    cache.get("b", opener("b"))
    assert opened == ["a", "b", "c", "b"]
    cache.forget(["b", "not open"])
    assert len(cache) == 1
    cache.clear()
    assert len(cache) == 0
