"""Actors the tests spawn (importable by the procs). Plain bytearrays and
memoryviews only: the tests run without torch and numpy too."""

import hashlib
import os

from monarch_actor import Actor, endpoint
from monarch_rdma import RDMABuffer


def pattern(size: int, seed: int = 0) -> bytes:
    """``size`` deterministic, position-dependent bytes."""
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.blake2b(f"{seed}:{counter}".encode(), digest_size=64).digest()
        counter += 1
    del out[size:]
    return bytes(out)


class Owner(Actor):
    def __init__(self) -> None:
        self.memory: dict[str, bytes | bytearray] = {}

    @endpoint
    def make(self, name: str, size: int, seed: int = 0) -> RDMABuffer:
        data = bytearray(pattern(size, seed)) if seed >= 0 else bytearray(size)
        self.memory[name] = data
        return RDMABuffer(memoryview(data))

    @endpoint
    def make_readonly(self, name: str, size: int, seed: int = 0) -> RDMABuffer:
        data = pattern(size, seed)  # bytes: a read-only memoryview
        self.memory[name] = data
        return RDMABuffer(memoryview(data))

    @endpoint
    def digest(self, name: str) -> str:
        return hashlib.sha256(self.memory[name]).hexdigest()

    @endpoint
    def fill(self, name: str, seed: int) -> None:
        self.memory[name][:] = pattern(len(self.memory[name]), seed)

    @endpoint
    def release(self, name: str) -> None:
        self.memory.pop(name, None)

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def write_into(self, buffer: RDMABuffer, byte: int, backend: str) -> str:
        """Write ``byte`` over the whole of ``buffer`` with ``backend``; the
        name of the error the transfer failed with, or "ok"."""
        import monarch_rdma

        old = monarch_rdma.configure(backend=backend)
        try:
            buffer.write_from(memoryview(bytes([byte]) * buffer.size())).get(timeout=120)
        except monarch_rdma.RDMAError as error:
            return type(error).__name__
        finally:
            monarch_rdma.configure(backend=old.backend)
        return "ok"

    @endpoint
    def read_from(self, buffer: RDMABuffer) -> bytes:
        out = bytearray(buffer.size())
        buffer.read_into(memoryview(out)).get()
        return bytes(out)
