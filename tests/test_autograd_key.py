"""The argon ops' Autograd-key kernels (csrc/autograd_skip.cpp): with no input requiring grad
they skip torch's boxed autograd fallback; with one they hand the call to that fallback, so the
ops behave as they would without the kernels (forward only: a floating output gets a history
that warns on backward and passes no gradient). Same values either way, every backend."""
import pytest
import torch

from op_cases import OPS, op_cases


def _out_args(name, args):
    """The _out forms' output arguments are the trailing tensors after the inputs."""
    n_out = 7 if name == "moe_plan_out" else 1
    return list(args[-n_out:]) if name.endswith("_out") else []


def _with_grad(args, outs):
    """args with every floating input a fresh leaf that requires grad (outputs left alone)."""
    return [a.detach().clone().requires_grad_() if isinstance(a, torch.Tensor) and
            a.is_floating_point() and not any(a is o for o in outs) else a for a in args]


def _garbage_outs(args, outs):
    """args with each output replaced by a copy filled with garbage."""
    fresh = {id(o): torch.full_like(o, 77) for o in outs}
    return [fresh.get(id(a), a) for a in args], [fresh[id(o)] for o in outs]


def _results(name, op, args, outs):
    got = op(*args)
    if name.endswith("_out"):
        return outs
    return list(got) if isinstance(got, tuple) else [got]


@pytest.mark.parametrize("op_name", OPS)
def test_autograd_kernel_matches_the_fallback(backend, op_name):
    op, args = op_cases(backend)[op_name]
    lib = backend.ops.ns.name
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"{lib}::{op_name}", "Autograd")
    outs = _out_args(op_name, args)

    plain_args, plain_outs = _garbage_outs(args, outs)
    plain = _results(op_name, op, plain_args, plain_outs)
    assert not any(t.requires_grad for t in plain)

    grad_args, grad_outs = _garbage_outs(_with_grad(args, outs), outs)
    leaves = [a for a in grad_args if isinstance(a, torch.Tensor) and a.requires_grad]
    assert leaves, "every op has a floating input"
    with_grad = _results(op_name, op, grad_args, grad_outs)
    for got, want in zip(with_grad, plain):
        torch.testing.assert_close(got.detach(), want, rtol=0, atol=0, equal_nan=True)
    floating = [t for t in with_grad if t.is_floating_point()]
    if op_name.endswith("_out"):  # the fallback gives the written outputs no history
        assert not any(t.requires_grad for t in with_grad)
    else:
        assert floating and all(t.requires_grad and t.grad_fn is not None for t in floating)
        with pytest.warns(UserWarning, match="autograd kernel was not registered"):
            sum(t.float().sum() for t in floating).backward()
        assert all(leaf.grad is None for leaf in leaves)

    with torch.no_grad():  # grad mode off: no history, whatever the inputs
        no_grad = _results(op_name, op, *_garbage_outs(grad_args, outs))
    assert not any(t.requires_grad for t in no_grad)


@pytest.mark.parametrize("op_name", ["moe_plan", "moe_gather", "moe_combine", "swiglu", "moe_mm"])
def test_autograd_kernel_follows_the_fallback_mode(backend, op_name):
    """torch's fallback mode "nothing" gives no history: the kernel defers to the fallback."""
    op, args = op_cases(backend)[op_name]
    grad_args = _with_grad(args, [])
    before = torch._C._get_autograd_fallback_mode()
    torch._C._set_autograd_fallback_mode("nothing")
    try:
        got = _results(op_name, op, grad_args, [])
    finally:
        torch._C._set_autograd_fallback_mode(before)
    assert not any(t.requires_grad for t in got)
