"""moe_qmm(..., activation_quant="q8") on the CPU, in every ISA variant this machine runs
(csrc/cpu/cpu_isa.h: portable, avx2, avx512; each test runs once per variant, and a variant the
CPU or the build lacks is skipped with that reason), and the variant choice itself.

Tolerances: against the reference on the same 8-bit activations (reference.moe_qmm(...,
activation_quant="q8"), float64) the kernels differ only by float32 rounding: the weights'
scale products, the per-sub-block float sums (FMA in the AVX-512 variant) and the one rounding
of the output, so REL_TOL (1e-5 for fp32 outputs, the output dtype's rounding otherwise);
against the exact product (activation_quant="none") by the activations' 8-bit rounding,
<= 1e-2 relative on realistic data (random_quantized weights, Gaussian activations), the
contract's bound. A wrong code, scale, min or sub-block gives errors of order 1.
"""
import pytest
import torch

import torch_argon
from conftest import assert_bits_equal
from cpu_isa_cases import isa  # noqa: F401 (the fixture)
from routing_cases import make_ids, make_weights
from test_quant_ops import REL_TOL, gen, qmm_case, rel_err
from torch_argon import reference
from torch_argon.quant import FORMATS, random_quantized

QUANTIZED = [n for n, f in FORMATS.items() if not f.is_float]
EXACT_TOL = 1e-2


def q8(xs, w_q, name, n_in, plan, out=None):
    return torch_argon.moe_qmm(xs, w_q, name, n_in, plan, activation_quant="q8", out=out)


def check_q8(name, plan, xs, w_q, n_in, what=""):
    out = torch.full((xs.shape[0], w_q.shape[1]), float("nan"), dtype=xs.dtype)
    got = q8(xs, w_q, name, n_in, plan, out=out)
    assert got is out
    want = reference.moe_qmm(xs, w_q, name, n_in, plan.tile_expert, plan.tile_m,
                             activation_quant="q8")
    err = rel_err(got, want)
    assert err < REL_TOL[xs.dtype], f"{name} {what}: {err:.3g} against the q8 reference"
    row_expert = plan.tile_expert.long().repeat_interleave(plan.tile_m)
    assert torch.all(got[row_expert < 0] == 0), f"{name} {what}: rows of unused tiles"
    assert not torch.isnan(got).any(), f"{name} {what}"
    return got


@pytest.mark.parametrize("name", QUANTIZED)
def test_q8_every_format(isa, name):
    """Two GGUF blocks per row for the 256-value formats, five for the 32-value ones; 72 columns
    (four panel groups and a half-filled one); -1 ids."""
    n_blocks = 2 if FORMATS[name].block_elems == 256 else 5
    plan, xs, w_q, n_in = qmm_case(name, 40, 3, 6, 16, "neg_some", 72, n_blocks, torch.float32)
    got = check_q8(name, plan, xs, w_q, n_in)
    exact = reference.moe_qmm(xs, w_q, name, n_in, plan.tile_expert, plan.tile_m)
    assert rel_err(got, exact) < EXACT_TOL


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ["Q4_K", "Q8_0", "IQ2_XS", "Q6_K", "IQ4_XS"])
def test_q8_half_activations(isa, name, dtype):
    """fp16 / bf16 rows are widened exactly before quantizing; the output rounds once."""
    n_blocks = 2 if FORMATS[name].block_elems == 256 else 8
    plan, xs, w_q, n_in = qmm_case(name, 30, 2, 4, 32, "zipf", 40, n_blocks, dtype, seed=1)
    got = check_q8(name, plan, xs, w_q, n_in)
    exact = reference.moe_qmm(xs, w_q, name, n_in, plan.tile_expert, plan.tile_m)
    assert rel_err(got, exact) < EXACT_TOL + REL_TOL[dtype]


@pytest.mark.parametrize("name", ["Q4_K", "Q8_0", "IQ4_XS", "IQ2_XS", "Q2_K"])
def test_q8_realistic_layer_shape_within_the_contract_bound(isa, name):
    """The contract's accuracy bound on a layer-like GEMM: n_in 1024, 100 columns."""
    plan, xs, w_q, n_in = qmm_case(name, 64, 4, 8, 1, "uniform", 100, 1024 // FORMATS[name].block_elems,
                                   torch.float32, seed=3)
    got = check_q8(name, plan, xs, w_q, n_in)
    exact = reference.moe_qmm(xs, w_q, name, n_in, plan.tile_expert, plan.tile_m)
    assert rel_err(got, exact) < EXACT_TOL


@pytest.mark.parametrize("T,K,E,tm,dist", [
    (50, 4, 8, 16, "empty"),        # experts with no rows
    (40, 3, 6, 64, "one_expert"),   # every row on one expert
    (24, 2, 5, 8, "neg_all"),       # every entry -1: all rows zero
    (33, 3, 7, 1, "uniform"),       # tile_m 1
    (37, 2, 9, 4, "repeated"),      # ids repeated within a token
    (700, 1, 2, 1, "one_expert"),   # more rows on one expert than a task takes (512)
])
def test_q8_routings(isa, T, K, E, tm, dist):
    plan, xs, w_q, n_in = qmm_case("Q5_K", T, K, E, tm, dist, 40, 1, torch.float32, seed=T)
    check_q8("Q5_K", plan, xs, w_q, n_in, dist)


def test_q8_no_tokens(isa):
    plan, xs, w_q, n_in = qmm_case("Q8_0", 0, 4, 8, 16, "uniform", 24, 2, torch.float32)
    assert q8(xs, w_q, "Q8_0", n_in, plan).shape == (0, 24)


def test_q8_strided_inputs(isa):
    """xs with a row stride and a column stride, the weights a slice of rows of a bigger stack."""
    plan, xs, w_q, n_in = qmm_case("Q6_K", 30, 2, 4, 16, "uniform", 80, 1, torch.float32)
    wide = torch.randn(xs.shape[0], 2 * n_in + 8)
    wide[:, 3:3 + 2 * n_in:2] = xs
    got = q8(wide[:, 3:3 + 2 * n_in:2], w_q[:, 10:60], "Q6_K", n_in, plan)
    want = reference.moe_qmm(xs, w_q[:, 10:60].contiguous(), "Q6_K", n_in, plan.tile_expert,
                             plan.tile_m, activation_quant="q8")
    assert rel_err(got, want) < REL_TOL[torch.float32]


def test_q8_activation_codes_bit_exact(isa):
    """The kernels' quantization is activation_q8.py's, bit for bit: with Q8_0 weights that are
    the identity (scale 1, one code 1 per row) every output is d * q of one activation, one
    float32 product. Rows: Gaussian, ties at .5 (amax 127, so inv is 1), a block whose
    127 / amax product lies 1e-7 below -83.5, and tiny values."""
    n = 64
    x = torch.randn(40, n, generator=gen(11)) * 3
    x[0, :32] = torch.arange(32) - 15.5  # ties: codes round half to even
    x[0, 0] = 127.0
    x[1, :2] = torch.tensor([2.9639759063720703, -1.9487556219100952])
    x[1, 2:32] = 0
    x[2] *= 1e-30
    w_q = torch.zeros(n, 2, 34, dtype=torch.uint8)  # row i: block i // 32 holds code 1 at i % 32
    i = torch.arange(n)
    w_q[i, i // 32, 1] = 0x3C  # fp16 1.0 (the other block's scale stays 0)
    w_q[i, i // 32, 2 + i % 32] = 1
    w_q = w_q.view(1, n, 68)
    te = torch.zeros(40, dtype=torch.int32)
    got = torch_argon.moe_qmm(x, w_q, "Q8_0", n, te, 1, activation_quant="q8")
    from torch_argon.quant.activation_q8 import q8_activations
    assert_bits_equal(got, q8_activations(x).float(), "d * q")


def test_q8_special_activation_blocks(isa):
    """Blocks of zeros, of values below 3.7e-37 (127 / amax overflows: zero codes), a NaN and an
    infinity: the zero blocks add nothing, the non-finite ones make their row's outputs
    non-finite and leave every other row exact."""
    plan, xs, w_q, n_in = qmm_case("Q4_0", 16, 1, 2, 1, "uniform", 32, 4, torch.float32, seed=5)
    xs = xs.clone()
    xs[0, :32] = 0
    xs[1, 32:64] = 1e-38
    xs[2, 70] = float("nan")
    xs[3, 100] = float("inf")
    xs[4, 5] = -float("inf")
    got = q8(xs, w_q, "Q4_0", n_in, plan)
    bad = torch.zeros(xs.shape[0], dtype=torch.bool)
    bad[2:5] = True
    assert not torch.isfinite(got[bad]).any(dim=1).any()
    want = reference.moe_qmm(xs[~bad], w_q, "Q4_0", n_in, plan.tile_expert[~bad], 1,
                             activation_quant="q8")
    assert rel_err(got[~bad], want) < REL_TOL[torch.float32]


def test_q8_non_finite_weights_stay_in_their_expert(isa):
    plan, xs, w_q, n_in = qmm_case("Q8_0", 20, 2, 4, 1, "uniform", 16, 1, torch.float32)
    w_q = w_q.clone()
    w_q[1, :, 1] = 0x7C  # expert 1: every block scale +inf
    got = q8(xs, w_q, "Q8_0", n_in, plan)
    row_expert = plan.tile_expert.long().repeat_interleave(plan.tile_m)
    assert torch.isfinite(got[row_expert != 1]).all()
    assert not torch.isfinite(got[row_expert == 1]).all()


def test_q8_deterministic_across_thread_counts(isa):
    plan, xs, w_q, n_in = qmm_case("IQ4_XS", 120, 4, 8, 1, "zipf", 200, 2, torch.float32)
    before = torch.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            results.append(q8(xs, w_q, "IQ4_XS", n_in, plan))
    finally:
        torch.set_num_threads(before)
    for r in results[1:]:
        assert_bits_equal(r, results[0], "threads")


@pytest.mark.parametrize("out_form", [False, True])
def test_q8_opcheck(isa, out_form):
    plan, xs, w_q, n_in = qmm_case("Q4_K", 24, 3, 6, 8, "neg_some", 32, 1, torch.bfloat16)
    args = (xs, w_q, FORMATS["Q4_K"].type_id, n_in, plan.tile_expert, plan.tile_m, "q8")
    if out_form:
        torch.library.opcheck(torch.ops.argon.moe_qmm_out.default,
                              args + (torch.empty(xs.shape[0], 32, dtype=xs.dtype),))
    else:
        torch.library.opcheck(torch.ops.argon.moe_qmm.default, args)


def test_q8_compile_fullgraph():
    plan_args = make_ids(20, 2, 4, "uniform"), make_weights(20, 2)
    x = torch.randn(20, 256, generator=gen(7))
    w_q = random_quantized("Q4_K", 32, 256, leading=(4,), generator=gen(7))

    def step(ids, w, x, w_q):
        plan = torch_argon.moe_plan(ids, w, 4, 16)
        y = torch_argon.moe_qmm(torch_argon.moe_gather(x, plan), w_q, "Q4_K", 256, plan,
                                activation_quant="q8")
        return torch_argon.moe_combine(y, plan, w)

    torch._dynamo.reset()
    assert_bits_equal(torch.compile(step, fullgraph=True)(*plan_args, x, w_q),
                      step(*plan_args, x, w_q), "compiled")
