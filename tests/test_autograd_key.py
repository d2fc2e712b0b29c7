"""Gradients never vanish silently (issue 42 item 17, issue 46). The functional forms of
moe_gather, moe_combine, swiglu, moe_mm and moe_qmm have backward formulas (torch_argon/autograd.py;
their values: test_gradients.py); moe_plan is not differentiable (its outputs never require
grad); every other op (the _out forms, swiglu_backward, moe_mm_weight_grad, dequantize, the
Triton GEMMs) keeps an Autograd-key kernel (csrc/autograd_skip.cpp) that refuses a call that
would need a gradient: in grad mode, a tensor argument that requires grad (an input, or an output
the op writes) raises NotImplementedError naming the op, the argument and what to do, before
anything is written. Under no_grad / inference_mode the same tensors run, with the values of a
call without grad. Dual tensors (forward AD) are refused by every op. The public entries
(moe_layer, moe_experts, nn.MoE, compiled or not) train, whichever input requires grad."""
import warnings

import pytest
import torch
import torch.autograd.forward_ad as fwAD

import torch_argon
from op_cases import OPS, op_cases, written_args
from torch_argon import triton_ops
from torch_argon.autograd import FORMULAS

OUT_FORMS = [name for name in OPS if name.endswith("_out")]
NOT_DIFFERENTIABLE = ("moe_plan",)
REFUSING = [name for name in OPS if name not in FORMULAS and name not in NOT_DIFFERENTIABLE]
REFUSAL = "requires grad, but this op has no backward formula"


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


def _with_grad(args, index):
    """args with the input at `index` a fresh leaf that requires grad."""
    return [a.detach().clone().requires_grad_() if i == index else a for i, a in enumerate(args)]


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


@pytest.mark.parametrize("op_name", REFUSING)
def test_an_input_requiring_grad_is_refused(backend, op_name):
    """Each floating input in turn requires grad: refused in grad mode (outputs untouched),
    computed under no_grad and inference_mode with the values of a plain call."""
    op, args = op_cases(backend)[op_name]
    lib = backend.ops.ns.name
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"{lib}::{op_name}", "Autograd")
    outs = _out_args(op, args)
    _skip_without_floating_input(args, outs, op_name)
    schema = getattr(op, "default", op)._schema
    plain = _results(op_name, op, *_garbage_outs(args, outs))
    assert not any(t.requires_grad for t in plain)
    for i in _floating_inputs(args, outs):
        grad_args, grad_outs = _garbage_outs(_with_grad(args, i), outs)
        name = schema.arguments[i].name
        with pytest.raises(NotImplementedError, match=f"{lib}::{op_name}: {name} {REFUSAL}"):
            op(*grad_args)
        for o in grad_outs:
            assert torch.equal(o, torch.full_like(o, 77)), "an output was written"
        for mode in (torch.no_grad, torch.inference_mode):
            with mode():
                got = _results(op_name, op, *_garbage_outs(grad_args, grad_outs))
            _assert_same_values(got, plain)
            assert not any(t.requires_grad for t in got)


@pytest.mark.parametrize("op_name", list(FORMULAS))
def test_an_op_with_a_formula_records_its_backward(backend, op_name):
    """Each floating input in turn requires grad: the output carries the formula's backward
    node, with the values of a plain call; under no_grad nothing is recorded."""
    op, args = op_cases(backend)[op_name]
    plain = op(*args)
    for i in _floating_inputs(args, []):
        got = op(*_with_grad(args, i))
        assert got.requires_grad and got.grad_fn is not None
        _assert_same_values([got], [plain])
        with torch.no_grad():
            assert not op(*_with_grad(args, i)).requires_grad


def test_moe_plan_is_not_differentiable(backend):
    """topk_weights requiring grad: the plan runs (no refusal), no output requires grad."""
    op, (ids, w, E, tm) = op_cases(backend)["moe_plan"]
    plain = op(ids, w, E, tm)
    got = op(ids, w.clone().requires_grad_(), E, tm)
    assert not any(t.requires_grad for t in got)
    _assert_same_values(list(got), list(plain))


def test_the_refusal_says_what_to_do():
    x = torch.randn(4, 8, requires_grad=True)
    with pytest.raises(NotImplementedError) as err:
        torch_argon.swiglu(x, out=torch.empty(4, 4))
    message = str(err.value)
    for advice in ("argon::swiglu_out: gate requires grad", "functional forms", "out= forms",
                   "torch.no_grad()", "torch.inference_mode()"):
        assert advice in message


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
    with pytest.raises(NotImplementedError, match=f"{op_name}: {name} {REFUSAL}"):
        op(*call)
    assert torch.equal(leaf.detach(), torch.full_like(tracked, 77))
    with torch.no_grad():
        op(*call)
    assert not torch.equal(leaf.detach(), torch.full_like(tracked, 77))


# ---- the public entries ------------------------------------------------------------------------

T, H, I, E, K = 8, 16, 12, 4, 2


def layer_inputs(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return {"x": torch.randn(T, H, generator=g).to(dtype),
            "router_weight": torch.randn(E, H, generator=g).to(dtype),
            "w_gate_up": (torch.randn(E, 2 * I, H, generator=g) * H ** -0.5).to(dtype),
            "w_down": (torch.randn(E, H, I, generator=g) * I ** -0.5).to(dtype)}


def run_layer(t):
    return torch_argon.moe_layer(t["x"], t["router_weight"], (t["w_gate_up"], t["w_down"]), K)


def test_the_issues_layer_call_returns_every_gradient():
    t = {k: v.requires_grad_() for k, v in layer_inputs().items()}
    out = run_layer(t)
    grads = torch.autograd.grad(out.sum(), tuple(t.values()), allow_unused=True)
    assert all(g is not None and bool(g.abs().sum() > 0) for g in grads)


def all_grads():
    t = {k: v.requires_grad_() for k, v in layer_inputs().items()}
    run_layer(t).backward(torch.ones(T, H))
    return {k: v.grad for k, v in t.items()}


@pytest.mark.parametrize("tracked", ["x", "router_weight", "w_gate_up", "w_down"])
def test_layer_trains_any_input_requiring_grad(tracked):
    """One input at a time (with only the router tracked, the CPU-workspace path would keep
    the y its combine's backward reads in a buffer the next call overwrites: it declines):
    the gradient of a call with every input tracked, bit for bit; under no_grad, the values of
    the untracked call."""
    want = run_layer(layer_inputs())
    t = layer_inputs()
    t[tracked].requires_grad_()
    out = run_layer(t)
    run_layer(layer_inputs())  # a later call, as the next layer's or step's would be
    out.backward(torch.ones(T, H))
    _assert_same_values([t[tracked].grad], [all_grads()[tracked]])
    with torch.no_grad():
        torch.testing.assert_close(run_layer(t), want, rtol=0, atol=0)


def test_moe_experts_gives_topk_weights_their_gradient():
    t = layer_inputs()
    ids = torch.randint(0, E, (T, K), generator=torch.Generator().manual_seed(1))
    weights = torch.rand(T, K, requires_grad=True)
    out = torch_argon.moe_experts(t["x"], ids, weights, (t["w_gate_up"], t["w_down"]))
    torch_argon.moe_experts(t["x"], ids, weights.detach(), (t["w_gate_up"], t["w_down"]))
    out.backward(torch.ones(T, H))
    y = [torch_argon.moe_experts(t["x"], ids, torch.eye(K)[k].expand(T, K).contiguous(),
                                 (t["w_gate_up"], t["w_down"])) for k in range(K)]
    want = torch.stack([yk.sum(dim=1) for yk in y], dim=1)  # d out.sum() / d w[t, k] = y_k[t].sum()
    torch.testing.assert_close(weights.grad, want, rtol=1e-5, atol=1e-5)


def test_nn_moe_trains_compiled_or_not_and_warns_nothing():
    """nn.MoE's parameters require grad: in grad mode the block records its backward, eagerly
    and compiled with fullgraph=True (where torch's autograd fallback used to warn), the same
    gradients both ways, with no warning; under no_grad it runs, compiled too. Seeded: the
    compiled graph sums in another order, and unseeded draws occasionally put one gradient of
    64 a few float32 ulps past the tolerance (seen once in CI)."""
    torch.manual_seed(0)
    moe = torch_argon.nn.MoE(H, I, E, K)
    x = torch.randn(T, H)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        moe(x).square().sum().backward()
        eager = [p.grad.clone() for p in moe.parameters()]
        moe.zero_grad()
        torch._dynamo.reset()
        torch.compile(moe, fullgraph=True)(x).square().sum().backward()
        compiled = [p.grad.clone() for p in moe.parameters()]
        with torch.no_grad():
            want = moe(x)
            torch._dynamo.reset()
            got = torch.compile(moe, fullgraph=True)(x)
    torch.testing.assert_close(got, want)
    for e, c in zip(eager, compiled):
        torch.testing.assert_close(c, e, rtol=1e-5, atol=1e-6)
    assert all(bool(g.abs().sum() > 0) for g in eager)
    assert not [w for w in caught if "autograd kernel was not registered" in str(w.message)]


@pytest.mark.skipif(not triton_ops.AVAILABLE, reason=triton_ops.REASON or "triton available")
@pytest.mark.parametrize("name", ["moe_mm_triton", "moe_gate_up_swiglu_triton",
                                  "moe_qmm_triton", "moe_gate_up_swiglu_qmm_triton",
                                  "topk_triton"])
def test_triton_ops_refuse_inputs_requiring_grad(name):
    """The Triton path's ops (defined in Python) refuse as the C++ ops do. Zero rows, so that no
    kernel launches on this CPU host: the refusal comes after custom_op's kernel call."""
    from torch_argon.quant import random_quantized
    from torch_argon.triton_ops import quant_blocks
    te, meta = torch.empty(0, dtype=torch.int32), torch.zeros(4, dtype=torch.int32)
    a = torch.randn(0, 256, dtype=torch.float16, requires_grad=True)
    op = getattr(torch.ops.argon, name)
    if name == "topk_triton":
        args = (torch.randn(0, E, requires_grad=True), K)
    elif "qmm" in name:
        w_q = random_quantized("Q8_0", 2 * 8, 256, leading=(E,))
        args = (a, w_q, 8, 256, quant_blocks.device_tables("cpu"), te, meta, 16)
    else:
        args = (a, torch.randn(E, 2 * 8, 256, dtype=torch.float16), te, meta, 16)
    first = "scores" if name == "topk_triton" else "a"
    with pytest.raises(NotImplementedError, match=f"argon::{name}: {first} {REFUSAL}"):
        op(*args)
    with torch.no_grad():
        op(*args)
