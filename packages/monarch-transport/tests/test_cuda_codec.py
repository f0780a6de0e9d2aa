"""CUDA tensors in the codec: what runs without a GPU. When CUDA IPC is allowed,
which path ``reduce_cuda_tensor`` takes, the settings behind them, and the error
a CUDA tensor meets in a process without CUDA. The device paths themselves are
tested in ``gpu-tests/test_cuda_messages.py``."""

from __future__ import annotations

import logging
import pickle
from typing import Any

import pytest

import monarch_config
from monarch_transport import DecodeError, _cuda, decode, encode

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def clean_settings(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.delenv("MONARCH_CUDA_IPC", raising=False)
    monkeypatch.delenv("MONARCH_HOST_GPUS", raising=False)
    yield
    monarch_config.clear_runtime_config()


def gpus_seen(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


# -- when IPC is allowed -------------------------------------------------------------


@pytest.mark.parametrize(("seen", "allowed"), [(0, False), (1, True), (2, False), (8, False)])
def test_without_host_gpus_the_gpus_this_process_sees_decide(
    monkeypatch: pytest.MonkeyPatch, seen: int, allowed: bool
) -> None:
    gpus_seen(monkeypatch, seen)
    assert _cuda.cuda_ipc_allowed() is allowed


@pytest.mark.parametrize(
    ("host", "allowed"), [("1", True), ("2", False), ("8", False), ("0", False)]
)
def test_host_gpus_overrides_what_a_pinned_process_sees(
    monkeypatch: pytest.MonkeyPatch, host: str, allowed: bool
) -> None:
    # a process pinned to one GPU of eight sees one, but others see other GPUs
    gpus_seen(monkeypatch, 1)
    monkeypatch.setenv("MONARCH_HOST_GPUS", host)
    assert _cuda.cuda_ipc_allowed() is allowed


@pytest.mark.parametrize("off", ["0", "false", "no", "off"])
def test_the_environment_turns_ipc_off(monkeypatch: pytest.MonkeyPatch, off: str) -> None:
    gpus_seen(monkeypatch, 1)
    monkeypatch.setenv("MONARCH_CUDA_IPC", off)
    assert _cuda.cuda_ipc_allowed() is False
    monkeypatch.setenv("MONARCH_CUDA_IPC", "1")
    assert _cuda.cuda_ipc_allowed() is True


def test_configure_turns_ipc_off(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus_seen(monkeypatch, 1)
    with monarch_config.configured(cuda_ipc=False):
        assert _cuda.cuda_ipc_allowed() is False
    assert _cuda.cuda_ipc_allowed() is True
    with monarch_config.configured(host_gpus=4):
        assert _cuda.cuda_ipc_allowed() is False


def test_bad_settings_name_their_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONARCH_CUDA_IPC", "maybe")
    with pytest.raises(ValueError, match="MONARCH_CUDA_IPC"):
        _cuda.cuda_ipc_allowed()
    monkeypatch.setenv("MONARCH_CUDA_IPC", "1")
    monkeypatch.setenv("MONARCH_HOST_GPUS", "one")
    with pytest.raises(ValueError, match="MONARCH_HOST_GPUS"):
        _cuda.cuda_ipc_allowed()
    monkeypatch.setenv("MONARCH_HOST_GPUS", "-1")
    with pytest.raises(ValueError, match="MONARCH_HOST_GPUS"):
        _cuda.cuda_ipc_allowed()


def test_the_settings_are_in_the_registry() -> None:
    known = monarch_config.settings()
    assert known["cuda_ipc"].env == ("MONARCH_CUDA_IPC",) and known["cuda_ipc"].default is True
    assert known["host_gpus"].env == ("MONARCH_HOST_GPUS",) and known["host_gpus"].default is None


# -- which path a tensor takes -----------------------------------------------------------


class FakeCudaTensor:
    """Stands for a CUDA tensor where reduce_cuda_tensor only asks its size."""

    device = "cuda:0"

    def __init__(self, numel: int = 4) -> None:
        self._numel = numel

    def numel(self) -> int:
        return self._numel


@pytest.fixture
def paths(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    taken: list[str] = []

    def ipc(torch: Any, tensor: Any) -> Any:
        taken.append("ipc")
        return (_cuda._rebuild_cuda_ipc, ())

    def staged(torch: Any, tensor: Any, dtype_name: str) -> Any:
        taken.append("staged")
        return (_cuda._rebuild_cuda_staged, ())

    monkeypatch.setattr(_cuda, "_reduce_ipc", ipc)
    monkeypatch.setattr(_cuda, "_reduce_staged", staged)
    return taken


@pytest.mark.parametrize(
    ("same_host", "host_gpus", "ipc_on", "numel", "path"),
    [
        (True, "1", "1", 4, "ipc"),
        (False, "1", "1", 4, "staged"),  # a destination elsewhere (or several)
        (True, "2", "1", 4, "staged"),  # processes of the host see different GPUs
        (True, "1", "0", 4, "staged"),  # turned off
        (True, "1", "1", 0, "staged"),  # nothing to share
    ],
)
def test_ipc_only_for_one_peer_on_a_one_gpu_host_with_ipc_on(
    monkeypatch: pytest.MonkeyPatch,
    paths: list[str],
    same_host: bool,
    host_gpus: str,
    ipc_on: str,
    numel: int,
    path: str,
) -> None:
    monkeypatch.setenv("MONARCH_HOST_GPUS", host_gpus)
    monkeypatch.setenv("MONARCH_CUDA_IPC", ipc_on)
    before = _cuda.counts()
    _cuda.reduce_cuda_tensor(FakeCudaTensor(numel), "float32", same_host)
    assert paths == [path]
    after = _cuda.counts()
    assert after[f"{path}_sent"] == before[f"{path}_sent"] + 1


def test_a_tensor_ipc_cannot_share_is_staged_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, paths: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(torch: Any, tensor: Any) -> Any:
        paths.append("refused")
        raise RuntimeError("expandable segments cannot be shared")

    monkeypatch.setattr(_cuda, "_reduce_ipc", refuse)
    monkeypatch.setattr(_cuda, "_warned_ipc_failure", False)
    monkeypatch.setenv("MONARCH_HOST_GPUS", "1")
    with caplog.at_level(logging.WARNING, logger="monarch.transport.cuda"):
        _cuda.reduce_cuda_tensor(FakeCudaTensor(), "float32", True)
        _cuda.reduce_cuda_tensor(FakeCudaTensor(), "float32", True)
    assert paths == ["refused", "staged", "refused", "staged"]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "expandable segments" in warnings[0]


def test_release_unsent_skips_staged_tensors() -> None:
    _cuda.release_unsent([(_cuda._rebuild_cuda_staged, (b"", "float32", (0,), False, 0))])


def test_cpu_tensors_still_travel_as_bytes_with_same_host() -> None:
    tensor = torch.arange(100_000, dtype=torch.float32)
    frames = encode(tensor, same_host=True)
    assert len(frames) == 3  # header, pickle, the tensor's bytes out-of-band
    assert torch.equal(decode(frames)[1], tensor)


# -- a CUDA tensor where there is no CUDA ------------------------------------------------


class Carrier:
    """Pickles as the codec pickles a CUDA tensor, so the receive side runs
    here, on a machine without CUDA."""

    def __init__(self, rebuild: Any, args: tuple[Any, ...]) -> None:
        self.rebuild, self.args = rebuild, args

    def __reduce__(self) -> tuple[Any, ...]:
        return self.rebuild, self.args


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a process without CUDA")
def test_a_staged_cuda_tensor_without_cuda_says_what_to_do() -> None:
    data = bytearray(torch.arange(4, dtype=torch.float32).numpy().tobytes())
    carrier = Carrier(_cuda._rebuild_cuda_staged, (data, "float32", (4,), False, 3))
    with pytest.raises(DecodeError) as caught:
        decode(encode({"x": carrier}))
    message = str(caught.value)
    assert "a CUDA tensor (on cuda:3 in the sending process)" in message
    assert "CUDA is not available" in message and "tensor.cpu()" in message
    assert "corrupt" not in message  # not the generic unpickling error


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a process without CUDA")
def test_an_ipc_cuda_tensor_without_cuda_says_what_to_do() -> None:
    # reduce_tensor's arguments: index 6 is the sender's device
    shared = (None, None, None, 0, None, None, 1, b"handle", 16, 0, False, b"rc", 0, b"ev", True)
    with pytest.raises(DecodeError, match=r"on cuda:1 in the sending process.*tensor\.cpu\(\)"):
        _cuda._rebuild_cuda_ipc(shared, False)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a process without CUDA")
def test_the_staged_rebuild_checks_cuda_before_the_data() -> None:
    with pytest.raises(DecodeError, match="CUDA is not available"):
        _cuda._rebuild_cuda_staged(b"", "float32", (0,), False, None)


def test_the_staged_rebuild_refuses_a_name_that_is_no_dtype() -> None:
    carrier = Carrier(_cuda._rebuild_cuda_staged, (b"", "Tensor", (0,), False, 0))
    with pytest.raises(DecodeError, match="'Tensor' is not a torch dtype"):
        decode(encode(carrier))


def test_the_rebuilds_pickle_by_reference() -> None:
    # receivers import them by name: they must be importable module attributes
    for rebuild in (_cuda._rebuild_cuda_staged, _cuda._rebuild_cuda_ipc):
        assert pickle.loads(pickle.dumps(rebuild)) is rebuild
