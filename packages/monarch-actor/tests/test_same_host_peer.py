"""Which destinations the runtime names "another process on this host" when it
encodes (CUDA tensors to them may travel by CUDA IPC): Unix sockets and TCP on
this process's own host, never this process itself or an in-process address."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from monarch_actor._core.router import Runtime


def runtime(address: str, aliases: tuple[str, ...] = ()) -> SimpleNamespace:
    fake = SimpleNamespace(address=address, aliases=set(aliases))
    fake._own_host = Runtime._own_host.fget(fake)  # type: ignore[attr-defined]
    return fake


@pytest.mark.parametrize(
    ("own", "destination", "here"),
    [
        ("ipc:///tmp/job/a", "ipc:///tmp/job/b", True),
        ("ipc:///tmp/job/a", "unix:///tmp/job/b", True),
        ("tcp://10.0.0.5:4000", "tcp://10.0.0.5:4001", True),
        ("tcp://10.0.0.5:4000", "ipc:///tmp/job/b", True),
        ("tcp://10.0.0.5:4000", "tcp://10.0.0.6:4001", False),  # another host
        ("ipc:///tmp/job/a", "tcp://10.0.0.6:4001", False),
        ("ipc:///tmp/job/a", "ipc:///tmp/job/a", False),  # this process
        ("ipc:///tmp/job/a", "inproc://peer", False),  # in this process too
        ("ipc:///tmp/job/a", "", False),  # a process that never started
    ],
)
def test_same_host_peer(own: str, destination: str, here: bool) -> None:
    assert Runtime.same_host_peer(runtime(own), destination) is here  # type: ignore[arg-type]


def test_an_alias_of_this_process_is_this_process() -> None:
    fake = runtime("tcp://10.0.0.5:4000", aliases=("ipc:///tmp/job/a",))
    assert not Runtime.same_host_peer(fake, "ipc:///tmp/job/a")  # type: ignore[arg-type]
