"""The whole MoE layer (torch_argon.layer, torch_argon.nn) against torch_argon.reference.moe_layer
(float64, one expert at a time), on every available backend.

Tolerances, as max |out - ref| / max |ref| where ref is the float64 layer rounded once:
the fast layer rounds twice more inside (SwiGLU output h and down output y are stored in the
input dtype), so the bound is a few ulps of the dtype: fp32 2e-5, fp16 4e-3, bf16 3e-2.
"""
import pytest
import torch
import torch.nn.functional as F

from conftest import backend_params
from torch_argon import reference
from torch_argon.testing import backends
from torch_argon.layer import moe_experts, moe_layer, shared_expert
from torch_argon.nn import MoE, Experts, SwiGLUMLP, expert_weights
from torch_argon.routing import route

TOL = {torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}
DTYPES = list(TOL)


def reference_on_cpu(x, w_gate_up, w_down, ids, weights, shared=None, residual=None,
                     activation="silu"):
    """reference.moe_layer in float64 on the CPU (MPS has no float64), given the routing the
    layer computed on its device, so router ties cannot make the two disagree."""
    def cpu(t):
        return None if t is None else t.cpu()

    return reference.moe_layer(x.cpu().double(), None,
                               (w_gate_up.cpu().double(), w_down.cpu().double()), ids.shape[1],
                               topk_ids=ids.cpu(), activation=activation,
                               topk_weights=weights.cpu(), shared=cpu(shared),
                               residual=None if residual is None else residual.cpu().double())


def assert_close_rel(out, ref, dtype, what="", factor=1):
    """ref: float64 (CPU). The layer's output must be in its input dtype and shape."""
    assert out.dtype == dtype and out.shape == ref.shape
    out, ref = out.cpu().double(), ref.double()
    err = (out - ref).abs().max() / ref.abs().max().clamp(min=1e-30)
    tol = factor * TOL[dtype]
    assert err <= tol, f"{what} {dtype}: relative error {err:.3g} > {tol}"


def make_layer(T, H, I, E, dtype, device, seed=0, shared_I=None):
    """Weights scaled so every stage's output is O(1) (no tolerance hides a wrong expert)."""
    g = torch.Generator().manual_seed(seed)

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(dtype).to(device)

    w = dict(x=rand(T, H), router=rand(E, H, scale=H ** -0.5),
             gate_up=rand(E, 2 * I, H, scale=H ** -0.5), down=rand(E, H, I, scale=I ** -0.5))
    if shared_I:
        w["shared"] = (rand(shared_I, H, scale=H ** -0.5), rand(shared_I, H, scale=H ** -0.5),
                       rand(H, shared_I, scale=shared_I ** -0.5))
        w["shared_gate"] = rand(1, H, scale=H ** -0.5)
    return w


def shared_expert_f64(x, w_gate, w_up, w_down, gate_weight, activation="silu"):
    x, w_gate, w_up, w_down = (t.double() for t in (x, w_gate, w_up, w_down))
    out = (reference.ACTIVATIONS[activation](x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
    if gate_weight is not None:
        out = torch.sigmoid(x @ gate_weight.double().T) * out
    return out


# ---- the functional layer, every backend --------------------------------------------------

SHAPES = [  # T, H, I, E, K, tile_m
    (37, 64, 32, 8, 3, 16),     # ragged T, more rows than experts
    (5, 32, 16, 64, 4, 4),      # E > T*K: most experts empty
    (64, 48, 24, 4, 4, 32),     # K == E: every token visits every expert
]


@pytest.mark.parametrize("backend", backend_params(backends.NAMES))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("scoring,renormalize", [("softmax", False), ("softmax", True),
                                                 ("sigmoid", True)])
def test_moe_layer_matches_reference(backend, dtype, shape, scoring, renormalize):
    b = backends.get(backend)
    T, H, I, E, K, tm = shape
    w = make_layer(T, H, I, E, dtype, b.device)
    out = moe_layer(w["x"], w["router"], (w["gate_up"], w["down"]), K, scoring=scoring,
                    renormalize=renormalize, tile_m=tm, ops=b.ops)
    ids, weights = route(w["x"], w["router"], K, scoring=scoring, renormalize=renormalize)
    ref = reference_on_cpu(w["x"], w["gate_up"], w["down"], ids, weights)
    assert_close_rel(out, ref, dtype, f"{backend} {shape}")


@pytest.mark.parametrize("backend", backend_params(backends.NAMES))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("gated", [True, False])
def test_moe_layer_shared_expert_and_residual(backend, dtype, gated):
    b = backends.get(backend)
    T, H, I, E, K = 29, 64, 32, 8, 2
    w = make_layer(T, H, I, E, dtype, b.device, shared_I=48)
    residual = make_layer(T, H, I, E, dtype, b.device, seed=1)["x"]
    gate_weight = w["shared_gate"] if gated else None
    out = moe_layer(w["x"], w["router"], (w["gate_up"], w["down"]), K, renormalize=True,
                    shared_expert_weights=w["shared"], shared_expert_gate=gate_weight,
                    residual=residual, ops=b.ops)
    shared = shared_expert_f64(*(t.cpu() for t in (w["x"], *w["shared"])),
                               None if gate_weight is None else gate_weight.cpu())
    ids, weights = route(w["x"], w["router"], K, renormalize=True)
    ref = reference_on_cpu(w["x"], w["gate_up"], w["down"], ids, weights, shared, residual)
    # The shared expert runs as plain GEMMs in the input dtype: its own roundings add to the
    # layer's, so allow twice the layer tolerance.
    assert_close_rel(out, ref, dtype, backend, factor=2)


@pytest.mark.parametrize("backend", backend_params(backends.NAMES))
def test_moe_experts_skips_minus_one_ids(backend):
    """Expert-parallel style routing: -1 ids (and whole tokens of them) contribute nothing."""
    b = backends.get(backend)
    T, H, I, E, K = 23, 32, 16, 6, 3
    w = make_layer(T, H, I, E, torch.float32, b.device)
    ids, weights = route(w["x"], w["router"], K)
    ids = torch.where(ids % 2 == 1, -1, ids)  # drop the odd experts
    ids[3] = -1                               # and one token entirely
    out = moe_experts(w["x"], ids, weights, (w["gate_up"], w["down"]), ops=b.ops)
    ref = reference_on_cpu(w["x"], w["gate_up"], w["down"], ids, weights)
    assert_close_rel(out, ref, torch.float32, backend)
    assert torch.count_nonzero(out[3]) == 0


@pytest.mark.parametrize("bad, match", [
    (lambda w: w["gate_up"][:, :-1], r"w_gate_up must be \[E, 2I, H"),
    (lambda w: w["gate_up"][..., :-1], r"w_gate_up must be \[E, 2I, H"),
])
def test_moe_layer_rejects_bad_weight_shapes(bad, match):
    w = make_layer(8, 32, 16, 4, torch.float32, "cpu")
    with pytest.raises(ValueError, match=match):
        moe_layer(w["x"], w["router"], (bad(w), w["down"]), 2)
    with pytest.raises(ValueError, match=r"w_down must be \[E, H, I\]"):
        moe_layer(w["x"], w["router"], (w["gate_up"], w["down"][:, :, :-1]), 2)


# ---- nn.MoE and the weight layouts --------------------------------------------------------

def small_moe(dtype=torch.float32, **kw):
    torch.manual_seed(0)
    args = dict(hidden_size=64, intermediate_size=32, n_experts=8, top_k=3)
    args.update(kw)
    return MoE(**args, dtype=dtype).eval()


@pytest.mark.parametrize("backend", backend_params(backends.NAMES))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shared,activation", [(None, "silu"), (40, "silu"), (40, "gelu"),
                                               (None, "gelu_tanh")])
def test_nn_moe_matches_reference(backend, dtype, shared, activation):
    b = backends.get(backend)
    moe = small_moe(dtype, scoring="sigmoid", renormalize=True, shared_intermediate_size=shared,
                    ops=b.ops, activation=activation).to(b.device)
    x = torch.randn(3, 11, 64).to(dtype).to(b.device)  # [B, S, H]: any leading dims
    residual = torch.randn(3, 11, 64).to(dtype).to(b.device)
    with torch.no_grad():
        out = moe(x, residual=residual)
        x2 = x.reshape(-1, 64)
        s = None
        if shared:
            se = moe.shared_expert
            s = shared_expert_f64(*(t.cpu() for t in (x2, se.gate_proj.weight, se.up_proj.weight,
                                                      se.down_proj.weight,
                                                      moe.shared_expert_gate.weight)),
                                  activation=activation)
        ids, weights = route(x2, moe.gate.weight, 3, scoring="sigmoid", renormalize=True)
        ref = reference_on_cpu(x2, moe.experts.gate_up_proj, moe.experts.down_proj, ids, weights,
                               s, residual.reshape(-1, 64), activation=activation)
    assert out.shape == x.shape
    assert_close_rel(out.reshape(-1, 64), ref, dtype, backend, factor=2 if shared else 1)


@pytest.mark.parametrize("backend", backend_params(backends.NAMES))
def test_nn_moe_in_grad_mode(backend):
    """Grad mode on (a model called without torch.no_grad()): with parameters that require grad,
    the output of no_grad, bit for bit (within bf16's tolerance on CUDA, where no_grad runs the
    fused Triton GEMMs and grad mode the ops), and a backward that reaches every parameter and x, the
    reference's gradients (plain torch autograd) within bf16's tolerance; with frozen
    parameters, the output of no_grad again (the CPU moe_mm raised here until the argon ops'
    Autograd kernels ran the backends below autograd: csrc/autograd_skip.cpp)."""
    b = backends.get(backend)
    moe = small_moe(torch.bfloat16, ops=b.ops).to(b.device)
    assert all(p.requires_grad for p in moe.parameters())
    x = torch.randn(2, 9, 64).to(torch.bfloat16).to(b.device).requires_grad_()
    with torch.no_grad():
        want = moe(x)
    out = moe(x)
    if backend == "cuda":  # no_grad ran the fused Triton GEMMs, grad mode the ops (a backward)
        torch.testing.assert_close(out, want, rtol=1.6e-2, atol=1.6e-2)
    else:
        torch.testing.assert_close(out, want, rtol=0, atol=0)
    out.float().square().sum().backward()
    got = [x.grad] + [p.grad for p in moe.parameters()]
    ref = small_moe(torch.float32, ops=backends.get("reference").ops)
    ref.load_state_dict({k: v.float().cpu() for k, v in moe.state_dict().items()})
    ref_x = x.detach().float().cpu().requires_grad_()
    ref(ref_x).square().sum().backward()
    for g, w in zip(got, [ref_x.grad] + [p.grad for p in ref.parameters()]):
        assert g is not None and bool(g.abs().sum() > 0)
        assert (g.float().cpu() - w).abs().max() <= 5e-2 * w.abs().max()
    moe.requires_grad_(False)
    torch.testing.assert_close(moe(x.detach()), want, rtol=0, atol=0)


def test_nn_moe_loads_a_transformers_style_state_dict():
    moe = small_moe(shared_intermediate_size=40)
    assert set(moe.state_dict()) == {
        "gate.weight", "experts.gate_up_proj", "experts.down_proj",
        "shared_expert.gate_proj.weight", "shared_expert.up_proj.weight",
        "shared_expert.down_proj.weight", "shared_expert_gate.weight"}
    twin = small_moe(shared_intermediate_size=40)
    twin.load_state_dict({k: v + 1 for k, v in moe.state_dict().items()})
    assert torch.equal(twin.experts.down_proj, moe.experts.down_proj + 1)


def test_transposed_stacks_are_passed_without_a_copy():
    plain = small_moe()
    transposed = small_moe(is_transposed=True)
    assert transposed.experts.gate_up_proj.shape == (8, 64, 64)  # [E, H, 2I]
    with torch.no_grad():
        transposed.gate.weight.copy_(plain.gate.weight)
        transposed.experts.gate_up_proj.copy_(plain.experts.gate_up_proj.transpose(1, 2))
        transposed.experts.down_proj.copy_(plain.experts.down_proj.transpose(1, 2))
    stacks = expert_weights(transposed.experts)
    w_gate_up, w_down = stacks.gate_up, stacks.down
    assert w_gate_up.data_ptr() == transposed.experts.gate_up_proj.data_ptr()
    assert w_down.data_ptr() == transposed.experts.down_proj.data_ptr()
    x = torch.randn(17, 64)
    with torch.no_grad():
        torch.testing.assert_close(transposed(x), plain(x), atol=1e-5, rtol=1e-5)


class PerExpertMLP(torch.nn.Module):
    """Mixtral-style (transformers 4.x) expert: w1 gate, w3 up, w2 down."""

    def __init__(self, H, I):
        super().__init__()
        self.w1 = torch.nn.Linear(H, I, bias=False)
        self.w3 = torch.nn.Linear(H, I, bias=False)
        self.w2 = torch.nn.Linear(I, H, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def test_per_expert_modules_are_stacked_once_and_share_memory():
    torch.manual_seed(0)
    H, I, E = 32, 16, 5
    modules = torch.nn.ModuleList(PerExpertMLP(H, I) for _ in range(E))
    x = torch.randn(9, H)
    with torch.no_grad():
        before = [m(x) for m in modules]
        experts = Experts.from_per_expert(modules)
    gate_up, down = experts.gate_up_proj, experts.down_proj
    assert gate_up.shape == (E, 2 * I, H) and down.shape == (E, H, I)
    row = gate_up.stride(0) * gate_up.element_size()
    for e, m in enumerate(modules):
        # each module's weights are views into the stacks: one copy of the memory
        assert m.w1.weight.data_ptr() == gate_up.data_ptr() + e * row
        assert m.w3.weight.data_ptr() == gate_up[e, I:].data_ptr()
        assert m.w2.weight.data_ptr() == down[e].data_ptr()
    with torch.no_grad():
        for m, y in zip(modules, before):  # the per-expert modules still compute the same
            torch.testing.assert_close(m(x), y)
        modules[2].w3.weight.mul_(2)       # and writes through them land in the stack
    assert torch.equal(gate_up[2, I:], modules[2].w3.weight)

    moe = MoE.from_modules(torch.nn.Identity(), experts)
    ids = torch.tensor([[0, 2], [4, -1], [1, 3]] * 3)
    weights = torch.rand(9, 2)
    with torch.no_grad():
        out = moe_experts(x, ids, weights, expert_weights(moe.experts))
        loop = torch.zeros_like(x)
        for t in range(9):
            for k in range(2):
                if ids[t, k] >= 0:
                    loop[t] += weights[t, k] * modules[int(ids[t, k])](x[t:t + 1])[0]
    torch.testing.assert_close(out, loop, atol=1e-5, rtol=1e-5)


def test_from_per_expert_names_and_errors():
    with pytest.raises(ValueError, match="w1/w3/w2 or gate_proj"):
        Experts.from_per_expert([torch.nn.Linear(4, 4)])
    mlps = [SwiGLUMLP(16, 8) for _ in range(3)]  # gate_proj / up_proj / down_proj names
    experts = Experts.from_per_expert(mlps)
    assert experts.gate_up_proj.shape == (3, 16, 16)
    assert mlps[1].up_proj.weight.data_ptr() == experts.gate_up_proj[1, 8:].data_ptr()


# ---- torch.compile ------------------------------------------------------------------------

@pytest.mark.parametrize("backend", backend_params(["cpu", "cuda", "mps"]))
@pytest.mark.parametrize("compiler", ["aot_eager", "inductor"])
def test_nn_moe_compiles_fullgraph(backend, compiler):
    """No graph break anywhere in the layer (fake impls for every argon op, static sizes)."""
    b = backends.get(backend)
    torch._dynamo.reset()
    moe = small_moe(shared_intermediate_size=40, renormalize=True).to(b.device)
    x = torch.randn(2, 13, 64, device=b.device)
    residual = torch.randn(2, 13, 64, device=b.device)
    compiled = torch.compile(moe, fullgraph=True, backend=compiler)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, residual=residual), moe(x, residual=residual),
                                   atol=1e-5, rtol=1e-5)


def test_functional_moe_layer_compiles_fullgraph():
    torch._dynamo.reset()
    w = make_layer(21, 32, 16, 8, torch.bfloat16, "cpu", shared_I=24)

    def layer(x):
        return moe_layer(x, w["router"], (w["gate_up"], w["down"]), 2, scoring="sigmoid",
                         renormalize=True, shared_expert_weights=w["shared"],
                         shared_expert_gate=w["shared_gate"], residual=x)

    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(w["x"]), layer(w["x"]), atol=0, rtol=0)


def test_nn_moe_compiles_once_for_varying_lengths():
    """dynamic=True: one graph serves every sequence length (prefill chunks of any size)."""
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    moe = small_moe(renormalize=True)
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(moe, fullgraph=True, dynamic=True, backend=counter)
    with torch.no_grad():
        for T in (7, 30, 61):
            x = torch.randn(T, 64)
            torch.testing.assert_close(compiled(x), moe(x), atol=1e-5, rtol=1e-5)
    assert counter.frame_count == 1


# ---- bench/bench_layer.py: a smoke run, and its JSON merge --------------------------------

def test_bench_layer_runs_on_cpu_and_merges_its_records(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "bench" / "bench_layer.py"
    out = tmp_path / "results.json"
    foreign = {"op": "moe_plan", "backend": "cpu", "T": 8, "baseline": "x", "median_us": 1.0}
    stale = {"op": "moe_layer", "backend": "cpu", "T": 8, "baseline": "layer_per_expert_loop",
             "dist": "uniform", "E": 4, "K": 2, "H": 32, "I": 16, "median_us": -1.0}
    other_shape = dict(stale, E=512, K=10, H=2048, I=512, median_us=-2.0)
    out.write_text(json.dumps([foreign, stale, other_shape]))
    cmd = [sys.executable, str(script), "--device", "cpu", "--T", "8", "--E", "4", "--K", "2",
           "--hidden", "32", "--inter", "16", "--dtype", "fp32", "--samples", "2",
           "--loop-samples", "1", "--tile-m", "4,8", "--json", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    records = json.loads(out.read_text())
    assert foreign in records and other_shape in records  # other records are kept
    layer = [r for r in records if r["op"] == "moe_layer" and r.get("E") == 4]
    assert {r["baseline"] for r in layer} >= {"layer_per_expert_loop"}
    assert all(r["median_us"] > 0 for r in layer)  # the stale record was replaced
    stages = {r["op"] for r in records if r["op"].startswith("moe_layer/")}
    assert stages == {f"moe_layer/{s}" for s in ("route", "plan", "gather", "gate_up_mm",
                                                  "swiglu", "down_mm", "combine")}
    for r in [r for r in records if r not in (foreign, other_shape)]:
        assert {"op", "backend", "T", "E", "K", "tm", "dist", "median_us", "baseline",
                "baseline_median_us"} <= set(r)
        assert r["tm"] in (4, 8)
    for r in layer:  # the bench checks the layer against each baseline it races (fp32 here)
        assert r["max_rel_err_vs_baseline"] < 1e-5
