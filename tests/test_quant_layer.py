"""The layer with quantized experts (torch_argon.quant.QuantizedExperts) against the same layer
on the dequantized weights (the fp64 reference), on every backend: gate/up in one format (one
GEMM) or two, every format as the down projection, adversarial routing, T = 0, and nn.MoE with
nn.QuantExperts."""
import pytest
import torch

import torch_argon
from torch_argon import reference
from torch_argon.nn import MoE, QuantExperts, TopKRouter
from torch_argon.quant import QuantizedExperts, QuantizedWeight, random_quantized
from routing_cases import make_ids, make_weights

FORMATS = ["Q8_0", "Q4_0", "Q5_0", "IQ4_NL", "IQ4_XS", "Q4_K", "Q5_K", "Q6_K", "IQ2_XS", "Q3_K",
           "IQ3_S", "Q2_K", "MXFP4"]
H, I = 256, 256
# Relative Frobenius error of the layer against the fp64 reference on the dequantized weights,
# by activation dtype: the kernels accumulate in fp32 and round x, h and the output to it.
REL_TOL = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 3e-2}
# The Metal kernels hold dequantized weight tiles as half (as the seed's kernels do): about 2.4e-4
# per GEMM at fp32 (tests/test_quant_ops.py), two GEMMs in the layer.
METAL_FP32_TOL = 1e-3


def tolerance(backend, dtype):
    metal = backend.name in ("metal_host", "metal_cuda", "mps")
    return METAL_FP32_TOL if metal and dtype == torch.float32 else REL_TOL[dtype]


def experts_of(formats, E, seed=0, activation_quant="none"):
    """Experts of three formats; activation_quant "none" by default: these tests hold the exact
    path to the float64 reference (q8, the CPU's default on AVX-512, has its own test)."""
    g = torch.Generator().manual_seed(seed)
    gate_f, up_f, down_f = formats
    gate = QuantizedWeight(random_quantized(gate_f, I, H, leading=(E,), std=H ** -0.5,
                                            generator=g), gate_f, H)
    up = QuantizedWeight(random_quantized(up_f, I, H, leading=(E,), std=H ** -0.5, generator=g),
                         up_f, H)
    down = QuantizedWeight(random_quantized(down_f, H, I, leading=(E,), std=I ** -0.5,
                                            generator=g), down_f, I)
    return QuantizedExperts.from_parts(gate, up, down, activation_quant=activation_quant)


def rel_err(got, want):
    den = float(want.double().norm())
    return float((got.double().cpu() - want.double()).norm()) / den if den else float(got.norm())


def check(backend, experts, dtype, T, K, dist, E):
    x = torch.randn(T, H).to(dtype)
    ids, w = make_ids(T, K, E, dist, seed=T), make_weights(T, K, seed=T)
    want = reference.moe_layer(x.double(), None, experts, K, topk_ids=ids, topk_weights=w)
    d = backend.device
    got = torch_argon.moe_experts(x.to(d), ids.to(d), w.to(d), experts.to(d), ops=backend.ops)
    assert got.dtype == dtype and got.shape == (T, H)
    assert torch.isfinite(got).all()
    assert rel_err(got, want) < tolerance(backend, dtype), rel_err(got, want)


@pytest.mark.parametrize("down", FORMATS)
def test_every_format_as_down(backend, down):
    check(backend, experts_of(("Q4_K", "Q4_K", down), 6), torch.float32, 40, 2, "uniform", 6)


@pytest.mark.parametrize("formats", [("IQ2_XS", "IQ2_XS", "IQ4_NL"), ("Q4_K", "Q8_0", "Q6_K"),
                                     ("Q5_0", "MXFP4", "Q3_K")], ids=str)
@pytest.mark.parametrize("dtype", list(REL_TOL), ids=str)
def test_mixed_formats(backend, formats, dtype):
    experts = experts_of(formats, 8, seed=1)
    assert experts.fused == (formats[0] == formats[1])
    check(backend, experts, dtype, 33, 3, "neg_some", 8)


@pytest.mark.parametrize("dist", ["one_expert", "empty", "neg_all", "repeated"])
def test_adversarial_routing(backend, dist):
    check(backend, experts_of(("Q4_K", "Q4_K", "Q4_K"), 16, seed=2), torch.bfloat16, 25, 4, dist,
          16)


def test_no_tokens(backend):
    check(backend, experts_of(("Q8_0", "Q8_0", "Q8_0"), 4), torch.float32, 0, 2, "uniform", 4)


def test_nn_moe_with_quantized_experts(backend):
    E, K = 8, 2
    experts = experts_of(("IQ4_XS", "IQ4_XS", "Q6_K"), E, seed=3)
    with torch.device("meta"):
        router = TopKRouter(H, E, K, renormalize=True)
    router.weight = torch.nn.Parameter(torch.randn(E, H) * H ** -0.5, requires_grad=False)
    moe = MoE.from_modules(router, QuantExperts(experts)).to(backend.device)
    x = torch.randn(3, 7, H)
    with torch.no_grad():
        got = moe(x.to(backend.device))
        ids, w = torch_argon.route(x.reshape(-1, H).to(backend.device), moe.gate.weight, K,
                                   renormalize=True)
    want = reference.moe_layer(x.reshape(-1, H).double(), None, experts, K, topk_ids=ids.cpu(),
                               topk_weights=w.cpu())
    assert rel_err(got.reshape(-1, H), want) < tolerance(backend, torch.float32)
    assert set(dict(moe.named_buffers())) == {"experts.gate_up_blocks", "experts.down_blocks"}


# q8 against the float64 layer on the q8-quantized activations (each GEMM is held to 1e-5 of its
# own reference in tests/test_qmm_q8_cpu.py; in the layer a code at a rounding tie of h may flip)
Q8_LAYER_TOL = {torch.float32: 2e-3, torch.float16: 6e-3, torch.bfloat16: 3e-2}
# ... and against the exact layer: the activations' 8-bit rounding, two GEMMs
Q8_VS_EXACT_TOL = 3e-2


@pytest.mark.parametrize("down", FORMATS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_q8_layer_on_the_cpu(down, dtype):
    E, T, K = 6, 40, 2
    experts = experts_of(("Q4_K", "Q4_K", down), E, activation_quant="q8")
    x = torch.randn(T, H).to(dtype)
    ids, w = make_ids(T, K, E, "neg_some", seed=T), make_weights(T, K, seed=T)
    with torch.no_grad():
        got = torch_argon.moe_experts(x, ids, w, experts)
    q8 = reference.moe_layer(x.double(), None, experts, K, topk_ids=ids, topk_weights=w,
                             activation_quant="q8")
    exact = reference.moe_layer(x.double(), None, experts, K, topk_ids=ids, topk_weights=w)
    assert rel_err(got, q8) < Q8_LAYER_TOL[dtype], rel_err(got, q8)
    assert rel_err(got, exact) < Q8_VS_EXACT_TOL, rel_err(got, exact)
