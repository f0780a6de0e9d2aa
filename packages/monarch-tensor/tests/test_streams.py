"""Streams, borrowing, coalescing and gradients, on a mesh of 2 real processes."""

import gc

import pytest
import torch

from monarch_actor import this_host
from monarch_tensor import (
    Stream,
    coalescing,
    fetch_shard,
    get_active_stream,
    grad_function,
    grad_generator,
)


@pytest.fixture(scope="module")
def procs():
    mesh = this_host().spawn_procs(per_host={"gpus": 2})
    yield mesh
    mesh.stop().get(timeout=60)


def shards(t):
    return [fetch_shard(t, gpus=g).get(timeout=60) for g in range(2)]


def test_streams_have_names_and_an_active_one():
    comms = Stream("comms")
    assert get_active_stream().name == "main"
    with comms.activate():
        assert get_active_stream() is comms
    assert str(comms) == "stream 'comms'" and repr(comms).startswith("<Stream('comms') at 0x")


def test_a_borrowed_tensor_is_reduced_on_another_stream(procs):
    comms = Stream("comms")
    with procs.activate():
        t = torch.rand(4)
        before = shards(t)
        with comms.activate():
            shared, borrow = comms.borrow(t, mutable=True)
            shared.reduce_("gpus", "sum")
        other = torch.ones(1)  # main goes on meanwhile
        borrow.drop()
        after = t * 1
        assert other.stream.name == "main"
    for got in shards(after):
        assert torch.allclose(got, before[0] + before[1])


def test_borrow_rules_are_checked_here(procs):
    comms = Stream("comms")
    with procs.activate():
        t = torch.ones(2)
        with pytest.raises(TypeError, match="WRONG_STREAM"), comms.activate():
            t + 1
        read, borrow = comms.borrow(t)
        t + 1  # the owner may read a tensor lent read-only
        with pytest.raises(TypeError, match="BORROWED"):
            t.add_(1)  # ... but not write it
        with comms.activate():
            with pytest.raises(TypeError, match="without mutable=True"):
                read.add_(1)
            doubled = read * 2
        with pytest.raises(TypeError, match="already lent"):
            comms.borrow(t, mutable=True)
        borrow.drop()
        with comms.activate(), pytest.raises(TypeError, match="after its borrow was dropped"):
            read + 1
        t.add_(1)  # given back: writable again
        _, borrow = comms.borrow(t, mutable=True)
        with pytest.raises(TypeError, match="BORROWED"):
            t + 1  # lent mutably: the owner cannot even read it
        borrow.drop()
        with pytest.raises(ValueError, match="already on stream 'main'"):
            Stream("main").borrow(t)
    assert shards(doubled)[0].tolist() == [2.0, 2.0]
    assert shards(t)[1].tolist() == [2.0, 2.0]


def test_coalescing_sends_the_block_s_commands_together(procs):
    # Frees of tensors the garbage collector finds join the next batch whenever they
    # come: collect now, and not during the block, so that what is held is the block's.
    gc.collect()
    gc.disable()
    try:
        with procs.activate() as mesh:
            with coalescing():
                t = torch.ones(3)
                for _ in range(10):
                    t = t + 1
                mesh._timer is None or mesh._timer.cancel()
                assert len(mesh._batches["main"]) >= 11  # held until the block ends
            assert not mesh._batches.get("main")
    finally:
        gc.enable()
    assert shards(t)[0].tolist() == [11.0, 11.0, 11.0]


def test_grad_generator_equals_autograd_on_each_shard(procs):
    comms = Stream("comms")
    with procs.activate():
        x = torch.rand(5, 3)
        w = torch.rand(3, 2, requires_grad=True)
        b = torch.rand(2, requires_grad=True)
        inputs = [shards(t) for t in (x, w, b)]
        loss = ((x @ w + b) ** 2).sum()
        grads = {}
        for name, grad in zip(["b", "w"], grad_generator(loss, [b, w]), strict=True):
            with comms.activate():
                shared, borrow = comms.borrow(grad, mutable=True)
                shared.reduce_("gpus", "avg")
            grads[name] = (grad, borrow)
        for _, borrow in grads.values():
            borrow.drop()
    expected = [grads_of(*(values[g] for values in inputs)) for g in range(2)]
    mean_w = (expected[0][0] + expected[1][0]) / 2
    mean_b = (expected[0][1] + expected[1][1]) / 2
    for g in range(2):
        assert torch.allclose(fetch_shard(grads["b"][0], gpus=g).get(), mean_b, atol=1e-5)
        assert torch.allclose(fetch_shard(grads["w"][0], gpus=g).get(), mean_w, atol=1e-5)


def grads_of(x, w, b):
    w = w.clone().requires_grad_(True)
    b = b.clone().requires_grad_(True)
    loss = ((x @ w + b) ** 2).sum()
    return torch.autograd.grad(loss, [w, b])


def test_backward_fills_grad_on_the_processes(procs):
    with procs.activate():
        w = torch.rand(3, requires_grad=True)
        (w * w).sum().backward()
        grad = w.grad
    for w_g, grad_g in zip(shards(w), shards(grad), strict=True):
        assert torch.allclose(grad_g, 2 * w_g)


def triple_backward(x):
    def backward(grad):
        return grad * 3

    return x * 2, backward


def test_grad_function_uses_its_own_backward(procs):
    scaled = grad_function(triple_backward)
    local = torch.ones(2, requires_grad=True)
    scaled(local).sum().backward()
    assert local.grad.tolist() == [3.0, 3.0]
    with procs.activate():
        w = torch.ones(2, requires_grad=True)
        out = scaled(w)
        (grad,) = grad_generator(out.sum(), [w])
    assert shards(out)[0].tolist() == [2.0, 2.0]
    assert shards(grad)[1].tolist() == [3.0, 3.0]


def test_grad_generator_arguments_are_checked(procs):
    with procs.activate():
        w = torch.rand(3, requires_grad=True)
        plain = torch.rand(3)
        with pytest.raises(ValueError, match="does not require grad"):
            grad_generator((w * 2).sum(), [plain])
        with pytest.raises(TypeError, match="only for scalar outputs"):
            grad_generator(w * 2, [w])
    with pytest.raises(TypeError, match="distributed tensors"):
        grad_generator(torch.ones(1, requires_grad=True), [])
