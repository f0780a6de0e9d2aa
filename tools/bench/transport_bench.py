"""Transport benchmarks: round trip, one-way rate and 64 MiB echo, for each
backend and address family, beside raw pynng and raw sockets (the floor).

The echo server always runs in a second process. Prints one JSON object:
{"<impl>/<family>": {"rt_us": ..., "msgs_per_s": ..., "big_gbps": ...}}.

    python tools/bench/transport_bench.py [--quick]

The cost of integrity (a MAC on every message after the handshake): run this
project's backends over TCP once per mode, both processes set alike through
``$MONARCH_TRANSPORT_INTEGRITY``; results are keyed ``<impl>/tcp/<mode>``:

    python tools/bench/transport_bench.py --family tcp --integrity off,always
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
from typing import Any

SMALL = b"x" * 100
BIG = 64 << 20
LEN = struct.Struct("<Q")


def addresses(family: str, tag: str) -> tuple[str, str]:
    if family == "ipc":
        base = tempfile.mkdtemp(prefix="monarch-bench-")
        return f"ipc://{base}/{tag}-a.sock", f"ipc://{base}/{tag}-b.sock"
    return "tcp://127.0.0.1:0", "tcp://127.0.0.1:0"


# -- raw floors ------------------------------------------------------------------


def raw_nng_server(address: str) -> None:
    import pynng

    with pynng.Pair1(recv_max_size=0) as sock:
        sock.listen(address)
        print("ready", flush=True)
        while True:
            data = sock.recv()
            if data[:1] in (b"e", b"f"):
                sock.send(data)


def raw_nng_client(address: str, cfg: dict[str, int]) -> dict[str, float]:
    import pynng

    with pynng.Pair1(recv_max_size=0) as sock:
        sock.dial(address, block=True)
        return drive(lambda data: sock.send(data), sock.recv, cfg)


class _Receiver:
    """Blocking exact reads into one buffer kept across messages: the floor
    moves bytes with the kernel's copies only, no allocation and no page
    faults per message (each message is read before the next arrives)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray(1 << 16)

    def exact(self, n: int) -> memoryview:
        if n > len(self.buf):
            self.buf = bytearray(n)
        view = memoryview(self.buf)[:n]
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:])
            if not k:
                raise EOFError
            got += k
        return view


def _raw_socket(address: str) -> tuple[socket.socket, Any]:
    if address.startswith("ipc://"):
        return socket.socket(socket.AF_UNIX), address[len("ipc://") :]
    host, port = address[len("tcp://") :].rsplit(":", 1)
    sock = socket.socket()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock, (host, int(port))


def raw_socket_server(address: str) -> None:
    listener, where = _raw_socket(address)
    listener.bind(where)
    listener.listen(1)
    print("ready", flush=True)
    conn, _ = listener.accept()
    if conn.family != socket.AF_UNIX:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    receiver = _Receiver(conn)
    while True:
        (n,) = LEN.unpack(receiver.exact(LEN.size))
        data = receiver.exact(n)
        if data[:1] in (b"e", b"f"):
            conn.sendall(LEN.pack(n))
            conn.sendall(data)


def raw_socket_client(address: str, cfg: dict[str, int]) -> dict[str, float]:
    sock, where = _raw_socket(address)
    sock.connect(where)

    def send(data: bytes) -> None:
        sock.sendall(LEN.pack(len(data)))
        sock.sendall(data)

    receiver = _Receiver(sock)

    def recv() -> memoryview:
        (n,) = LEN.unpack(receiver.exact(LEN.size))
        return receiver.exact(n)

    return drive(send, recv, cfg)


def drive(send: Any, recv: Any, cfg: dict[str, int]) -> dict[str, float]:
    """The same three measurements over blocking send/recv callables."""
    for _ in range(50):
        send(b"e" + SMALL)
        recv()
    start = time.perf_counter()
    for _ in range(cfg["rt"]):
        send(b"e" + SMALL)
        recv()
    rt = (time.perf_counter() - start) / cfg["rt"]
    start = time.perf_counter()
    for _ in range(cfg["oneway"] - 1):
        send(b"c" + SMALL)
    send(b"f" + SMALL)
    recv()
    rate = cfg["oneway"] / (time.perf_counter() - start)
    big = b"e" + os.urandom(BIG - 1)
    best = float("inf")
    for _ in range(cfg["big"]):
        start = time.perf_counter()
        send(big)
        assert len(recv()) == BIG
        best = min(best, time.perf_counter() - start)
    return {"rt_us": rt * 1e6, "msgs_per_s": rate, "big_gbps": 2 * BIG / best / 1e9}


# -- this project's transport ------------------------------------------------------


async def ours_server(backend: str, listen_at: str, reply_to: str) -> None:
    from monarch_transport import Address, Received, Settings, backend_class

    transport = backend_class(backend)()
    settings = Settings(max_message_size=1 << 30)
    inbox = await transport.listen(Address.parse(listen_at), settings)
    print(f"ready {inbox.address}", flush=True)
    out = await transport.connect(Address.parse(reply_to), settings)
    while True:
        event = await inbox.receive()
        if isinstance(event, Received) and bytes(event.frames[0][:1]) in (b"e", b"f"):
            await out.send(event.frames)


async def ours_client(backend: str, family: str, cfg: dict[str, int]) -> dict[str, float]:
    from monarch_transport import Address, Settings, backend_class

    transport = backend_class(backend)()
    settings = Settings(max_message_size=1 << 30)
    here, there = addresses(family, backend)
    inbox = await transport.listen(Address.parse(here), settings)
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", f"ours-{backend}", there, str(inbox.address)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = server.stdout.readline().split()  # type: ignore[union-attr]
        out = await transport.connect(Address.parse(line[1]), settings)

        async def round_trip(frames: list[bytes]) -> None:
            await out.send(frames)
            await inbox.receive()

        for _ in range(50):
            await round_trip([b"e", SMALL])
        start = time.perf_counter()
        for _ in range(cfg["rt"]):
            await round_trip([b"e", SMALL])
        rt = (time.perf_counter() - start) / cfg["rt"]
        start = time.perf_counter()
        for _ in range(cfg["oneway"] - 1):
            await out.send([b"c", SMALL])
        await round_trip([b"f", SMALL])
        rate = cfg["oneway"] / (time.perf_counter() - start)
        big = os.urandom(BIG - 1)
        best = float("inf")
        for _ in range(cfg["big"]):
            start = time.perf_counter()
            await round_trip([b"e", big])
            best = min(best, time.perf_counter() - start)
        return {"rt_us": rt * 1e6, "msgs_per_s": rate, "big_gbps": 2 * BIG / best / 1e9}
    finally:
        server.kill()
        server.wait()


def raw_client(impl: str, family: str, cfg: dict[str, int]) -> dict[str, float]:
    address = addresses(family, impl)[0]
    if family == "tcp":
        with socket.socket() as probe:  # raw servers need a concrete port
            probe.bind(("127.0.0.1", 0))
            address = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", impl, address], stdout=subprocess.PIPE, text=True
    )
    try:
        server.stdout.readline()  # type: ignore[union-attr]
        client = raw_nng_client if impl == "raw-pynng" else raw_socket_client
        return client(address, cfg)
    finally:
        server.kill()
        server.wait()


def _run(coro: Any) -> Any:
    from monarch_transport import run

    return run(coro)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer iterations (a smoke test)")
    parser.add_argument(
        "--family", choices=("ipc", "tcp"), action="append", help="only these (default: both)"
    )
    parser.add_argument(
        "--integrity",
        help="comma-separated MONARCH_TRANSPORT_INTEGRITY modes (always, auto, off) to run "
        "this project's backends under, each in turn; raw floors are then left out",
    )
    parser.add_argument("--serve", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        impl, *where = args.serve
        if impl == "raw-pynng":
            raw_nng_server(where[0])
        elif impl == "raw-socket":
            raw_socket_server(where[0])
        else:
            _run(ours_server(impl.removeprefix("ours-"), where[0], where[1]))
        return
    cfg = (
        {"rt": 300, "oneway": 3000, "big": 2}
        if args.quick
        else {"rt": 3000, "oneway": 30000, "big": 5}
    )
    results: dict[str, dict[str, float]] = {}
    families = args.family or ["ipc", "tcp"]
    if args.integrity:
        for family in families:
            for mode in args.integrity.split(","):
                os.environ["MONARCH_TRANSPORT_INTEGRITY"] = mode  # the server inherits it
                for backend in ("nng", "socket"):
                    results[f"{backend}/{family}/{mode}"] = _run(ours_client(backend, family, cfg))
                print(f"measured {family} {mode}", file=sys.stderr, flush=True)
        print(json.dumps(results))
        return
    for family in families:
        results[f"raw-pynng/{family}"] = raw_client("raw-pynng", family, cfg)
        results[f"nng/{family}"] = _run(ours_client("nng", family, cfg))
        results[f"raw-socket/{family}"] = raw_client("raw-socket", family, cfg)
        results[f"socket/{family}"] = _run(ours_client("socket", family, cfg))
        print(f"measured {family}", file=sys.stderr, flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
