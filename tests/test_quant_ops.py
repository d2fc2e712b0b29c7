"""The quantized op family (dequantize, moe_qmm) on every kernel backend against the reference.

dequantize: bit for bit with torch_argon.quant.dequantize_reference (itself bit for bit with the
gguf package: test_quant_reference.py), on random blocks with finite scales and with inf / NaN /
subnormal scale bytes. A GPU returns its canonical NaN from arithmetic, so there NaN matches NaN;
every other value is compared by its bits.

moe_qmm: against the reference GEMM (the exact float32 weights, products and sums in float64),
as a relative Frobenius error. The tolerance is moe_mm's per output dtype (fp32 1e-5, fp16 1e-3,
bf16 8e-3: the summation order and the one rounding of the output), and, for backends that stage
the dequantized weights as half (the Metal kernel: metal_host, mps), 1e-3 at fp32: each weight
rounded to half is off by up to 2^-11 relative, about 2.4e-4 RMS over a GEMM's output, so 1e-3
leaves 4x margin while a wrong scale, sub-block or row gives errors of order 1. Those backends
are also held to the dtype tolerance against the reference with half-rounded weights, which
checks everything but that one rounding. Outputs are pre-filled with NaN; routings include
empty experts, all tokens on one expert, -1 ids, T = 0, and tile_m below and above the Metal
kernel's 32-row block.
"""
import os

import pytest
import torch

import torch_argon
from conftest import assert_bits_equal
from routing_cases import make_ids, make_weights
from torch_argon import _C
from torch_argon.quant import (FORMATS, dequantize_reference, force_finite_scales,
                               random_quantized, row_bytes)
from torch_argon.quant import tables
from torch_argon.testing import backends

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUANTIZED = [n for n, f in FORMATS.items() if not f.is_float]
REL_TOL = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}
HALF_WEIGHT_TOL = 1e-3
HALF_WEIGHT_BACKENDS = ("metal_host", "mps", "metal_cuda")  # the Metal kernel's weight tiles are half
SPECIAL_HALVES = (0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00, 0xC000, 0x7BFF,
                  0xFBFF, 0x7C00, 0xFC00, 0x7E00, 0x7C01, 0x7D55, 0xFE00, 0xFC01, 0xFFFF)


def gen(seed):
    return torch.Generator().manual_seed(seed)


def skip_without_quant_kernels(backend):
    if backend.name == "cuda":
        # The CUDA kernels are Triton's, with bf16/fp16 activations: tests/test_quant_triton.py
        # holds them to the reference (dequantize bit for bit, GEMMs at their tolerances).
        pytest.skip("cuda: the Triton quantized kernels are tested in tests/test_quant_triton.py")


def rel_err(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm().clamp(min=1e-30))


def nan_like(shape, dtype, device):
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def assert_dequant_equal(got, want, backend, what):
    got = got.cpu()
    if backend.device == "cpu":
        assert_bits_equal(got, want, what)
        return
    assert torch.equal(torch.isnan(got), torch.isnan(want)), what
    keep = ~torch.isnan(want)
    assert_bits_equal(got[keep], want[keep], what)


# ---------------------------------------------------------------- the format tables

def test_cpp_format_table_matches_python():
    cpp = {name: (tid, elems, nbytes, kernels) for name, tid, elems, nbytes, kernels
           in _C.quant_formats()}
    assert set(cpp) == set(FORMATS)
    for name, fmt in FORMATS.items():
        assert cpp[name] == (fmt.type_id, fmt.block_elems, fmt.block_bytes, not fmt.is_float), name


def test_metal_table_header_matches_tables_py():
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "gen_quant_tables", os.path.join(ROOT, "tools", "gen_quant_tables.py"))
    gen_tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen_tables)
    header = gen_tables.read_header()
    for name in ("IQ4_NL_VALUES", "MXFP4_VALUES_X2", "IQ2XS_SIGNS", "IQ2XS_GRID", "IQ3S_GRID"):
        assert header[name] == getattr(tables, name), name


# ---------------------------------------------------------------- dequantize

@pytest.mark.parametrize("name", QUANTIZED)
def test_dequantize_bit_exact(backend, name):
    skip_without_quant_kernels(backend)
    fmt = FORMATS[name]
    n_in = 2 * fmt.block_elems if fmt.block_elems == 256 else 3 * fmt.block_elems
    d = backend.device
    # Realistic blocks, and random bytes (every quant pattern) with their fp16 fields made finite.
    realistic = random_quantized(name, 5, n_in, leading=(2,), generator=gen(1))
    raw = torch.randint(0, 256, (3, 7, row_bytes(name, n_in)), dtype=torch.uint8, generator=gen(2))
    for w_q, what in ((realistic, "synthetic"), (force_finite_scales(raw, name), "random bytes")):
        want = dequantize_reference(w_q, name, n_in)
        out = nan_like(want.shape, torch.float32, d)
        got = backend.ops.dequantize(w_q.to(d), name, n_in, out=out)
        assert got is out
        assert_dequant_equal(got, want, backend, f"{name} {what}")
        assert_dequant_equal(backend.ops.dequantize(w_q.to(d), name, n_in), want, backend,
                             f"{name} {what}, functional")


@pytest.mark.parametrize("name", QUANTIZED)
def test_dequantize_special_scales(backend, name):
    """inf, NaN (quiet and signalling, with payloads), subnormal and zero fp16 scales: the
    reference's values (NaN payloads and signs too, where the device keeps them)."""
    skip_without_quant_kernels(backend)
    fmt = FORMATS[name]
    n_blocks = 4 * len(SPECIAL_HALVES)
    blocks = torch.randint(0, 256, (n_blocks, fmt.block_bytes), dtype=torch.uint8,
                           generator=gen(3))
    halves = torch.tensor(SPECIAL_HALVES).repeat(4)
    for i, off in enumerate(fmt.fp16_offsets):  # two scale fields: every pairing over the blocks
        h = halves.roll(5 * i)
        blocks[:, off], blocks[:, off + 1] = (h & 0xFF).to(torch.uint8), (h >> 8).to(torch.uint8)
    w_q = blocks.reshape(4, -1)  # 4 rows of len(SPECIAL_HALVES) blocks
    n_in = len(SPECIAL_HALVES) * fmt.block_elems
    want = dequantize_reference(w_q, name, n_in)
    if name != "MXFP4":
        assert torch.isnan(want).any() and torch.isinf(want).any()
    got = backend.ops.dequantize(w_q.to(backend.device), name, n_in)
    assert_dequant_equal(got, want, backend, f"{name} special scales")


def test_dequantize_mxfp4_every_exponent(backend):
    """Every exponent byte with every code: subnormal scales (e < 2), 2^127 (e = 255) times 12
    overflowing to inf. A device that flushes subnormals may zero e <= 2; the host keeps them."""
    skip_without_quant_kernels(backend)
    blocks = torch.zeros(256, 17, dtype=torch.uint8)
    blocks[:, 0] = torch.arange(256, dtype=torch.uint8)
    blocks[:, 1:] = torch.arange(16, dtype=torch.uint8) * 17  # codes c | c << 4
    w_q = blocks.reshape(16, -1)
    want = dequantize_reference(w_q, "MXFP4", 16 * 32)
    got = backend.ops.dequantize(w_q.to(backend.device), "MXFP4", 16 * 32).cpu()
    if backend.device != "cpu":
        keep = blocks[:, 0].repeat_interleave(32).reshape(16, -1) > 2
        got, want = got[keep], want[keep]
    assert_dequant_equal(got, want, backend, "MXFP4 exponents")


def test_dequantize_views_and_empty(backend):
    skip_without_quant_kernels(backend)
    d = backend.device
    w_q = random_quantized("Q4_K", 12, 512, leading=(3,), generator=gen(4))
    view = w_q.to(d)[:, 2:9]  # rows of a bigger stack
    assert not view.is_contiguous()
    assert_dequant_equal(backend.ops.dequantize(view, "Q4_K", 512),
                         dequantize_reference(w_q[:, 2:9], "Q4_K", 512), backend, "view")
    for shape, n_in in (((0, 144), 256), ((3, 0, 144), 256), ((4, 0), 0)):
        got = backend.ops.dequantize(torch.empty(shape, dtype=torch.uint8, device=d), "Q4_K", n_in)
        assert got.shape == (*shape[:-1], n_in) and got.dtype == torch.float32


def test_public_dequantize_takes_names_enums_and_ids():
    w_q = random_quantized("IQ4_XS", 4, 256, generator=gen(5))
    want = dequantize_reference(w_q, "IQ4_XS", 256)
    for qtype in ("IQ4_XS", "iq4_xs", 23, FORMATS["IQ4_XS"]):
        assert_bits_equal(torch_argon.dequantize(w_q, qtype, 256), want, str(qtype))
    gguf = pytest.importorskip("gguf")
    assert_bits_equal(torch_argon.dequantize(w_q, gguf.GGMLQuantizationType.IQ4_XS, 256), want)
    # The plain float types are a reinterpretation of the bytes (the reference), not a kernel.
    x = torch.randn(3, 5).half()
    assert torch.equal(torch_argon.dequantize(x.view(torch.uint8), "F16", 5), x.float())


# ---------------------------------------------------------------- moe_qmm

def qmm_case(name, T, K, E, tm, dist, N, n_blocks, dtype, seed=0):
    """A plan, its gathered rows xs and quantized expert weights w_q [E, N, row_bytes]."""
    from torch_argon import reference
    fmt = FORMATS[name]
    n_in = n_blocks * fmt.block_elems
    plan = reference.moe_plan(make_ids(T, K, E, dist, seed=seed), make_weights(T, K), E, tm)
    x = torch.randn(T, n_in, generator=gen(seed + 10)).to(dtype)
    xs = reference.moe_gather(x, plan.sorted_token)
    w_q = random_quantized(name, N, n_in, leading=(E,), std=n_in ** -0.5, generator=gen(seed))
    return plan, xs, w_q, n_in


def mm_f64(xs, w, tile_expert, tile_m):
    """The reference GEMM on given float weights (to hold the Metal kernel to its half-rounded
    weights)."""
    out = torch.zeros(xs.shape[0], w.shape[1], dtype=xs.dtype)
    row_expert = tile_expert.long().repeat_interleave(tile_m)
    for e in row_expert.unique().tolist():
        if e >= 0:
            rows = row_expert == e
            out[rows] = (xs[rows].double() @ w[e].double().T).to(xs.dtype)
    return out


def check_qmm(backend, ref, name, plan, xs, w_q, n_in, what=""):
    d = backend.device
    out = nan_like((xs.shape[0], w_q.shape[1]), xs.dtype, d)
    got = backend.ops.moe_qmm(xs.to(d), w_q.to(d), name, n_in, plan.to(d), out=out)
    assert got is out
    got = got.cpu()
    want = ref.moe_qmm(xs, w_q, name, n_in, plan)
    tol = REL_TOL[xs.dtype]
    if backend.name in HALF_WEIGHT_BACKENDS:
        half_want = mm_f64(xs, dequantize_reference(w_q, name, n_in).half().float(),
                            plan.tile_expert, plan.tile_m)
        assert rel_err(got, half_want) < tol, f"{name} {what}: vs half-rounded weights"
        tol = max(tol, HALF_WEIGHT_TOL)
    assert rel_err(got, want) < tol, f"{name} {what}: {rel_err(got, want):.3g} >= {tol}"
    # Rows the plan does not fill (tiles of expert -1) are zero, not the NaN put there.
    row_expert = plan.tile_expert.long().repeat_interleave(plan.tile_m)
    assert torch.all(got[row_expert < 0] == 0), f"{name} {what}: unused rows"
    assert not torch.isnan(got).any(), f"{name} {what}"
    return got


@pytest.mark.parametrize("name", QUANTIZED)
def test_moe_qmm_every_format(backend, ref, name):
    skip_without_quant_kernels(backend)
    n_blocks = 2 if FORMATS[name].block_elems == 256 else 5
    plan, xs, w_q, n_in = qmm_case(name, 40, 3, 6, 16, "neg_some", 72, n_blocks, torch.float32)
    check_qmm(backend, ref, name, plan, xs, w_q, n_in)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ["Q4_K", "Q8_0", "IQ2_XS"])
def test_moe_qmm_half_activations(backend, ref, name, dtype):
    skip_without_quant_kernels(backend)
    n_blocks = 1 if FORMATS[name].block_elems == 256 else 4
    plan, xs, w_q, n_in = qmm_case(name, 30, 2, 4, 32, "zipf", 40, n_blocks, dtype, seed=1)
    check_qmm(backend, ref, name, plan, xs, w_q, n_in)


@pytest.mark.parametrize("T,K,E,tm,dist", [
    (50, 4, 8, 16, "empty"),        # experts with no rows
    (40, 3, 6, 64, "one_expert"),   # every row on one expert, tiles bigger than the Metal block
    (24, 2, 5, 8, "neg_all"),       # every entry -1: all rows zero
    (33, 3, 7, 1, "uniform"),       # tile_m 1: a 32-row block spans many experts
    (37, 2, 9, 4, "repeated"),      # ids repeated within a token
])
def test_moe_qmm_routings(backend, ref, T, K, E, tm, dist):
    skip_without_quant_kernels(backend)
    plan, xs, w_q, n_in = qmm_case("Q4_K", T, K, E, tm, dist, 40, 1, torch.float32, seed=T)
    check_qmm(backend, ref, "Q4_K", plan, xs, w_q, n_in, dist)


def test_moe_qmm_no_tokens(backend, ref):
    skip_without_quant_kernels(backend)
    plan, xs, w_q, n_in = qmm_case("Q8_0", 0, 4, 8, 16, "uniform", 24, 2, torch.float32)
    got = backend.ops.moe_qmm(xs.to(backend.device), w_q.to(backend.device), "Q8_0", n_in,
                              plan.to(backend.device))
    assert got.shape == (0, 24)


def test_moe_qmm_strided_inputs(backend, ref):
    """xs with a row stride, and the weights as a slice of rows of a bigger stack."""
    skip_without_quant_kernels(backend)
    plan, xs, w_q, n_in = qmm_case("Q6_K", 30, 2, 4, 16, "uniform", 80, 1, torch.float32)
    xs_wide = torch.randn(xs.shape[0], n_in + 8)
    xs_wide[:, 3:3 + n_in] = xs
    d = backend.device
    w_view = w_q.to(d)[:, 10:60]
    got = backend.ops.moe_qmm(xs_wide.to(d)[:, 3:3 + n_in], w_view, "Q6_K", n_in, plan.to(d))
    want = ref.moe_qmm(xs, w_q[:, 10:60].contiguous(), "Q6_K", n_in, plan)
    tol = HALF_WEIGHT_TOL if backend.name in HALF_WEIGHT_BACKENDS else REL_TOL[torch.float32]
    assert rel_err(got, want) < tol


def test_moe_qmm_non_finite_weights_stay_in_their_expert(backend, ref):
    """An expert whose scales are inf/NaN gives NaN/inf in its own rows only."""
    skip_without_quant_kernels(backend)
    plan, xs, w_q, n_in = qmm_case("Q8_0", 20, 2, 4, 1, "uniform", 16, 1, torch.float32)
    w_q = w_q.clone()
    w_q[1, :, 1] = 0x7C  # expert 1: every block scale +inf
    d = backend.device
    got = backend.ops.moe_qmm(xs.to(d), w_q.to(d), "Q8_0", n_in, plan.to(d)).cpu()
    row_expert = plan.tile_expert.long().repeat_interleave(plan.tile_m)
    others = (row_expert != 1)
    assert torch.isfinite(got[others]).all()
    assert not torch.isfinite(got[row_expert == 1]).all()
    want = ref.moe_qmm(xs, w_q, "Q8_0", n_in, plan)
    tol = HALF_WEIGHT_TOL if backend.name in HALF_WEIGHT_BACKENDS else REL_TOL[torch.float32]
    assert rel_err(got[others], want[others]) < tol


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_moe_qmm_cpu_many_rows_per_expert(ref, dtype):
    """More rows on one expert than one CPU task takes (512): the rows split into chunks, each
    with its own widened copy of xs."""
    plan, xs, w_q, n_in = qmm_case("Q4_K", 400, 3, 4, 1, "one_expert", 40, 1, dtype)
    check_qmm(backends.get("cpu"), ref, "Q4_K", plan, xs, w_q, n_in)


def test_moe_qmm_cpu_deterministic_across_thread_counts():
    plan, xs, w_q, n_in = qmm_case("Q4_K", 120, 4, 8, 1, "zipf", 200, 2, torch.float32)
    before = torch.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            results.append(torch_argon.moe_qmm(xs, w_q, "Q4_K", n_in, plan))
    finally:
        torch.set_num_threads(before)
    for r in results[1:]:
        assert_bits_equal(r, results[0], "threads")


def test_public_moe_qmm_takes_a_bare_tile_expert():
    plan, xs, w_q, n_in = qmm_case("Q5_K", 10, 2, 3, 16, "uniform", 24, 1, torch.float32)
    a = torch_argon.moe_qmm(xs, w_q, "Q5_K", n_in, plan)
    b = torch_argon.moe_qmm(xs, w_q, 13, n_in, plan.tile_expert, 16)
    assert_bits_equal(a, b)
    with pytest.raises(ValueError, match="pass tile_m"):
        torch_argon.moe_qmm(xs, w_q, "Q5_K", n_in, plan.tile_expert)


def test_compile_fullgraph():
    """torch.compile(fullgraph=True) traces plan -> gather -> moe_qmm -> combine and dequantize
    (the qtype given by name) with no graph break, with the eager results."""
    plan_args = make_ids(20, 2, 4, "uniform"), make_weights(20, 2)
    x = torch.randn(20, 256, generator=gen(7))
    w_q = random_quantized("Q4_K", 32, 256, leading=(4,), generator=gen(7))

    def step(ids, w, x, w_q):
        plan = torch_argon.moe_plan(ids, w, 4, 16)
        y = torch_argon.moe_qmm(torch_argon.moe_gather(x, plan), w_q, "Q4_K", 256, plan)
        return torch_argon.moe_combine(y, plan, w), torch_argon.dequantize(w_q, "Q4_K", 256)

    torch._dynamo.reset()
    got = torch.compile(step, fullgraph=True)(*plan_args, x, w_q)
    for g, want in zip(got, step(*plan_args, x, w_q)):
        assert_bits_equal(g, want, "compiled")


# ---------------------------------------------------------------- bad input

def bad_qmm_inputs(device):
    plan, xs, w_q, n_in = qmm_case("Q4_K", 20, 2, 4, 16, "uniform", 24, 1, torch.float32)
    return plan.to(device), xs.to(device), w_q.to(device), n_in


def test_moe_qmm_q8_raises_where_it_has_no_kernels(backend):
    """Backends without integer kernels refuse "q8" (never silently compute "none")."""
    skip_without_quant_kernels(backend)
    if backend.device == "cpu" and backend.name == "cpu":
        pytest.skip("cpu: has q8 kernels (tests/test_qmm_q8_cpu.py)")
    plan, xs, w_q, n_in = bad_qmm_inputs(backend.device)
    with pytest.raises(ValueError, match='activation_quant="q8" has no kernels on Metal'):
        backend.ops.moe_qmm(xs, w_q, "Q4_K", n_in, plan, activation_quant="q8")


def test_python_backends_raise_the_same_q8_error():
    """The CUDA registration (Python) words the error as the C++ check does."""
    from torch_argon.quant.activation_q8 import check_exact_activations_only
    with pytest.raises(ValueError, match='activation_quant="q8" has no kernels on CUDA '
                       r'\(its integer kernels run on the CPU and on CUDA sm_80\+\); pass activation_quant="none"'):
        check_exact_activations_only("q8", "CUDA")
    check_exact_activations_only("none", "CUDA")


def test_moe_qmm_rejects_out_of_range_experts_on_the_cpu():
    """A value check (argument misuses: tests/misuse_cases.py)."""
    plan, xs, w_q, n_in = bad_qmm_inputs("cpu")
    te = plan.tile_expert.clone()
    te[0] = 4
    with pytest.raises(ValueError, match=r"tile_expert\[0\] = 4 is out of range"):
        torch_argon.moe_qmm(xs, w_q, "Q4_K", n_in, te, plan.tile_m)


# ---------------------------------------------------------------- the Metal kernel's schedules

@pytest.fixture(params=("forward", "reverse", "free"))
def lane_schedule(request):
    """The host runner's lane order (tests/test_metal_host.py): a missing barrier in moe_qmm
    shows under forward or reverse."""
    if not backends.get("metal_host").available:
        pytest.skip("metal_host: not built")
    torch.ops.argon_host.set_lane_schedule(request.param)
    yield request.param
    torch.ops.argon_host.set_lane_schedule("")


@pytest.mark.parametrize("name,tm", [("Q4_K", 32), ("IQ2_XS", 8), ("Q5_0", 64)])
def test_moe_qmm_metal_every_lane_schedule(lane_schedule, ref, name, tm):
    """Several reduction steps (n_in of 8 steps of 64), two column blocks (N = 72), segments of
    one and of several experts per 32-row block."""
    n_blocks = 512 // FORMATS[name].block_elems
    plan, xs, w_q, n_in = qmm_case(name, 30, 3, 5, tm, "neg_some", 72, n_blocks, torch.bfloat16,
                                   seed=tm)
    check_qmm(backends.get("metal_host"), ref, name, plan, xs, w_q, n_in, lane_schedule)
