"""The tile-decode GEMM of the gpuq family (csrc/gpuq/gpuq_tiled_kernel.h, argon::gpuq_tiled_qmm)
against the float64 reference on the weights as it rounds them (dequantize_reference rounded
once to the activations' dtype, as the dequant path rounds them): every GGUF format, bf16 and
fp16, SiLU / GELU / GELU-tanh epilogues, plan tiles of 64 and 128 rows, -1 ids and unused tiles,
experts with no rows, NaN-prefilled outputs, N and K not multiples of the block's tile. On the
CPU the kernel runs through the host emulation (torch_argon._C_test: every lane a fiber, ldmatrix
and mma.sync warp exchanges, cp.async a copy); on a CUDA device, the kernel itself."""
import pytest
import torch

from gpuq_cases import NAMES, REL_TOL, dims_for, problem, rel_err
from test_gpuq import DEVICES
from torch_argon import reference
from torch_argon.gpuq import ops as gpuq
from torch_argon.gpuq.tiled import TILE_M, tiled_qmm
from torch_argon.quant import FORMATS, dequantize_reference, random_quantized
from torch_argon.testing import backends  # noqa: F401  (loads torch_argon._C_test: the emulation)


def tiled_dims(name):
    """(H, I): one 256-value block for the K- and IQ-quants (the emulation runs every lane of
    256-thread blocks), dims_for's for the 32-value formats (K = 96 and 160: not multiples of
    the 64 values of two steps; N = 160 gate/up columns and 64 down columns: not multiples of
    the block's 64 / 128)."""
    return (256, 256) if FORMATS[name].block_elems == 256 else dims_for(name)


def _rounded_mm(a64, w_q, name, n_in, tile_expert, tm, dtype):
    """float64 a @ W_e^T per tile's expert, W the dequantized weights rounded to dtype (rows of
    unused tiles zero)."""
    out = torch.zeros(a64.shape[0], w_q.shape[1], dtype=torch.float64)
    row_expert = tile_expert.long().repeat_interleave(tm)
    for e in row_expert.unique().tolist():
        if e >= 0:
            w = dequantize_reference(w_q[e], name, n_in).to(dtype).double()
            out[row_expert == e] = a64[row_expert == e] @ w.T
    return out


def run_tiled_case(name, device, dtype, *, activation="silu", T=40, E=3, K=2, tm=64,
                   dist="neg_some", seed=0):
    """The gathered gate/up GEMM with its epilogue (meta, zero_unused) and the row-ordered down
    GEMM into a NaN-prefilled out, against the references; rows of unused tiles zero."""
    x, wgu, wd, ids, w = problem(name, T, E, K, dist, dtype, seed + 31 * NAMES.index(name),
                                 dims=tiled_dims(name))
    H, I = x.shape[1], wgu.shape[1] // 2
    plan = reference.moe_plan(ids, w, E, tm)
    R = plan.sorted_token.shape[0]
    xs = reference.moe_gather(x, plan.sorted_token).double()
    gu = _rounded_mm(xs, wgu, name, H, plan.tile_expert, tm, dtype)
    want_h = reference.ACTIVATIONS[activation](gu[:, :I]) * gu[:, I:]
    h_in = want_h.to(dtype)
    want_y = _rounded_mm(h_in.double(), wd, name, I, plan.tile_expert, tm, dtype)
    unused = (plan.tile_expert < 0).repeat_interleave(tm)
    d = torch.device(device)
    dev_plan = plan.to(d)
    tag = f"{name} {str(dtype)[6:]} {activation} tm={tm}"
    failures = []

    def check(what, got, want):
        got = got.cpu()
        if not torch.isfinite(got).all():
            failures.append(f"{tag} {what}: non-finite values (unwritten elements?)")
            return
        err = rel_err(got, want)
        if err > REL_TOL[dtype]:
            failures.append(f"{tag} {what}: rel err {err:.2e} > {REL_TOL[dtype]:.0e}")
        if not unused.any():
            failures.append(f"{tag}: the case has no unused tile (it must test one)")
        elif not (got[unused] == 0).all():
            failures.append(f"{tag} {what}: rows of unused tiles are not zero")

    h = torch.full((R, I), float("nan"), dtype=dtype, device=d)
    tiled_qmm(x.to(d), wgu.to(d), name, H, dev_plan.tile_expert, tm, meta=dev_plan.meta,
              row_token=dev_plan.sorted_token, swiglu=True, activation=activation, out=h)
    check("gate_up (gathered, NaN-prefilled out)", h, want_h)
    y = torch.full((R, wd.shape[1]), float("nan"), dtype=dtype, device=d)
    tiled_qmm(h_in.to(d), wd.to(d), name, I, dev_plan.tile_expert, tm, out=y)
    check("down (row-ordered, NaN-prefilled out)", y, want_y)
    return failures


def assert_ok(failures):
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", NAMES)
def test_every_format_bf16(device, name):
    assert_ok(run_tiled_case(name, device, torch.bfloat16))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["Q4_K", "Q8_0", "IQ4_XS", "IQ2_XS", "Q6_K", "MXFP4"])
def test_fp16_activations(device, name):
    assert_ok(run_tiled_case(name, device, torch.float16, tm=128, T=70))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh"])
def test_gelu_epilogues(device, activation):
    assert_ok(run_tiled_case("Q5_K", device, torch.bfloat16, activation=activation))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("tm,T", [(64, 90), (128, 150)])
def test_tile_sizes_and_experts_without_rows(device, tm, T):
    """Both tile sizes, and experts with no rows: "one_expert" sends every entry to one expert
    of 5, so the other four have none and the plan's trailing tiles are unused."""
    assert_ok(run_tiled_case("Q4_0", device, torch.bfloat16, tm=tm, T=T, E=5, K=2))
    assert_ok(run_tiled_case("Q3_K", device, torch.bfloat16, tm=tm, T=T // 2, E=5, K=1,
                             dist="one_expert"))


@pytest.mark.parametrize("device", DEVICES)
def test_no_tokens(device):
    """T = 0: a plan of no rows gives an empty output and launches nothing."""
    name = "Q4_K"
    x, wgu, _, _, _ = problem(name, 1, 2, 1, "uniform", torch.bfloat16, 5, dims=tiled_dims(name))
    ids = torch.empty(0, 2, dtype=torch.long)
    plan = reference.moe_plan(ids, torch.empty(0, 2), 2, 64).to(device)
    d = torch.device(device)
    got = tiled_qmm(x[:0].to(d), wgu.to(d), name, x.shape[1], plan.tile_expert, 64,
                    meta=plan.meta, row_token=plan.sorted_token, swiglu=True)
    assert got.shape == (0, wgu.shape[1] // 2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("swiglu", [False, True])
def test_no_inputs_gives_zeros(device, swiglu):
    """n_in = 0 (a [R, 0] x, weights of no blocks): the product is zero, as gpuq's own GEMM
    gives, and nothing is read (the kernel's first loads would be past the empty stacks)."""
    name, E, N, T = "Q8_0", 2, 64, 10
    d = torch.device(device)
    ids = torch.randint(0, E, (T, 1), generator=torch.Generator().manual_seed(3))
    plan = reference.moe_plan(ids, torch.ones(T, 1), E, 64).to(d)
    w = torch.empty(E, 2 * N if swiglu else N, 0, dtype=torch.uint8, device=d)
    x = torch.empty(T, 0, dtype=torch.bfloat16, device=d)
    rows = plan.tile_expert.numel() * 64
    out = torch.full((rows, N), float("nan"), dtype=torch.bfloat16, device=d)
    tiled_qmm(x, w, name, 0, plan.tile_expert, 64, meta=plan.meta, row_token=plan.sorted_token,
              swiglu=swiglu, out=out)
    assert torch.equal(out.cpu(), torch.zeros(rows, N, dtype=torch.bfloat16))


@pytest.mark.parametrize("device", DEVICES)
def test_unused_tiles_left_alone(device):
    """zero_unused=False leaves the rows of unused tiles (expert -1, or past meta's n_tiles) as
    they were."""
    name, dtype = "Q4_K", torch.bfloat16
    x, wgu, _, _, _ = problem(name, 8, 2, 1, "uniform", dtype, 5, dims=tiled_dims(name))
    d = torch.device(device)
    tile_expert = torch.tensor([-1, 1, 0], dtype=torch.int32, device=d)
    meta = torch.tensor([64, 1, 0, 0], dtype=torch.int32, device=d)  # n_tiles = 1
    row_token = torch.zeros(3 * 64, dtype=torch.int32, device=d)
    out = torch.full((3 * 64, wgu.shape[1] // 2), 7.0, dtype=dtype, device=d)
    tiled_qmm(x.to(d), wgu.to(d), name, x.shape[1], tile_expert, 64, meta=meta,
              row_token=row_token, swiglu=True, zero_unused=False, out=out)
    assert (out.cpu() == 7.0).all()


@pytest.mark.parametrize("device", DEVICES)
def test_agrees_with_the_dequant_path(device):
    """The same numbers as decoding the experts (gpuq_dequantize) and multiplying densely: the
    kernel's weights are those bits, so only the fp32 summation order differs."""
    name, dtype, tm = "IQ4_XS", torch.bfloat16, 64
    x, wgu, _, ids, w = problem(name, 30, 2, 2, "uniform", dtype, 7, dims=tiled_dims(name))
    plan = reference.moe_plan(ids, w, 2, tm)
    d = torch.device(device)
    got = tiled_qmm(x.to(d), wgu.to(d), name, x.shape[1], plan.tile_expert.to(d), tm,
                    meta=plan.meta.to(d), row_token=plan.sorted_token.to(d)).cpu().float()
    decoded = gpuq.dequantize(wgu.to(d), name, x.shape[1], dtype).cpu().float()
    xs = reference.moe_gather(x, plan.sorted_token).float()
    row_expert = plan.tile_expert.long().repeat_interleave(tm)
    want = torch.zeros_like(got)
    for e in (0, 1):
        want[row_expert == e] = xs[row_expert == e] @ decoded[e].T
    assert rel_err(got, want) < REL_TOL[dtype]


@pytest.mark.parametrize("device", DEVICES)
def test_errors_name_the_argument(device):
    x = torch.randn(64, 256).to(torch.bfloat16).to(device)
    w = torch.zeros(2, 8, 144, dtype=torch.uint8, device=device)
    te = torch.zeros(1, dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match="tile_m must be 64 or 128"):
        tiled_qmm(x[:32], w, "Q4_K", 256, te, 32)
    with pytest.raises(ValueError, match="tile_m must be a power of two"):
        tiled_qmm(x, w, "Q4_K", 256, te, 48)
    with pytest.raises(ValueError, match="a must be bfloat16 or float16"):
        tiled_qmm(x.float(), w, "Q4_K", 256, te, 64)
    with pytest.raises(ValueError, match="w_q has 100 bytes per row"):
        tiled_qmm(x, w[..., :100], "Q4_K", 256, te, 64)
    with pytest.raises(ValueError, match="activation must be"):
        tiled_qmm(x, w, "Q4_K", 256, te, 64, swiglu=True, activation="relu")
    with pytest.raises(ValueError, match="out must have shape"):
        tiled_qmm(x, w, "Q4_K", 256, te, 64, out=torch.empty(64, 9, dtype=x.dtype, device=device))


@pytest.mark.parametrize("offset", [1, 4])
def test_activations_off_the_16_byte_grid(offset):
    """Rows 2 or 8 bytes off the 16 bytes of the kernel's cp.async copies: read through an
    aligned copy, bit for bit the result on a contiguous x (the emulation fails a misaligned
    copy as the GPU would)."""
    name = "Q8_0"
    H = tiled_dims(name)[0]
    g = torch.Generator().manual_seed(offset)
    base = torch.randn(20, H + 8, generator=g).to(torch.bfloat16)
    w = random_quantized(name, 48, H, leading=(2,), std=0.05, generator=g)
    ids = torch.randint(0, 2, (20, 1), generator=g)
    plan = reference.moe_plan(ids, torch.ones(20, 1), 2, 64)
    args = (w, name, H, plan.tile_expert, 64)
    kw = dict(meta=plan.meta, row_token=plan.sorted_token)
    got = tiled_qmm(base[:, offset:offset + H], *args, **kw)
    assert torch.equal(got, tiled_qmm(base[:, offset:offset + H].contiguous(), *args, **kw))


def _small_problem(tm=64):
    name = "Q4_K"
    x, wgu, _, ids, w = problem(name, 6, 2, 1, "uniform", torch.bfloat16, 9,
                                dims=tiled_dims(name))
    plan = reference.moe_plan(ids, w, 2, tm)
    return x.contiguous(), wgu, plan, FORMATS[name].type_id


def test_opcheck_tiled_qmm():
    x, wgu, plan, qtype = _small_problem()
    args = (x, wgu, qtype, x.shape[1], plan.tile_expert, 64, plan.meta, plan.sorted_token, True,
            "silu", True)
    torch.library.opcheck(torch.ops.argon.gpuq_tiled_qmm.default, args)
    out = torch.full((plan.tile_expert.shape[0] * 64, wgu.shape[1] // 2), float("nan"),
                     dtype=x.dtype)
    torch.library.opcheck(torch.ops.argon.gpuq_tiled_qmm_out.default, (*args, out))


def test_compile_fullgraph_matches_eager():
    x, wgu, plan, qtype = _small_problem()

    def gate_up(x):
        return tiled_qmm(x, wgu, qtype, x.shape[1], plan.tile_expert, 64, meta=plan.meta,
                         row_token=plan.sorted_token, swiglu=True)

    got = torch.compile(gate_up, fullgraph=True, backend="aot_eager")(x)
    assert torch.equal(got, gate_up(x))


# ---- the emulation's shared-memory primitives against their documented layouts ----------------

@pytest.fixture(scope="module")
def smem_probe(tmp_path_factory):
    """tests/native/gpuq_smem_probe.cpp built with the gpuq fiber runtime (g++)."""
    import os
    import shutil
    import subprocess
    gxx = shutil.which(os.environ.get("CXX", "g++"))
    if gxx is None:
        pytest.skip("needs g++ to build the probe of the emulation's primitives")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    csrc = os.path.join(root, "torch_argon", "csrc")
    exe = str(tmp_path_factory.mktemp("smem_probe") / "probe")
    built = subprocess.run(
        [gxx, "-std=c++17", "-O1", "-I", csrc,
         os.path.join(root, "tests", "native", "gpuq_smem_probe.cpp"),
         os.path.join(csrc, "gpuq", "gpuq_host_runtime.cpp"), "-o", exe],
        capture_output=True, text=True)
    assert built.returncode == 0, built.stderr

    def run(*args):
        return subprocess.run([exe, *map(str, args)], capture_output=True, text=True,
                              check=True).stdout
    return run


@pytest.mark.cpu_only
@pytest.mark.parametrize("perm", ["identity", "shuffled"])
def test_ldmatrix_x4_layout(smem_probe, perm):
    """ldmatrix.x4 (PTX ISA): lanes 8i .. 8i + 7 give the rows of matrix i; register i of lane l
    holds matrix i's row l / 4, values 2 (l % 4) and + 1. The tile's value at (row r, column
    c) is 8 r + c, and lane l points at tile row rows[l]."""
    g = torch.Generator().manual_seed(0)
    rows = list(range(32)) if perm == "identity" else torch.randperm(32, generator=g).tolist()
    got = [list(map(int, line.split())) for line in smem_probe("ldmatrix", *rows).splitlines()]
    want = [[8 * rows[8 * i + lane // 4] + 2 * (lane % 4) + h for i in range(4) for h in (0, 1)]
            for lane in range(32)]
    assert got == want


@pytest.mark.cpu_only
def test_ldmatrix_misaligned_row_fails_as_on_a_gpu(smem_probe):
    assert "misaligned 16-byte load" in smem_probe("misaligned")


@pytest.mark.cpu_only
def test_cp_async_copies_or_zero_fills(smem_probe):
    """cp.async 16 bytes (src-size 16 or 0): lane l's chunk l of the global array, or 16 zero
    bytes (odd lanes), in shared memory once the wait and the barrier are past."""
    got = list(map(int, smem_probe("cp_async").split()))
    want = [(i * 7 + 1) % 256 if (i // 16) % 2 == 0 else 0 for i in range(32 * 16)]
    assert got == want
