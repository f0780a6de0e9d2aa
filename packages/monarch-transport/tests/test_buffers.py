"""Large frames are received into fresh bytes objects that a bytes payload reuses."""

from monarch_transport import decode, encode
from monarch_transport._buffers import fresh_buffer, owning_bytes


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
