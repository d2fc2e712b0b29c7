"""The argon ops' Autograd-key kernels (csrc/autograd_skip.cpp): with no input requiring grad
they skip torch's boxed autograd fallback; with one they hand the call to that fallback, so the
ops behave as they would without the kernels (forward only: a floating output gets a history
that warns on backward and passes no gradient). Same values either way, every backend. Dual
tensors (forward AD), and outputs that require grad, get a clear error instead of a silently
wrong derivative."""
import pytest
import torch
import torch.autograd.forward_ad as fwAD

from op_cases import OPS, op_cases, written_args

OUT_FORMS = [name for name in OPS if name.endswith("_out")]
FUNCTIONAL = [name for name in OPS if name not in OUT_FORMS]


def _out_args(op, args):
    """The tensors op writes, from its schema (none for the functional forms)."""
    return [args[i] for i, _ in written_args(op)]


def _floating_inputs(args, outs):
    return [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and
            a.is_floating_point() and not any(a is o for o in outs)]


def _skip_without_floating_input(args, outs, op_name):
    """dequantize reads only bytes: no input can require grad or carry a tangent."""
    if not _floating_inputs(args, outs):
        pytest.skip(f"{op_name} has no floating input")


def _with_grad(args, outs):
    """args with every floating input a fresh leaf that requires grad (outputs left alone)."""
    return [a.detach().clone().requires_grad_() if isinstance(a, torch.Tensor) and
            a.is_floating_point() and not any(a is o for o in outs) else a for a in args]


def _garbage_outs(args, outs):
    """args with each output replaced by a copy filled with garbage, and those copies."""
    fresh = {id(o): torch.full_like(o, 77) for o in outs}
    return [fresh.get(id(a), a) for a in args], [fresh[id(o)] for o in outs]


def _results(name, op, args, outs):
    got = op(*args)
    if name.endswith("_out"):
        return outs
    return list(got) if isinstance(got, tuple) else [got]


def _assert_same_values(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.detach(), w, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("op_name", OPS)
def test_inputs_requiring_grad_get_the_fallbacks_behaviour(backend, op_name):
    op, args = op_cases(backend)[op_name]
    lib = backend.ops.ns.name
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"{lib}::{op_name}", "Autograd")
    outs = _out_args(op, args)
    _skip_without_floating_input(args, outs, op_name)

    plain_args, plain_outs = _garbage_outs(args, outs)
    plain = _results(op_name, op, plain_args, plain_outs)
    assert not any(t.requires_grad for t in plain)

    grad_args, grad_outs = _garbage_outs(_with_grad(args, outs), outs)
    leaves = [a for a in grad_args if isinstance(a, torch.Tensor) and a.requires_grad]
    assert leaves, "every op has a floating input"
    with_grad = _results(op_name, op, grad_args, grad_outs)
    _assert_same_values(with_grad, plain)
    floating = [t for t in with_grad if t.is_floating_point()]
    if op_name.endswith("_out"):  # the fallback gives the written outputs no history
        assert not any(t.requires_grad for t in with_grad)
    else:
        assert floating and all(t.requires_grad and t.grad_fn is not None for t in floating)
        with pytest.warns(UserWarning, match="autograd kernel was not registered"):
            sum(t.float().sum() for t in floating).backward()
        assert all(leaf.grad is None for leaf in leaves)

    with torch.no_grad():  # grad mode off: no history, whatever the inputs
        no_grad_args, no_grad_outs = _garbage_outs(grad_args, grad_outs)
        no_grad = _results(op_name, op, no_grad_args, no_grad_outs)
    _assert_same_values(no_grad, plain)
    assert not any(t.requires_grad for t in no_grad)


@pytest.mark.parametrize("op_name", FUNCTIONAL)
def test_the_fallback_mode_is_followed(backend, op_name):
    """torch's fallback mode "nothing" gives no history, "warn" (the default) one: the kernel
    defers to the fallback whenever an input requires grad."""
    op, args = op_cases(backend)[op_name]
    _skip_without_floating_input(args, [], op_name)
    grad_args = _with_grad(args, [])
    before = torch._C._get_autograd_fallback_mode()
    try:
        for mode, history in (("nothing", False), ("warn", True)):
            torch._C._set_autograd_fallback_mode(mode)
            got = [t for t in _results(op_name, op, grad_args, []) if t.is_floating_point()]
            assert got and all(t.requires_grad == history for t in got), mode
    finally:
        torch._C._set_autograd_fallback_mode(before)


@pytest.mark.parametrize("op_name", OPS)
def test_forward_ad_raises(backend, op_name):
    """A dual tensor: NotImplementedError naming the op, not a silently missing tangent."""
    op, args = op_cases(backend)[op_name]
    outs = _out_args(op, args)
    _skip_without_floating_input(args, outs, op_name)
    i = _floating_inputs(args, outs)[0]
    with fwAD.dual_level():
        dual = list(args)
        dual[i] = fwAD.make_dual(args[i], torch.ones_like(args[i]))
        with pytest.raises(NotImplementedError, match=f"forward AD with .*{op_name}"):
            op(*_garbage_outs(dual, outs)[0])


@pytest.mark.parametrize("op_name", OUT_FORMS)
def test_out_requiring_grad_raises(backend, op_name):
    """In grad mode an output that autograd tracks is refused, its name in the error, and left
    as it was; under no_grad it is written."""
    op, args = op_cases(backend)[op_name]
    outs = _out_args(op, args)
    i, name = next((i, name) for i, name in written_args(op) if args[i].is_floating_point())
    tracked = args[i]
    leaf = torch.full_like(tracked, 77).requires_grad_()
    call = [leaf if a is tracked else a for a in _garbage_outs(args, [o for o in outs
                                                                       if o is not tracked])[0]]
    with pytest.raises(RuntimeError, match=f"{op_name}: {name} requires grad"):
        op(*call)
    assert torch.equal(leaf.detach(), torch.full_like(tracked, 77))
    with torch.no_grad():
        op(*call)
    assert not torch.equal(leaf.detach(), torch.full_like(tracked, 77))
