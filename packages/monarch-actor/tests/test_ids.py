"""Uid and ProcId: Monarch's identifiers, with its string forms."""

import pickle

import pytest

from monarch_actor import ProcId, Uid


def test_uids_read_back_from_their_string_forms() -> None:
    labelled = Uid.instance("worker")
    assert labelled.label == "worker" and labelled.is_instance and not labelled.is_singleton
    assert str(labelled).startswith("worker<") and str(labelled).endswith(">")
    assert Uid.from_string(str(labelled)) == labelled
    anonymous = Uid.anonymous()
    assert anonymous.label is None and str(anonymous).startswith("<")
    assert Uid.from_string(str(anonymous)) == anonymous != labelled
    singleton = Uid.from_string("controller")
    assert singleton.is_singleton and str(singleton) == "controller"
    assert Uid.from_string("<1>") == Uid.from_string("other<1>")  # instances compare by number
    assert pickle.loads(pickle.dumps(labelled)) == labelled
    assert len({labelled, Uid.from_string(str(labelled)), anonymous}) == 2


def test_bad_uids_and_labels_are_refused() -> None:
    for text in ("Bad", "a<0>", "x<zz0>", "-a", ""):
        with pytest.raises(ValueError, match="invalid uid"):
            Uid.from_string(text)
    with pytest.raises(ValueError, match="invalid uid label"):
        Uid.instance("Upper")


def test_proc_ids_are_their_uids() -> None:
    uid = Uid.instance("trainer")
    proc = ProcId(uid)
    assert proc.uid == uid and proc.label == "trainer" and str(proc) == str(uid)
    assert ProcId.from_string(str(proc)) == proc and hash(ProcId.from_string(str(proc))) == hash(
        proc
    )
    assert repr(proc) == f"<'trainer' {uid}>"
    with pytest.raises(TypeError, match="takes a Uid"):
        ProcId("trainer")  # type: ignore[arg-type]
