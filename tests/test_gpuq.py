"""The gpuq kernels (torch_argon/gpuq, csrc/gpuq): every GGUF format, both activation modes,
SiLU / GELU / GELU-tanh epilogues, -1 ids and unused tiles, NaN-prefilled outputs, tile sizes
from 1 to 64 rows, against the float64 references (tests/gpuq_cases.py). On the CPU the kernels
run through the host emulation (each lane a fiber, each mma.sync a warp exchange computed from
the PTX fragment layouts), so CI checks their logic without a GPU; on a CUDA device, the
kernels themselves."""
import pytest
import torch

from gpuq_cases import NAMES, run_gemm_case, run_unused_kept_case
from torch_argon.gpuq import ops as gpuq
from torch_argon.quant.activation_q8 import quantize_rows_q8

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device (the cpu cases run the same kernels "
                                          "through the host emulation)"))]


def assert_ok(failures):
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("activation_quant", ["none", "q8"])
def test_every_format_bf16(device, name, activation_quant):
    assert_ok(run_gemm_case(name, device, torch.bfloat16, activation_quant=activation_quant))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", NAMES)
def test_every_format_scaled_path(device, name):
    """32-row tiles in bf16: the scaled path (weights rounded to bf16, no group epilogue)."""
    assert_ok(run_gemm_case(name, device, torch.bfloat16, tm=32, T=40, E=2))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["Q4_K", "Q8_0", "IQ4_XS", "IQ2_XS", "Q6_K", "MXFP4"])
def test_fp16_activations(device, name):
    assert_ok(run_gemm_case(name, device, torch.float16, tm=16, T=20))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh"])
@pytest.mark.parametrize("name,activation_quant", [("Q4_K", "none"), ("IQ4_XS", "q8"),
                                                   ("Q6_K", "none")])
def test_gelu_epilogues(device, activation, name, activation_quant):
    assert_ok(run_gemm_case(name, device, torch.bfloat16, activation=activation,
                            activation_quant=activation_quant))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("tm,T", [(1, 5), (4, 9), (16, 24), (32, 40), (64, 70)])
@pytest.mark.parametrize("activation_quant", ["none", "q8"])
def test_tile_sizes(device, tm, T, activation_quant):
    assert_ok(run_gemm_case("Q4_K", device, torch.bfloat16, tm=tm, T=T, E=2,
                            activation_quant=activation_quant, dist="uniform"))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dist", ["neg_all", "one_expert", "zipf"])
def test_adversarial_routing(device, dist):
    assert_ok(run_gemm_case("Q5_K", device, torch.bfloat16, T=16, E=4, K=3, dist=dist))


@pytest.mark.parametrize("device", DEVICES)
def test_unused_tiles_left_alone(device):
    assert_ok(run_unused_kept_case(device))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_quantize_q8_matches_definition(device, dtype):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(37, 160, generator=g) * torch.logspace(-3, 3, 160)
    x[5, 32:64] = 0  # an all-zero block
    x[6, :32] = 1e-38  # 127 / amax overflows: quantizes to zero
    x = x.to(dtype)
    q, d = gpuq.quantize_q8(x.to(device))
    want_q, want_d = quantize_rows_q8(x)
    assert torch.equal(q.cpu(), want_q)
    assert torch.equal(d.cpu(), want_d)


def test_errors_name_the_argument():
    x = torch.randn(4, 256).to(torch.bfloat16)
    w = torch.zeros(2, 8, 144, dtype=torch.uint8)
    te = torch.zeros(1, dtype=torch.int32)
    with pytest.raises(ValueError, match="w_q"):
        gpuq.qmm(x, w[..., :100], "Q4_K", 256, te, 4)
    with pytest.raises(ValueError, match="tile_m"):
        gpuq.qmm(x, w, "Q4_K", 256, te, 3)
    with pytest.raises(ValueError, match="activation_quant"):
        gpuq.qmm(x, w, "Q4_K", 256, te, 4, activation_quant="q4")
    with pytest.raises(ValueError, match="a must be"):
        gpuq.qmm(x.float(), w, "Q4_K", 256, te, 4)
    with pytest.raises(ValueError, match="gpuq has no kernel"):
        gpuq.qmm(x, w, "F16", 256, te, 4)
    with pytest.raises(ValueError, match="tile_expert"):
        gpuq.qmm(x, w, "Q4_K", 256, te.long(), 4)


def _small_problem(name="Q4_K", T=6, E=2, tm=8):
    from gpuq_cases import problem
    from torch_argon import reference
    from torch_argon.quant import FORMATS
    x, wgu, wd, ids, w = problem(name, T, E, 1, "uniform", torch.bfloat16, 9)
    plan = reference.moe_plan(ids, w, E, tm)
    return x.contiguous(), wgu, wd, plan, FORMATS[name].type_id


@pytest.mark.parametrize("activation_quant", ["none", "q8"])
def test_opcheck_qmm(activation_quant):
    x, wgu, _, plan, qtype = _small_problem()
    torch.library.opcheck(gpuq.gpuq_qmm_op, (x, wgu, qtype, x.shape[1], plan.tile_expert, 8),
                          dict(meta=plan.meta, row_token=plan.sorted_token, swiglu=True,
                               activation_quant=activation_quant))


def test_opcheck_quantize_q8():
    torch.library.opcheck(gpuq.gpuq_quantize_q8_op, (torch.randn(5, 64).to(torch.bfloat16),))


def test_compile_fullgraph_matches_eager():
    x, wgu, wd, plan, qtype = _small_problem()
    H, I = x.shape[1], wgu.shape[1] // 2

    def experts(x):
        h = gpuq.gpuq_qmm_op(x, wgu, qtype, H, plan.tile_expert, 8, plan.meta,
                             plan.sorted_token, True)
        return gpuq.gpuq_qmm_op(h, wd, qtype, I, plan.tile_expert, 8, plan.meta)

    got = torch.compile(experts, fullgraph=True, backend="aot_eager")(x)
    assert torch.equal(got, experts(x))


@pytest.mark.parametrize("activation_quant,tol", [("none", 6e-3), ("q8", 2e-2)])
def test_experts_path_matches_the_layer_reference(activation_quant, tol):
    """moe_experts_gpuq (plan, gate/up with the gather and SiLU, down, combine) against the
    float64 layer on the dequantized weights."""
    import torch_argon
    from gpuq_cases import problem, rel_err
    from torch_argon import reference
    from torch_argon.quant import QuantizedExperts, QuantizedWeight, random_quantized
    x, wgu, _, ids, w = problem("Q4_K", 10, 3, 2, "neg_some", torch.bfloat16, 4)
    x = x.contiguous()
    H, I = x.shape[1], wgu.shape[1] // 2
    wd = random_quantized("Q4_K", H, I, leading=(3,), std=0.05,
                          generator=torch.Generator().manual_seed(8))  # down [E, H, I]
    experts = QuantizedExperts(gate_up=QuantizedWeight(wgu, "Q4_K", H),
                               down=QuantizedWeight(wd, "Q4_K", I))
    got = gpuq.moe_experts_gpuq(x, ids, w, experts, ops=torch_argon.argon_ops,
                                activation_quant=activation_quant)
    want = reference.moe_layer(x, None, experts, 2, topk_ids=ids, topk_weights=w)
    assert rel_err(got, want) < tol
