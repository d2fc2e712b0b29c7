"""Gradients never vanish silently (issue 42 item 17). The argon ops have no backward formulas
yet, so their Autograd-key kernels (csrc/autograd_skip.cpp) refuse any call that would need one:
in grad mode, a tensor argument that requires grad (an input, or an output the op writes) raises
NotImplementedError naming the op, the argument and what to do, before anything is written;
every public entry inherits it (moe_layer, moe_experts on the ops, CPU-workspace and Triton
paths, nn.MoE, compiled or not). Under no_grad / inference_mode the same tensors run, with the
values of a call without grad; with no tensor requiring grad, the kernel skips torch's autograd
fallback. Dual tensors (forward AD) are refused too."""
import warnings

import pytest
import torch
import torch.autograd.forward_ad as fwAD

import torch_argon
from op_cases import OPS, op_cases, written_args
from torch_argon import triton_ops

OUT_FORMS = [name for name in OPS if name.endswith("_out")]
REFUSAL = "requires grad, but the argon ops .* have no backward yet"


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


@pytest.mark.parametrize("op_name", OPS)
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


def test_the_refusal_says_what_to_do():
    x = torch.randn(4, 8, requires_grad=True)
    with pytest.raises(NotImplementedError) as err:
        torch_argon.swiglu(x)
    message = str(err.value)
    for advice in ("argon::swiglu: gate requires grad", "moe_layer, moe_experts and nn.MoE",
                   "torch.no_grad()", "torch.inference_mode()", "integrations.transformers"):
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


def test_the_issues_layer_call_raises_instead_of_returning_no_gradients():
    t = {k: v.requires_grad_() for k, v in layer_inputs().items()}
    with pytest.raises(NotImplementedError, match=REFUSAL):
        out = run_layer(t)
        torch.autograd.grad(out.sum(), tuple(t.values()), allow_unused=True)


@pytest.mark.parametrize("tracked", ["x", "router_weight", "w_gate_up", "w_down"])
def test_layer_refuses_any_input_requiring_grad(tracked):
    """One input at a time (the CPU path with only the router tracked keeps its workspace
    buffers, another path than with x or the experts tracked): refused; under no_grad, the
    values of the untracked call."""
    want = run_layer(layer_inputs())
    t = layer_inputs()
    t[tracked].requires_grad_()
    with pytest.raises(NotImplementedError, match=REFUSAL):
        run_layer(t)
    with torch.no_grad():
        torch.testing.assert_close(run_layer(t), want, rtol=0, atol=0)


def test_moe_experts_refuses_topk_weights_requiring_grad():
    t = layer_inputs()
    ids = torch.randint(0, E, (T, K), generator=torch.Generator().manual_seed(1))
    weights = torch.rand(T, K, requires_grad=True)
    with pytest.raises(NotImplementedError, match=f"topk_weights {REFUSAL}"):
        torch_argon.moe_experts(t["x"], ids, weights, (t["w_gate_up"], t["w_down"]))


def test_quantized_experts_refuse_x_requiring_grad():
    from torch_argon.quant import QuantizedExperts, QuantizedWeight, random_quantized
    g = torch.Generator().manual_seed(2)
    gate, up, down = (QuantizedWeight(random_quantized("Q8_0", n_out, n_in, leading=(E,),
                                                       generator=g), "Q8_0", n_in)
                      for n_out, n_in in ((32, 64), (32, 64), (64, 32)))
    experts = QuantizedExperts.from_parts(gate, up, down)
    x = torch.randn(T, 64, requires_grad=True)
    ids = torch.randint(0, E, (T, K), generator=g)
    with pytest.raises(NotImplementedError, match=f"argon::moe_gather: x {REFUSAL}"):
        torch_argon.moe_experts(x, ids, torch.rand(T, K), experts)


def test_nn_moe_in_grad_mode_raises_compiled_or_not_and_warns_nothing():
    """nn.MoE's parameters require grad: in grad mode the block refuses, eagerly and while
    torch.compile traces (where torch's autograd fallback used to warn three times), with no
    warning; under no_grad it runs, compiled too, with no warning either."""
    moe = torch_argon.nn.MoE(H, I, E, K)
    x = torch.randn(T, H)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(NotImplementedError, match=REFUSAL):
            moe(x)
        torch._dynamo.reset()
        with pytest.raises(Exception, match=REFUSAL):
            torch.compile(moe, fullgraph=True)(x)
        with torch.no_grad():
            want = moe(x)
            torch._dynamo.reset()
            got = torch.compile(moe, fullgraph=True)(x)
    torch.testing.assert_close(got, want)
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
