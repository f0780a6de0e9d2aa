"""CUDA tensors as endpoint arguments and results: by value, on the receiver's
GPU, by CUDA IPC between processes of a one-GPU host and staged through pinned
host memory otherwise (``cuda_ipc=False`` forces that here).

Each test reads the transport's per-process counters (``monarch_transport._cuda
.counts()``) on both sides to check which path its tensors took."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from monarch_actor import Actor, endpoint, this_host  # noqa: E402
from monarch_config import configured  # noqa: E402
from monarch_transport import _cuda, encode  # noqa: E402

pytestmark = pytest.mark.gpu


class Holder(Actor):
    """Keeps what it is sent, answers with tensors of its own."""

    def __init__(self) -> None:
        self.kept: Any = None

    @endpoint
    def echo(self, value: Any) -> Any:
        return value

    @endpoint
    def keep(self, tensor: Any) -> dict[str, Any]:
        self.kept = tensor
        return describe(tensor)

    @endpoint
    def kept_tensor(self) -> Any:
        return self.kept

    @endpoint
    def kept_on_cpu(self) -> Any:
        return self.kept.cpu()

    @endpoint
    def bump_kept(self) -> None:
        self.kept.add_(1)
        torch.cuda.current_stream().synchronize()

    @endpoint
    def doubled(self, tensors: list[Any]) -> list[Any]:
        assert all(t.is_cuda for t in tensors)
        return [t * 2 for t in tensors]

    @endpoint
    def fresh(self, n: int) -> Any:
        # freed here as soon as the reply is encoded
        return torch.arange(n, device="cuda", dtype=torch.float32)

    @endpoint
    def scribble(self, n: int) -> None:
        # reuses whatever memory was freed: a reply that still pointed there shows it
        junk = [torch.full((n,), -1.0, device="cuda") for _ in range(4)]
        torch.cuda.current_stream().synchronize()
        del junk

    @endpoint
    def counts(self) -> dict[str, int]:
        return _cuda.counts()

    @endpoint
    def visible(self) -> dict[str, Any]:
        return {
            "devices": torch.cuda.device_count(),
            "current": torch.cuda.current_device(),
            "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "MONARCH_HOST_GPUS": os.environ.get("MONARCH_HOST_GPUS"),
        }


def describe(tensor: Any) -> dict[str, Any]:
    return {
        "device": str(tensor.device),
        "dtype": str(tensor.dtype),
        "shape": tuple(tensor.shape),
        "requires_grad": tensor.requires_grad,
    }


@pytest.fixture(scope="module", params=["ipc", "staged"])
def holder(request: pytest.FixtureRequest) -> Iterator[tuple[str, Any]]:
    """One actor in another process of this host; with ``staged``, CUDA IPC is
    off here and in that process (which starts with this runtime layer)."""
    with configured(cuda_ipc=request.param == "ipc"):
        procs = this_host().spawn_procs(per_host={"procs": 1})
        actor = procs.spawn("holder", Holder)
        actor.counts.call_one().get(timeout=120)  # started
        yield request.param, actor
        procs.stop().get(timeout=60)


class Paths:
    """The CUDA tensors sent and received by each path, here and in the actor,
    since it was made."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor
        self.here = _cuda.counts()
        self.there = actor.counts.call_one().get(timeout=60)

    def delta(self) -> dict[str, int]:
        here, there = _cuda.counts(), self.actor.counts.call_one().get(timeout=60)
        return {
            "sent_ipc": here["ipc_sent"] - self.here["ipc_sent"],
            "sent_staged": here["staged_sent"] - self.here["staged_sent"],
            "received_ipc": there["ipc_received"] - self.there["ipc_received"],
            "received_staged": there["staged_received"] - self.there["staged_received"],
            "replied_ipc": there["ipc_sent"] - self.there["ipc_sent"],
            "replied_staged": there["staged_sent"] - self.there["staged_sent"],
            "back_ipc": here["ipc_received"] - self.here["ipc_received"],
            "back_staged": here["staged_received"] - self.here["staged_received"],
        }


def expect_paths(mode: str, paths: Paths, out: int, back: int) -> None:
    """``out`` tensors went to the actor and ``back`` came back, all by ``mode``."""
    other = "staged" if mode == "ipc" else "ipc"
    delta = paths.delta()
    assert delta[f"sent_{mode}"] == out and delta[f"received_{mode}"] == out, delta
    assert delta[f"replied_{mode}"] == back and delta[f"back_{mode}"] == back, delta
    assert not any(delta[f"{way}_{other}"] for way in ("sent", "received", "replied", "back"))


def sync() -> None:
    torch.cuda.current_stream().synchronize()


def test_the_actor_sees_the_gpu(holder: tuple[str, Any]) -> None:
    _, actor = holder
    seen = actor.visible.call_one().get(timeout=60)
    assert seen["devices"] >= 1, seen


def test_an_argument_and_a_result_round_trip_on_the_gpu(holder: tuple[str, Any]) -> None:
    mode, actor = holder
    sent = torch.randn(1000, 33, device="cuda")
    paths = Paths(actor)
    back = actor.echo.call_one(sent).get(timeout=60)
    expect_paths(mode, paths, 1, 1)
    assert back.is_cuda and back.device == torch.device("cuda", torch.cuda.current_device())
    assert back.dtype == sent.dtype and back.shape == sent.shape
    assert torch.equal(back, sent)
    assert back.data_ptr() != sent.data_ptr()


def test_a_64_mib_tensor_round_trips_exactly(holder: tuple[str, Any]) -> None:
    _, actor = holder
    sent = torch.randint(0, 256, (64 << 20,), dtype=torch.uint8, device="cuda")
    back = actor.echo.call_one(sent).get(timeout=120)
    assert torch.equal(back, sent)


def test_messages_are_by_value_both_ways(holder: tuple[str, Any]) -> None:
    _, actor = holder
    sent = torch.arange(4096, device="cuda", dtype=torch.float32)
    original = sent.clone()
    info = actor.keep.call_one(sent).get(timeout=60)
    assert info["device"].startswith("cuda")
    # the sender writes after sending: the receiver's copy keeps the sent values
    sent.add_(100)
    sync()
    assert torch.equal(actor.kept_tensor.call_one().get(timeout=60), original)
    # the receiver writes: the sender's tensor does not change
    actor.bump_kept.call_one().get(timeout=60)
    assert torch.equal(sent, original + 100)
    assert torch.equal(actor.kept_on_cpu.call_one().get(timeout=60), (original + 1).cpu())
    # a result is a copy too: writing it here leaves the actor's alone
    result = actor.kept_tensor.call_one().get(timeout=60)
    result.mul_(0)
    sync()
    assert torch.equal(actor.kept_tensor.call_one().get(timeout=60), original + 1)


def test_a_broadcast_tensor_freed_and_overwritten_at_once_arrives_intact(
    holder: tuple[str, Any],
) -> None:
    mode, actor = holder
    n = 1 << 20
    paths = Paths(actor)
    sent = torch.full((n,), 7.0, device="cuda")
    actor.keep.broadcast(sent)  # nobody waits: the actor may read it much later
    del sent
    # reuse the freed memory at once, with other values
    junk = [torch.full((n,), -1.0, device="cuda") for _ in range(8)]
    sync()
    kept = actor.kept_tensor.call_one().get(timeout=60)
    assert torch.equal(kept, torch.full((n,), 7.0, device="cuda"))
    del junk
    expect_paths(mode, paths, 1, 1)


def test_a_result_freed_by_the_actor_arrives_intact(holder: tuple[str, Any]) -> None:
    _, actor = holder
    n = 1 << 20
    result = actor.fresh.call_one(n).get(timeout=60)
    actor.scribble.call_one(n).get(timeout=60)
    assert torch.equal(result, torch.arange(n, device="cuda", dtype=torch.float32))


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: torch.randn(256, 512, device="cuda").t(), id="transposed"),
        pytest.param(lambda: torch.randn(64, 64, device="cuda")[:, ::3], id="strided"),
        pytest.param(lambda: torch.randn(8, 1, 16, device="cuda").expand(8, 4, 16), id="expanded"),
        pytest.param(lambda: torch.randn(1000, device="cuda")[10:20], id="offset"),
        pytest.param(lambda: torch.randn(3, 4, device="cuda", dtype=torch.bfloat16), id="bf16"),
        pytest.param(lambda: torch.randn(3, 5, device="cuda").half(), id="fp16"),
        pytest.param(lambda: torch.arange(10, device="cuda") % 3 == 0, id="bool"),
        pytest.param(lambda: torch.randint(-5, 5, (7,), device="cuda"), id="int64"),
        pytest.param(lambda: torch.tensor(3.5, device="cuda"), id="scalar"),
        pytest.param(lambda: torch.empty(0, 4, device="cuda"), id="empty"),
        pytest.param(lambda: torch.randn(4, 4, device="cuda", dtype=torch.complex64), id="complex"),
        pytest.param(
            lambda: torch.randn(4, 4, device="cuda", dtype=torch.complex64).conj(), id="conj"
        ),
    ],
)
def test_layouts_and_dtypes(holder: tuple[str, Any], make: Any) -> None:
    _, actor = holder
    sent = make()
    back = actor.echo.call_one(sent).get(timeout=60)
    assert back.is_cuda and back.dtype == sent.dtype and back.shape == sent.shape
    assert back.is_contiguous()
    assert torch.equal(back, sent.resolve_conj())


def test_requires_grad_is_kept(holder: tuple[str, Any]) -> None:
    _, actor = holder
    leaf = torch.randn(16, 16, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    made = leaf * 2  # not a leaf: its values travel, its graph does not
    info = actor.keep.call_one(leaf).get(timeout=60)
    assert info["requires_grad"] and info["dtype"] == "torch.bfloat16"
    back = actor.echo.call_one(made).get(timeout=60)
    assert back.requires_grad and back.is_leaf
    assert torch.equal(back.detach(), made.detach())
    plain = actor.echo.call_one(leaf.detach()).get(timeout=60)
    assert not plain.requires_grad


def test_many_tensors_in_one_message(holder: tuple[str, Any]) -> None:
    mode, actor = holder
    tensors = [
        torch.randn(size, device="cuda", dtype=dtype)
        for size in (1, 100, 4096, 1 << 18)
        for dtype in (torch.float32, torch.bfloat16, torch.float64)
    ]
    shared = tensors[0]
    paths = Paths(actor)
    back = actor.doubled.call_one([*tensors, shared]).get(timeout=120)
    # the same tensor twice in a message travels once
    expect_paths(mode, paths, len(tensors), len(tensors) + 1)
    for got, sent in zip(back, [*tensors, shared], strict=True):
        assert torch.equal(got, sent * 2)


def test_cpu_and_cuda_tensors_together(holder: tuple[str, Any]) -> None:
    _, actor = holder
    value = {"gpu": torch.randn(100, device="cuda"), "cpu": torch.randn(100), "n": 3}
    back = actor.echo.call_one(value).get(timeout=60)
    assert back["gpu"].is_cuda and not back["cpu"].is_cuda and back["n"] == 3
    assert torch.equal(back["gpu"], value["gpu"]) and torch.equal(back["cpu"], value["cpu"])


def test_a_message_to_several_actors_is_staged_and_right() -> None:
    procs = this_host().spawn_procs(per_host={"procs": 2})
    try:
        actors = procs.spawn("holders", Holder)
        sent = torch.randn(1 << 16, device="cuda")
        before = _cuda.counts()
        infos = actors.keep.call(sent).get(timeout=120).values()
        assert [i["shape"] for i in infos] == [(1 << 16,)] * 2
        after = _cuda.counts()
        assert after["ipc_sent"] == before["ipc_sent"]  # each IPC handle has one receiver
        assert after["staged_sent"] == before["staged_sent"] + 1
        kept = actors.kept_tensor.call().get(timeout=120).values()
        assert all(torch.equal(k, sent) for k in kept)
    finally:
        procs.stop().get(timeout=60)


def test_a_cuda_tensor_reaching_a_process_without_cuda_says_what_to_do(tmp_path: Any) -> None:
    frames = encode(torch.arange(10, device="cuda", dtype=torch.float32))
    path = tmp_path / "frames.pickle"
    path.write_bytes(pickle.dumps([bytes(f) for f in frames]))
    script = (
        "import pickle, sys\n"
        "from monarch_transport import DecodeError, decode\n"
        "frames = pickle.loads(open(sys.argv[1], 'rb').read())\n"
        "try:\n"
        "    decode(frames)\n"
        "except DecodeError as error:\n"
        "    print(error)\n"
        "else:\n"
        "    print('decoded')\n"
    )
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "a CUDA tensor (on cuda:0 in the sending process)" in out, out
    assert "CUDA is not available" in out and "tensor.cpu()" in out, out


def test_shared_blocks_are_reclaimed_over_many_messages(holder: tuple[str, Any]) -> None:
    # each IPC message parks a snapshot in torch's limbo until its receiver lets go;
    # the sender's allocator reclaims those when it needs memory: what stays
    # allocated here must not grow with the number of messages
    _, actor = holder
    size = 16 << 20
    sent = torch.ones(size, dtype=torch.uint8, device="cuda")
    actor.echo.call_one(sent).get(timeout=60)
    before = torch.cuda.memory_allocated()
    for _ in range(40):
        back = actor.echo.call_one(sent).get(timeout=60)
    del back
    grown = torch.cuda.memory_allocated() - before
    assert grown <= 4 * size, f"{grown / size:.0f} blocks of 16 MiB still allocated"
