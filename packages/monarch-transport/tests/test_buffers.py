"""Large frames are received into fresh bytes objects that a bytes payload reuses."""

import ctypes
import sys
from pathlib import Path

import pytest

from monarch_transport import decode, encode
from monarch_transport._buffers import HUGE_FROM, bytes_of, fresh_buffer, owning_bytes

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def test_a_fresh_buffer_is_writable_and_owned_by_bytes():
    view = fresh_buffer(1 << 20)
    assert not view.readonly and view.format == "B" and view.nbytes == 1 << 20
    view[:5] = b"hello"
    view[-3:] = b"end"
    owner = owning_bytes(view)
    assert type(owner) is bytes and owner[:5] == b"hello" and owner[-3:] == b"end"
    assert owning_bytes(view[1:]) is None  # only a whole buffer stands for its bytes
    assert owning_bytes(memoryview(bytearray(10))) is None
    assert fresh_buffer(0).nbytes == 0


def test_a_bytes_payload_received_in_place_is_not_copied():
    payload = bytes(range(256)) * 1024
    header, body, *buffers = encode({"data": payload})
    (oob,) = buffers
    view = fresh_buffer(memoryview(oob).nbytes)
    view[:] = oob
    decoded = decode([header, body, view])[1]["data"]
    assert decoded == payload
    assert decoded is owning_bytes(view)


def _vm_flags(address: int) -> set[str]:
    """The flags of the mapping that holds ``address`` (``/proc/self/smaps``)."""
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            first = line.split()[0]
            if "-" in first and not first.endswith(":"):
                start, end = (int(part, 16) for part in first.split("-"))
                inside = start <= address < end
            elif inside and first == "VmFlags:":
                return set(line.split()[1:])
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not THP.exists() or "[never]" in THP.read_text(),
    reason="needs Linux with transparent huge pages",
)
def test_a_big_buffer_asks_for_huge_pages_and_a_small_one_does_not():
    big = fresh_buffer(HUGE_FROM)
    address = ctypes.addressof(ctypes.c_char.from_buffer(big))
    assert "hg" in _vm_flags(address + HUGE_FROM // 2)  # madvise(MADV_HUGEPAGE) was given
    big[:3] = b"abc"
    big[-3:] = b"xyz"
    owner = owning_bytes(big)
    assert owner is not None and owner[:3] == b"abc" and owner[-3:] == b"xyz"
    small = fresh_buffer(HUGE_FROM // 4)
    address = ctypes.addressof(ctypes.c_char.from_buffer(small))
    assert "hg" not in _vm_flags(address + HUGE_FROM // 8)


def test_bytes_of_a_whole_fresh_buffer_is_its_own_and_of_anything_else_a_copy():
    whole = fresh_buffer(1 << 10)
    whole[:] = bytes(range(256)) * 4
    assert bytes_of(whole) is owning_bytes(whole)
    for size in (HUGE_FROM - 1, HUGE_FROM + 3):  # small copies and big ones (huge pages)
        source = bytearray(size)
        source[:4], source[-4:] = b"head", b"tail"
        copied = bytes_of(memoryview(source)[1:])
        assert type(copied) is bytes and len(copied) == size - 1
        assert copied[:3] == b"ead" and copied[-4:] == b"tail"
    wide = memoryview(bytearray(b"abcdefgh")).cast("I")  # not flat bytes: copied as bytes
    assert bytes_of(wide) == b"abcdefgh"
