"""Training through the ops and the layer (issue 46): the backward formulas (torch_argon/autograd.py)
and the two ops they add (swiglu_backward, moe_mm_weight_grad), on every backend.

What is checked:
  - the two new ops against the reference (fp32 and bf16; garbage-filled out=, experts without
    rows, -1 tiles, zero rows);
  - each formula's gradients against float64 autograd through reference.py (the analytic
    gradient of the contract), and torch.autograd.gradcheck (finite differences of our own
    forward) on the CPU. gradcheck runs in float32: the ops take float32 / float16 / bfloat16
    only (docs/contract.md), so float64 inputs cannot reach them; eps and tolerances are set for
    float32 (a central difference with eps = 1e-3 is good to about 1e-3 relative there);
  - the layer's gradients (x, router, both stacks, shared, residual; adversarial routing with
    -1 ids; T = 0) against float64 autograd of reference.moe_layer; bf16 within stated
    tolerances;
  - determinism: the same gradient bytes from two runs;
  - quantized experts: dx flows through the frozen quantized weights.
"""
import pytest
import torch

import torch_argon
from conftest import assert_bits_equal
from routing_cases import make_ids
from torch_argon import reference
from torch_argon.activations import NAMES as ACTIVATIONS

# Relative to the largest reference value: float32 gradients are a few ulps of their sums
# away from float64; bf16 ones carry bf16's rounding of every stored intermediate (inputs,
# gate/up, h, y, each gradient) and the CPU's bf16 GEMM sums.
TOL = {torch.float32: 2e-5, torch.bfloat16: 3e-2}
# Quantized experts: the Metal moe_qmm kernel stages the dequantized weights as half
# (docs/contract.md), so its forward, and the h the backward reads, carry half's rounding of the
# weights: 2e-4 of the largest gradient measured on metal_host.
QUANTIZED_TOL = 1e-3


def assert_close_rel(got, want, dtype, name="", tol=None):
    want = want.double()
    scale = want.abs().max().item() if want.numel() else 1.0
    err = (got.double() - want).abs().max().item() if want.numel() else 0.0
    tol = TOL[dtype] if tol is None else tol
    assert err <= tol * max(scale, 1e-6), f"{name}: max error {err} vs scale {scale}"


def gen(seed):
    return torch.Generator().manual_seed(seed)


# ---- the two new ops against the reference ------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("fused", [True, False])
def test_swiglu_backward_matches_reference(backend, dtype, activation, fused):
    d = backend.device
    R, I = 37, 40
    gu = (torch.randn(R, 2 * I, generator=gen(0)) * 3).to(dtype).to(d)
    dy = torch.randn(R, I, generator=gen(1)).to(d)  # float32: the forward's out_dtype may differ
    gate, up = (gu, None) if fused else (gu[:, :I], gu[:, I:])
    out = torch.full((R, 2 * I), float("nan"), dtype=dtype, device=d)
    got = backend.ops.swiglu_backward(dy, gate, up, activation=activation, out=out)
    want = reference.swiglu_backward(dy.cpu(), gate.cpu(), None if up is None else up.cpu(),
                                     activation)
    # fp32: a few ulps of the fp32 formulas; bf16: one rounding (an ulp where fp32 straddles)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=8e-3, atol=1e-5)
    torch.testing.assert_close(got.cpu(), want, **tol)
    assert got is out


def test_swiglu_backward_of_no_rows(backend):
    d = backend.device
    got = backend.ops.swiglu_backward(torch.empty(0, 4, device=d), torch.empty(0, 8, device=d))
    assert got.shape == (0, 8)


def plan_and_rows(backend, T, K, E, tile_m, ids_kind, dtype, Kd, N, seed=0):
    d = backend.device
    ids = make_ids(T, K, E, ids_kind).to(d)
    plan = backend.ops.moe_plan(ids, torch.rand(T, K, generator=gen(seed)).to(d), E, tile_m)
    R = plan.sorted_token.shape[0]
    xs = torch.randn(R, Kd, generator=gen(seed + 1)).to(dtype).to(d)
    dy = torch.randn(R, N, generator=gen(seed + 2)).to(dtype).to(d)
    return plan, xs, dy


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("ids_kind", ["uniform", "neg_some", "one_expert"])
@pytest.mark.parametrize("tile_m", [1, 16])
def test_moe_mm_weight_grad_matches_reference(backend, dtype, ids_kind, tile_m):
    """Experts without rows (one_expert) come out zero in a NaN-filled out=; rows of -1 tiles
    add to no expert."""
    E, Kd, N = 6, 40, 24
    plan, xs, dy = plan_and_rows(backend, 30, 3, E, tile_m, ids_kind, dtype, Kd, N)
    out = torch.full((E, N, Kd), float("nan"), dtype=dtype, device=xs.device)
    got = backend.ops.moe_mm_weight_grad(xs, dy, plan, E, out=out)
    want = reference.moe_mm_weight_grad(xs.cpu(), dy.cpu(), plan.tile_expert.cpu(), tile_m, E)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=8e-3, atol=1e-2)
    torch.testing.assert_close(got.cpu(), want, **tol)


def test_moe_mm_weight_grad_of_no_rows_is_zeros(backend):
    d = backend.device
    te = torch.empty(0, dtype=torch.int32, device=d)
    got = backend.ops.moe_mm_weight_grad(torch.empty(0, 8, device=d), torch.empty(0, 4, device=d),
                                         te, 3, 16)
    assert torch.equal(got.cpu(), torch.zeros(3, 4, 8))


@pytest.mark.parametrize("dtype,Kd,N", [(torch.float32, 5, 7), (torch.bfloat16, 16, 8)])
def test_moe_mm_weight_grad_sums_tiles_in_any_order(backend, dtype, Kd, N):
    """tile_expert need not be sorted (moe_mm takes any tile map): an expert's tiles anywhere.
    bf16 with dims of 8: where CUDA's grouped-GEMM path applies, its layout check fails and the
    tile kernel computes every expert."""
    d = backend.device
    te = torch.tensor([2, 0, 2, -1, 1, 2], dtype=torch.int32, device=d)
    xs = torch.randn(12, Kd, generator=gen(3)).to(dtype).to(d)
    dy = torch.randn(12, N, generator=gen(4)).to(dtype).to(d)
    got = backend.ops.moe_mm_weight_grad(xs, dy, te, 4, tile_m=2)
    want = reference.moe_mm_weight_grad(xs.cpu(), dy.cpu(), te.cpu(), 2, 4)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=8e-3, atol=1e-2)
    torch.testing.assert_close(got.cpu(), want, **tol)
    assert torch.equal(got[3].cpu(), torch.zeros(N, Kd, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_moe_mm_with_transposed_weights_matches_reference(backend, dtype):
    """moe_mm's backward multiplies by w.transpose(1, 2), a column-major view (CUDA's grouped
    GEMM takes it as is where bf16 dims are multiples of 8)."""
    E, Kd, N = 5, 32, 24
    plan, dy, _ = plan_and_rows(backend, 40, 2, E, 16, "neg_some", dtype, N, 1)
    w = torch.randn(E, N, Kd, generator=gen(8)).to(dtype).to(dy.device)
    got = backend.ops.moe_mm(dy, w.transpose(1, 2), plan)
    want = reference.moe_mm(dy.cpu(), w.transpose(1, 2).cpu(), plan.tile_expert.cpu(), 16)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=8e-3, atol=1e-2)
    torch.testing.assert_close(got.cpu(), want, **tol)


def test_moe_mm_weight_grad_refuses_an_expert_beyond_n_expert():
    te = torch.tensor([0, 3], dtype=torch.int32)
    for ops in (torch_argon.ops.argon_ops, torch_argon.testing.backends.get("reference").ops):
        with pytest.raises(ValueError, match=r"tile_expert\[1\] = 3 is out of range"):
            ops.moe_mm_weight_grad(torch.randn(2, 4), torch.randn(2, 4), te, 3, tile_m=1)


# ---- each formula: float64 reference autograd, gradcheck ---------------------------------------

T, K, E, H, I, TM = 20, 3, 5, 16, 12, 4


def formula_cases(ops, dtype=torch.float32, device="cpu"):
    """op name -> (fn(*inputs) -> output, inputs, reference fn of the same inputs): one call of
    each differentiable op, the plan fixed (ids with -1 entries)."""
    ids = make_ids(T, K, E, "neg_some").to(device)
    w = torch.rand(T, K, generator=gen(5)).to(device)
    plan = ops.moe_plan(ids, w, E, TM)
    R = plan.sorted_token.shape[0]
    st, pos, te = plan.sorted_token, plan.pos, plan.tile_expert
    cpu = lambda t: t.cpu()  # noqa: E731
    rnd = lambda *s, scale=1.0, seed=0: (torch.randn(*s, generator=gen(seed)) * scale).to(  # noqa: E731
        dtype).to(device)
    # rows the plan leaves empty hold zeros in gathered activations, as the layer's do
    valid_rows = (st >= 0)[:, None]
    from torch_argon.quant import QuantizedWeight, random_quantized
    wq = QuantizedWeight(random_quantized("Q8_0", 24, 32, leading=(E,), generator=gen(6)),
                         "Q8_0", 32)
    w_deq = wq.dequantize()
    wq_data = wq.data.to(device)
    return {
        "moe_gather": (lambda x: ops.moe_gather(x, plan), [rnd(T, H)],
                       lambda x: reference.moe_gather(x, cpu(st))),
        "moe_combine": (lambda y, tw, sh, res: ops.moe_combine(y, plan, tw, shared=sh, residual=res),
                        [rnd(R, H, seed=1) * valid_rows, w.to(dtype), rnd(T, H, seed=2),
                         rnd(T, H, seed=3)],
                        lambda y, tw, sh, res: reference.moe_combine(y, cpu(pos), tw, sh, res)),
        "swiglu_fused": (lambda g: ops.swiglu(g, activation="gelu"), [rnd(R, 2 * I, seed=4)],
                         lambda g: reference.swiglu(g, activation="gelu")),
        "swiglu_two": (lambda g, u: ops.swiglu(g, u, activation="gelu_tanh"),
                       [rnd(R, I, seed=5), rnd(R, I, seed=6)],
                       lambda g, u: reference.swiglu(g, u, activation="gelu_tanh")),
        "swiglu_silu": (lambda g: ops.swiglu(g), [rnd(R, 2 * I, seed=7, scale=4)],
                        lambda g: reference.swiglu(g)),
        "moe_mm": (lambda xs, w: ops.moe_mm(xs, w, plan), [rnd(R, H, seed=8), rnd(E, I, H, seed=9)],
                   lambda xs, w: reference.moe_mm(xs, w, cpu(te), TM)),
        "moe_mm_transposed_w": (lambda xs, w: ops.moe_mm(xs, w.transpose(1, 2), plan),
                                [rnd(R, H, seed=10), rnd(E, H, I, seed=11)],
                                lambda xs, w: reference.moe_mm(xs, w.transpose(1, 2), cpu(te), TM)),
        "moe_qmm": (lambda xs: ops.moe_qmm(xs, wq_data, "Q8_0", 32, plan),
                    [rnd(R, 32, seed=12)],
                    lambda xs: reference.moe_mm(xs, w_deq.to(xs.dtype), cpu(te), TM)),
    }


FORMULAS = list(formula_cases(torch_argon.ops.argon_ops))


def grads_of(fn, inputs, grad_out):
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    out = fn(*leaves)
    return out, torch.autograd.grad(out, leaves, grad_out)


@pytest.mark.parametrize("case", FORMULAS)
def test_formula_matches_float64_reference_autograd(backend, case):
    fn, inputs, ref_fn = formula_cases(backend.ops, device=backend.device)[case]
    out = fn(*inputs)
    grad_out = torch.randn(out.shape, generator=gen(20)).to(out.dtype).to(out.device)
    _, got = grads_of(fn, inputs, grad_out)
    _, want = grads_of(ref_fn, [t.cpu().double() for t in inputs], grad_out.cpu().double())
    for i, (g, w) in enumerate(zip(got, want)):
        assert_close_rel(g.cpu(), w, torch.float32, f"{case} input {i}")


# gradcheck warns that float32 inputs may fail its default tolerances: ours are set for float32.
FLOAT32_GRADCHECK = pytest.mark.filterwarnings("ignore:Input #.*double precision:UserWarning")


@FLOAT32_GRADCHECK
@pytest.mark.parametrize("case", FORMULAS)
def test_gradcheck(case):
    fn, inputs, _ = formula_cases(torch_argon.ops.argon_ops)[case]
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    assert torch.autograd.gradcheck(fn, leaves, eps=1e-3, atol=5e-3, rtol=5e-3, nondet_tol=0.0,
                                    fast_mode=True)


# ---- the layer -----------------------------------------------------------------------------

def layer_tensors(dtype, seed=0, T=24, H=16, I=12, E=6):
    g = gen(seed)
    return {"x": torch.randn(T, H, generator=g).to(dtype),
            "router_weight": torch.randn(E, H, generator=g).to(dtype),
            "w_gate_up": (torch.randn(E, 2 * I, H, generator=g) * H ** -0.5).to(dtype),
            "w_down": (torch.randn(E, H, I, generator=g) * I ** -0.5).to(dtype),
            "shared": torch.randn(T, H, generator=g).to(dtype),
            "residual": torch.randn(T, H, generator=g).to(dtype)}


def layer_grads(t, *, ops, activation="silu", top_k=2, device="cpu", path="auto"):
    leaves = {k: v.detach().clone().to(device).requires_grad_() for k, v in t.items()}
    out = torch_argon.moe_layer(leaves["x"], leaves["router_weight"],
                                (leaves["w_gate_up"], leaves["w_down"]), top_k,
                                shared=leaves["shared"], residual=leaves["residual"],
                                activation=activation, ops=ops, path=path, renormalize=True)
    grad_out = torch.randn(out.shape, generator=gen(9)).to(out.dtype).to(device)
    out.backward(grad_out)
    return out, {k: v.grad for k, v in leaves.items()}, grad_out


def reference_layer_grads(t, grad_out, ids, *, activation="silu", top_k=2):
    """float64 autograd through reference.moe_layer, routed with the layer's own ids (a tie
    in the router cannot pick other experts)."""
    leaves = {k: v.detach().double().requires_grad_() for k, v in t.items()}
    logits = leaves["x"] @ leaves["router_weight"].T
    scores = torch.softmax(logits, dim=-1)
    weights = scores.gather(1, ids)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    out = reference.moe_layer(leaves["x"], None, (leaves["w_gate_up"], leaves["w_down"]), top_k,
                              topk_ids=ids, topk_weights=weights, shared=leaves["shared"],
                              residual=leaves["residual"], activation=activation)
    out.backward(grad_out.double())
    return {k: v.grad for k, v in leaves.items()}


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_gradients_match_float64_reference(backend, activation, dtype):
    t = layer_tensors(dtype)
    _, got, grad_out = layer_grads(t, ops=backend.ops, activation=activation,
                                   device=backend.device)
    ids = torch_argon.route(t["x"].float(), t["router_weight"].float(), 2, renormalize=True)[0]
    want = reference_layer_grads(t, grad_out.cpu(), ids.cpu(), activation=activation)
    for name in t:
        assert_close_rel(got[name].cpu(), want[name], dtype, name)


def test_layer_with_adversarial_routing(backend):
    """moe_experts with -1 ids, every routed token on one expert, the top-k weights tracked."""
    d = backend.device
    t = layer_tensors(torch.float32, seed=3)
    ids = make_ids(24, 3, 6, "one_expert").to(d)
    ids[::3, 1] = -1
    tw = torch.rand(24, 3, generator=gen(4)).to(d).requires_grad_()
    leaves = {k: t[k].clone().to(d).requires_grad_() for k in ("x", "w_gate_up", "w_down")}
    out = torch_argon.moe_experts(leaves["x"], ids, tw, (leaves["w_gate_up"], leaves["w_down"]),
                                  ops=backend.ops)
    grad_out = torch.randn(out.shape, generator=gen(5)).to(d)
    out.backward(grad_out)
    ref = {k: t[k].double().requires_grad_() for k in ("x", "w_gate_up", "w_down")}
    ref_tw = tw.detach().cpu().double().requires_grad_()
    want = reference.moe_layer(ref["x"], None, (ref["w_gate_up"], ref["w_down"]), 3,
                               topk_ids=ids.cpu(), topk_weights=ref_tw)
    want.backward(grad_out.cpu().double())
    for name in ref:
        assert_close_rel(leaves[name].grad.cpu(), ref[name].grad, torch.float32, name)
    assert_close_rel(tw.grad.cpu(), ref_tw.grad, torch.float32, "topk_weights")
    assert torch.equal(tw.grad[::3, 1].cpu(), torch.zeros(8)), "skipped slots get no gradient"


def test_layer_of_no_tokens(backend):
    d = backend.device
    t = {k: (v[:0] if k in ("x", "shared", "residual") else v) for k, v in
         layer_tensors(torch.float32).items()}
    _, got, _ = layer_grads(t, ops=backend.ops, device=d)
    assert got["x"].shape == (0, 16)
    assert torch.equal(got["w_gate_up"].cpu(), torch.zeros_like(t["w_gate_up"]))


@FLOAT32_GRADCHECK
def test_layer_gradcheck():
    t = layer_tensors(torch.float32, T=6, H=8, I=4, E=3)
    ids = torch.tensor([[0, 2], [1, -1], [2, 0], [2, 1], [0, 1], [-1, 2]])

    def layer(x, tw, w_gate_up, w_down):
        return torch_argon.moe_experts(x, ids, tw, (w_gate_up, w_down))

    leaves = [t["x"], torch.rand(6, 2, generator=gen(1)), t["w_gate_up"], t["w_down"]]
    leaves = [v.detach().clone().requires_grad_() for v in leaves]
    assert torch.autograd.gradcheck(layer, leaves, eps=1e-3, atol=5e-3, rtol=5e-3)


def test_gradients_are_deterministic(backend):
    t = layer_tensors(torch.float32, T=64, H=32, I=24, E=8)
    runs = [layer_grads(t, ops=backend.ops, device=backend.device, top_k=3)[1] for _ in range(2)]
    for name in t:
        assert_bits_equal(runs[0][name], runs[1][name], name)


def test_cpu_gradients_do_not_depend_on_the_thread_count():
    t = layer_tensors(torch.float32, T=64, H=32, I=24, E=8)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = layer_grads(t, ops=torch_argon.ops.argon_ops, top_k=3)[1]
    finally:
        torch.set_num_threads(threads)
    many = layer_grads(t, ops=torch_argon.ops.argon_ops, top_k=3)[1]
    for name in t:
        assert_bits_equal(one[name], many[name], name)


def test_quantized_experts_pass_gradients_to_x(backend):
    """QLoRA-style: the quantized weights are frozen bytes; x (and what feeds it) trains."""
    from torch_argon.quant import QuantizedExperts, QuantizedWeight, random_quantized
    d = backend.device
    g = gen(7)
    parts = [QuantizedWeight(random_quantized("Q8_0", n_out, n_in, leading=(4,), generator=g,
                                              device=d), "Q8_0", n_in)
             for n_out, n_in in ((32, 64), (32, 64), (64, 32))]
    experts = QuantizedExperts.from_parts(*parts)
    ids = make_ids(10, 2, 4, "neg_some").to(d)
    tw = torch.rand(10, 2, generator=g).to(d).requires_grad_()
    x = torch.randn(10, 64, generator=g).to(d).requires_grad_()
    out = torch_argon.moe_experts(x, ids, tw, experts, ops=backend.ops, activation_quant="none")
    grad_out = torch.randn(out.shape, generator=g).to(d)
    out.backward(grad_out)
    dense = experts.to_dense()
    rx, rtw = x.detach().cpu().double().requires_grad_(), tw.detach().cpu().double().requires_grad_()
    want = reference.moe_layer(rx, None, (dense.gate_up.cpu(), dense.down.cpu()), 2,
                               topk_ids=ids.cpu(), topk_weights=rtw)
    want.backward(grad_out.cpu().double())
    assert_close_rel(x.grad.cpu(), rx.grad, torch.float32, "x", QUANTIZED_TOL)
    assert_close_rel(tw.grad.cpu(), rtw.grad, torch.float32, "topk_weights", QUANTIZED_TOL)


def test_compiled_forward_and_backward_fullgraph(backend):
    """torch.compile(fullgraph=True) of the layer's forward, and its backward (AOTAutograd traces
    the formulas): the eager gradients, within fp32 rounding (the compiled router's ops may
    round differently)."""
    t = layer_tensors(torch.float32)

    def layer(x, rw, wgu, wd, shared, residual):
        return torch_argon.moe_layer(x, rw, (wgu, wd), 2, shared=shared, residual=residual,
                                     ops=backend.ops, renormalize=True)

    leaves = [t[k].to(backend.device).requires_grad_() for k in
              ("x", "router_weight", "w_gate_up", "w_down", "shared", "residual")]
    eager = torch.autograd.grad(layer(*leaves).square().sum(), leaves)
    torch._dynamo.reset()
    compiled = torch.compile(layer, fullgraph=True)
    got = torch.autograd.grad(compiled(*leaves).square().sum(), leaves)
    for g, e in zip(got, eager):
        assert_close_rel(g.cpu(), e.cpu().double(), torch.float32)


def test_expert_parallel_refuses_gradients():
    """The collectives carry no autograd: in grad mode a tracked tensor raises, naming it,
    before any collective (where the local layer would train)."""
    from torch_argon.distributed import ep_moe_experts
    t = layer_tensors(torch.float32)
    ids = make_ids(24, 2, 6, "uniform")
    for tracked in ("x", "w_down"):
        args = {k: t[k].clone() for k in ("x", "w_gate_up", "w_down")}
        args[tracked].requires_grad_()
        with pytest.raises(NotImplementedError, match=f"{'x' if tracked == 'x' else 'local_experts'}"
                                                      " requires grad, but expert parallel"):
            ep_moe_experts(args["x"], ids, torch.rand(24, 2), (args["w_gate_up"], args["w_down"]),
                           n_experts=6)


def test_registry_takes_the_ops_path_when_autograd_records(monkeypatch):
    """Where Triton could run (faked here: no GPU), the fused GEMMs decline in grad mode with
    their reason, as does the CPU's buffer-reusing path; without grad they are taken."""
    from torch_argon import experts, triton_ops
    monkeypatch.setattr(triton_ops, "refusal", lambda device: "")
    g = gen(11)
    w = (torch.randn(2, 8, 8, generator=g).bfloat16(), torch.randn(2, 8, 4, generator=g).bfloat16())
    x = torch.randn(4, 8, generator=g).bfloat16().requires_grad_()
    reasons = dict(experts.explain(x, w))
    assert "no backward formula" in reasons["triton_dense"]
    assert "autograd records this call" in reasons["cpu_workspace"]
    assert reasons["ops_dense"] == ""
    with torch.no_grad():
        reasons = dict(experts.explain(x, w))
    assert reasons["triton_dense"] == ""


def test_router_top_k_is_torch_topk_when_autograd_records(monkeypatch):
    """The Triton top-k has no backward: with the scores tracked, "auto" takes torch.topk (the
    router's gradient flows through it); untracked, the Triton kernel (faked here) runs."""
    from torch_argon import routing, triton_ops
    monkeypatch.setattr(triton_ops, "refusal", lambda device: "")
    calls = []
    monkeypatch.setattr(triton_ops, "topk_triton",
                        lambda scores, k: calls.append(k) or torch.topk(scores, k, dim=-1))
    scores = torch.rand(5, 8, generator=gen(12)).requires_grad_()
    values, _ = routing.topk_experts(scores, 2)
    assert calls == [] and values.requires_grad
    routing.topk_experts(scores.detach(), 2)
    assert calls == [2]
