"""Another local user (uid 65534, without the job's secret) against a job's
listeners on default settings: it cannot enter the job's Unix socket folder,
and over loopback TCP it gets nothing delivered, neither by guessing the
handshake nor by writing an unsealed message."""

from __future__ import annotations

import asyncio
import os
import tempfile

import pytest

from monarch_transport import Address, Received, Settings
from monarch_transport._nng import NngTransport
from monarch_transport._socket import SocketTransport
from monarch_transport.testing import other_user_unavailable, run_as_other_user

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(other_user_unavailable() is not None, reason=str(other_user_unavailable())),
]
SECRET = b"L" * 32
TRANSPORTS = pytest.mark.parametrize(
    "transport_cls", [SocketTransport, NngTransport], ids=["socket", "nng"]
)

INTRUDER = r"""
import socket, struct, sys

kind, where, nng = sys.argv[1], sys.argv[2], sys.argv[3] == "1"

def message(kind_byte, payload):
    body = struct.pack("<BI", kind_byte, 1) + struct.pack("<Q", len(payload)) + payload
    if nng:  # nng's length prefix and PAIR1's header go first
        return struct.pack(">Q", len(body) + 4) + b"\0\0\0\1" + body
    return body

if kind == "unix":
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(where)
    except PermissionError:
        print("refused: permission denied")
        sys.exit(0)
    print("connected")
    sys.exit(1)

host, port = where.rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=10)
if nng:
    s.sendall(b"\0SP\0\0\x11\0\0")
    s.recv(8)
# an unsealed data message where a HELLO belongs, then a made-up handshake
s.sendall(message(5, b"X" * 64) + message(1, b"n" * 16 + b"intruder") + message(3, b"p" * 32))
got = b""
try:
    while chunk := s.recv(1 << 16):
        got += chunk
except OSError:
    pass
print("closed after", len(got), "bytes")
"""


@TRANSPORTS
async def test_another_user_cannot_open_the_jobs_unix_sockets(transport_cls):
    folder = tempfile.mkdtemp(prefix="monarch-job-")  # 0700, as the job's folder
    try:
        address = Address.parse(f"ipc://{os.path.join(folder, 'proc.sock')}")
        async with await transport_cls().listen(address, Settings(secret=SECRET)):
            done = await asyncio.to_thread(run_as_other_user, INTRUDER, "unix", address.path, "0")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "permission denied" in done.stdout
    finally:
        os.rmdir(folder)


@TRANSPORTS
async def test_another_user_gets_nothing_delivered_over_loopback_tcp(transport_cls):
    nng = transport_cls is NngTransport
    transport = transport_cls()
    async with await transport.listen(
        Address.parse("tcp://127.0.0.1:0"), Settings(secret=SECRET)
    ) as inbox:
        where = f"127.0.0.1:{inbox.address.port}"
        done = await asyncio.to_thread(
            run_as_other_user, INTRUDER, "tcp", where, "1" if nng else "0"
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "closed after" in done.stdout
        # the first thing the listener hands on is the job's own message
        out = await transport.connect(inbox.address, Settings(secret=SECRET))
        await out.send([b"from the job"])
        event = await asyncio.wait_for(inbox.receive(), 10)
        assert isinstance(event, Received)
        assert b"".join(bytes(f) for f in event.frames) == b"from the job"
        await out.aclose()
