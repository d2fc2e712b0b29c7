"""The gpuq kernels (torch_argon/gpuq, csrc/gpuq) through their argon ops: every GGUF format,
both activation modes, SiLU / GELU / GELU-tanh epilogues, -1 ids and unused tiles, NaN-prefilled
outputs, tile sizes from 1 to 64 rows, against the float64 references (tests/gpuq_cases.py); the
decode bit for bit against dequantize_reference rounded to bf16 / fp16. On the CPU the kernels
run through the host emulation (each lane a fiber, each mma.sync a warp exchange computed from
the PTX fragment layouts), built into torch_argon._C_test, so CI checks their logic without a
GPU; on a CUDA device, the kernels themselves. The GEMM cases run every K loop (gpuq_kernel.h:
the plain one, the pipelined one and smem_act, chosen by ARGON_GPUQ_LOOP; on CUDA the last two
need a lab build, GPUQ_LAB_LOOPS=1)."""
import pytest
import torch

from gpuq_cases import NAMES, rel_err, run_gemm_case, run_loops_case, run_unused_kept_case
from torch_argon.gpuq import ops as gpuq
from torch_argon.quant import FORMATS, dequantize_reference, random_quantized
from torch_argon.quant.activation_q8 import quantize_rows_q8
from torch_argon.testing import backends  # noqa: F401  (loads torch_argon._C_test: the emulation)


def _device(name):
    why = gpuq.refusal(name) if name == "cpu" or torch.cuda.is_available() else "no CUDA device"
    return pytest.param(name, marks=pytest.mark.skipif(bool(why), reason=why or ""))


DEVICES = [_device("cpu"), _device("cuda")]


def assert_ok(failures):
    assert not failures, "\n".join(failures)


LOOPS = ["plain", "pipelined", "smem_act"]


@pytest.fixture(params=LOOPS)
def loop(request, monkeypatch):
    """The K loop the gpuq GEMMs run in this test (ARGON_GPUQ_LOOP, read at each call)."""
    monkeypatch.setenv("ARGON_GPUQ_LOOP", request.param)
    return request.param


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("activation_quant", ["none", "q8"])
def test_every_format_bf16(device, name, activation_quant, loop):
    assert_ok(run_gemm_case(name, device, torch.bfloat16, activation_quant=activation_quant))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", NAMES)
def test_every_format_scaled_path(device, name, loop):
    """32-row tiles in bf16: the scaled path (weights rounded to bf16, no group epilogue)."""
    assert_ok(run_gemm_case(name, device, torch.bfloat16, tm=32, T=40, E=2))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["Q4_K", "Q8_0", "IQ4_XS", "IQ2_XS", "Q6_K", "MXFP4"])
def test_fp16_activations(device, name, loop):
    assert_ok(run_gemm_case(name, device, torch.float16, tm=16, T=20))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh"])
@pytest.mark.parametrize("name,activation_quant", [("Q4_K", "none"), ("IQ4_XS", "q8"),
                                                   ("Q6_K", "none")])
def test_gelu_epilogues(device, activation, name, activation_quant, loop):
    assert_ok(run_gemm_case(name, device, torch.bfloat16, activation=activation,
                            activation_quant=activation_quant))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("tm,T", [(1, 5), (4, 9), (16, 24), (32, 40), (64, 70)])
@pytest.mark.parametrize("activation_quant", ["none", "q8"])
def test_tile_sizes(device, tm, T, activation_quant, loop):
    assert_ok(run_gemm_case("Q4_K", device, torch.bfloat16, tm=tm, T=T, E=2,
                            activation_quant=activation_quant, dist="uniform"))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dist", ["neg_all", "one_expert", "zipf"])
def test_adversarial_routing(device, dist, loop):
    assert_ok(run_gemm_case("Q5_K", device, torch.bfloat16, T=16, E=4, K=3, dist=dist))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("tm", [8, 32])
def test_unused_tiles_left_alone(device, loop, tm):
    assert_ok(run_unused_kept_case(device, tm=tm))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", NAMES)
def test_pipelined_loop_is_the_plain_loop_bit_for_bit(device, name):
    """The pipelined K loop's tail: rows of 1 block and of odd block counts (the 32-value
    formats' iterations cover 2 blocks; the loads past the row's end re-read its last block),
    gate/up and down forms, both activation modes, bf16 exact and 32-row scaled tiles and fp16:
    the same products in the same order as the plain loop, so the same bits, and within the
    reference's tolerance (a NaN-prefilled out, -1 ids)."""
    failures = []
    for blocks in ((1, 3), (5, 7)):
        for dtype, activation_quant, tm in ((torch.bfloat16, "none", 8), (torch.float16, "none", 16),
                                            (torch.bfloat16, "q8", 8),
                                            (torch.bfloat16, "none", 32)):
            failures += run_loops_case(name, device, dtype, blocks, activation_quant, tm)
    assert_ok(failures)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", NAMES)
def test_smem_act_loop_is_the_plain_loop_bit_for_bit(device, name):
    """The smem_act K loop (the block's activations staged in shared memory, 256 values a
    stage, double buffered) on 16- and 32-token tiles (NT = 2, 4; tile_m 64: two row groups a
    tile), gate/up (gathered through sorted_token, -1 ids, partial tiles) and down forms: bf16
    (the scaled path at 16 and 32 rows), fp16 (the exact path) and q8 at both widths: bit for
    bit the plain loop, and within the reference's tolerance. Rows of one stage, of several with a short last one (the 32-value
    formats: 3, 9 and 19 blocks of 8 per stage), and of one block."""
    be = FORMATS[name].block_elems
    shapes = ((3, 19), (9, 1)) if be == 32 else ((1, 3), (2, 5))
    failures = []
    for blocks in shapes:
        for dtype, activation_quant, tm in ((torch.bfloat16, "none", 16),
                                            (torch.bfloat16, "none", 32),
                                            (torch.float16, "none", 16),
                                            (torch.float16, "none", 64),
                                            (torch.bfloat16, "q8", 16),
                                            (torch.bfloat16, "q8", 32)):
            failures += run_loops_case(name, device, dtype, blocks, activation_quant, tm,
                                       loop="smem_act")
    assert_ok(failures)


def test_loop_knob_errors(monkeypatch):
    """A K loop that is neither: a ValueError naming the variable, before anything is written."""
    x, wgu, _, plan, qtype = _small_problem()
    out = torch.full((plan.tile_expert.shape[0] * 8, wgu.shape[1] // 2), 7.0, dtype=x.dtype)
    monkeypatch.setenv("ARGON_GPUQ_LOOP", "unrolled")
    with pytest.raises(ValueError, match='ARGON_GPUQ_LOOP must be "plain", "pipelined" or '
                       '"smem_act"'):
        gpuq.qmm(x, wgu, qtype, x.shape[1], plan.tile_expert, 8, meta=plan.meta,
                 row_token=plan.sorted_token, swiglu=True, out=out)
    assert (out == 7.0).all()


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


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("pad,offset", [(2, 2), (3, 1)])
def test_activations_off_the_8_byte_grid(device, pad, offset):
    """bf16 x rows 4 bytes off the 8 bytes the kernels' 64-bit activation loads need (row stride
    a multiple of 4, not 8), or 2 bytes off (stride odd in words): read through an aligned copy,
    bit for bit what the kernel gives on a contiguous x (the emulation fails a misaligned load
    as the GPU would)."""
    from torch_argon import reference
    from gpuq_cases import dims_for
    H = dims_for("Q4_K")[0]
    g = torch.Generator().manual_seed(offset)
    base = torch.randn(9, H + pad, generator=g).to(torch.bfloat16)
    x = base[:, offset:offset + H]
    w = random_quantized("Q4_K", 48, H, leading=(2,), std=0.05, generator=g)
    ids = torch.tensor([[0], [1], [1], [0], [1], [0], [0], [1], [1]])
    plan = reference.moe_plan(ids, torch.ones(9, 1), 2, 8)
    d = torch.device(device)
    args = (w.to(d), "Q4_K", H, plan.tile_expert.to(d), 8)
    kw = dict(meta=plan.meta.to(d), row_token=plan.sorted_token.to(d))
    got = gpuq.qmm(base.to(d)[:, offset:offset + H], *args, **kw).cpu()
    assert torch.equal(got, gpuq.qmm(x.contiguous().to(d), *args, **kw).cpu())
    want = reference.moe_qmm(reference.moe_gather(x, plan.sorted_token), w, "Q4_K", H,
                             plan.tile_expert, 8)
    assert rel_err(got, want) < 4e-3


def _decode_case(name, device, dtype, pad, raw_bytes, E=3, N=5):
    """The decode of E experts' N rows into the second half of a NaN-filled buffer whose rows
    are n_in + pad long (pad 8: 16-byte aligned rows, vector stores; 1: scalar stores)."""
    fmt = FORMATS[name]
    n_in = 2 * fmt.block_elems
    g = torch.Generator().manual_seed(NAMES.index(name) + 100 * pad)
    if raw_bytes:  # any bits: NaN / inf scales, subnormals, every code
        w = torch.randint(0, 256, (E, N, n_in // fmt.block_elems * fmt.block_bytes),
                          dtype=torch.uint8, generator=g)
    else:
        w = random_quantized(name, N, n_in, leading=(E,), std=0.05, generator=g)
    want = dequantize_reference(w, name, n_in).to(dtype)
    buf = torch.full((E, 2 * N, n_in + pad), float("nan"), dtype=dtype)
    buf_dev = buf.to(device)
    gpuq.dequantize(w.to(device), name, n_in, out=buf_dev[:, N:, :n_in])
    got = buf_dev.cpu()
    failures = []
    if not torch.equal(got[:, :N].isnan(), buf[:, :N].isnan()) or not got[..., n_in:].isnan().all():
        failures.append("wrote outside out")
    got = got[:, N:, :n_in]
    nan = want.isnan()
    if not torch.equal(got.isnan(), nan):
        failures.append(f"NaNs at other places ({int(got.isnan().sum())} vs {int(nan.sum())})")
    bits = lambda t: t.view(torch.int16)[~nan]  # noqa: E731
    if not torch.equal(bits(got), bits(want)):
        bad = (bits(got) != bits(want)).nonzero()
        failures.append(f"{bad.numel()} values differ, first at {bad[0].tolist()}")
    return failures


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_decode_bit_exact(device, name, dtype):
    """Every format's decode into a strided out, vector and scalar stores, realistic and raw
    random bytes: dequantize_reference rounded to dtype, bit for bit (NaNs as NaNs)."""
    failures = [f"pad={pad} raw={raw}: {f}" for pad in (8, 1) for raw in (False, True)
                for f in _decode_case(name, device, dtype, pad, raw)]
    assert_ok(failures)


@pytest.mark.parametrize("device", DEVICES)
def test_decode_functional_form(device):
    w = random_quantized("Q4_K", 4, 256, leading=(2,), generator=torch.Generator().manual_seed(2))
    got = gpuq.dequantize(w.to(device), "Q4_K", 256, torch.float16)
    assert got.dtype == torch.float16 and got.shape == (2, 4, 256)
    assert torch.equal(got.cpu(), dequantize_reference(w, "Q4_K", 256).half())


@pytest.mark.parametrize("device", DEVICES)
def test_q8_with_float32_activations(device):
    """activation_quant="q8" takes float32 activations (quantized inside) and writes float32."""
    from gpuq_cases import _exact_mm, problem
    from torch_argon import reference
    from torch_argon.quant.activation_q8 import q8_activations
    x, wgu, _, ids, w = problem("Q8_0", 9, 2, 1, "uniform", torch.float32, 3)
    x = x.contiguous()
    plan = reference.moe_plan(ids, w, 2, 8)
    xs = reference.moe_gather(x, plan.sorted_token)
    d = torch.device(device)
    got = gpuq.qmm(xs.to(d), wgu.to(d), "Q8_0", x.shape[1], plan.tile_expert.to(d), 8,
                   activation_quant="q8")
    assert got.dtype == torch.float32
    want = _exact_mm(q8_activations(xs), wgu, "Q8_0", x.shape[1], plan.tile_expert, 8)
    assert rel_err(got.cpu(), want) < 1e-5


@pytest.mark.parametrize("device", DEVICES)
def test_errors_name_the_argument(device):
    x = torch.randn(8, 256).to(torch.bfloat16).to(device)
    w = torch.zeros(2, 8, 144, dtype=torch.uint8, device=device)
    te = torch.zeros(2, dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match="w_q has 100 bytes per row"):
        gpuq.qmm(x, w[..., :100], "Q4_K", 256, te, 4)
    with pytest.raises(ValueError, match="tile_m must be a power of two"):
        gpuq.qmm(x, w, "Q4_K", 256, te, 3)
    with pytest.raises(ValueError, match="activation_quant"):
        gpuq.qmm(x, w, "Q4_K", 256, te, 4, activation_quant="q4")
    with pytest.raises(ValueError, match="activation must be"):
        gpuq.qmm(x, w, "Q4_K", 256, te, 4, swiglu=True, activation="relu")
    with pytest.raises(ValueError, match="a must be bfloat16 or float16"):
        gpuq.qmm(x.float(), w, "Q4_K", 256, te, 4)
    with pytest.raises(ValueError, match="plain float type"):
        gpuq.qmm(x, w, "F16", 256, te, 4)
    with pytest.raises(ValueError, match="tile_expert must be a 1-D int32"):
        gpuq.qmm(x, w, "Q4_K", 256, te.long(), 4)
    with pytest.raises(ValueError, match="a must have tile_expert.size"):
        gpuq.qmm(x, w, "Q4_K", 256, te, 8)
    with pytest.raises(ValueError, match="row_token must have"):
        gpuq.qmm(x, w, "Q4_K", 256, te, 4, row_token=te)
    with pytest.raises(ValueError, match="out must have shape"):
        gpuq.qmm(x, w, "Q4_K", 256, te, 4, out=torch.empty(8, 9, dtype=x.dtype, device=device))
    shared = torch.zeros(8 * 256 + 64, dtype=x.dtype, device=device)
    with pytest.raises(ValueError, match="output out overlaps the input a"):
        gpuq.qmm(shared[:2048].view(8, 256), w, "Q4_K", 256, te, 4,
                 out=shared[2040:2104].view(8, 8))
    with pytest.raises(ValueError, match="out must be bfloat16 or float16"):
        gpuq.dequantize(w, "Q4_K", 256, out=torch.empty(2, 8, 256, device=device))
    with pytest.raises(ValueError, match=r"out must have shape \[2, 8, 256\]"):
        gpuq.dequantize(w, "Q4_K", 256, out=torch.empty(2, 8, 255, dtype=torch.bfloat16,
                                                          device=device))
    with pytest.raises(ValueError, match="x must be 2-D"):
        gpuq.quantize_q8(x[:, :30])


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
    args = (x, wgu, qtype, x.shape[1], plan.tile_expert, 8, plan.meta, plan.sorted_token, True,
            "silu", activation_quant, True)
    torch.library.opcheck(torch.ops.argon.gpuq_qmm.default, args)
    out = torch.full((plan.tile_expert.shape[0] * 8, wgu.shape[1] // 2), float("nan"),
                     dtype=x.dtype)
    torch.library.opcheck(torch.ops.argon.gpuq_qmm_out.default, (*args, out))


def test_opcheck_quantize_q8():
    torch.library.opcheck(torch.ops.argon.gpuq_quantize_q8.default,
                          (torch.randn(5, 64).to(torch.bfloat16),))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_opcheck_dequantize(dtype):
    w = random_quantized("Q6_K", 6, 256, leading=(2,), generator=torch.Generator().manual_seed(1))
    qtype = FORMATS["Q6_K"].type_id
    torch.library.opcheck(torch.ops.argon.gpuq_dequantize.default, (w, qtype, 256, dtype))
    out = torch.empty(2, 6, 256, dtype=dtype)
    torch.library.opcheck(torch.ops.argon.gpuq_dequantize_out.default, (w, qtype, 256, out))


def test_compile_fullgraph_matches_eager():
    x, wgu, wd, plan, qtype = _small_problem()
    H, I = x.shape[1], wgu.shape[1] // 2

    def experts(x):
        h = gpuq.qmm(x, wgu, qtype, H, plan.tile_expert, 8, meta=plan.meta,
                     row_token=plan.sorted_token, swiglu=True)
        return gpuq.qmm(h, wd, qtype, I, plan.tile_expert, 8, meta=plan.meta)

    got = torch.compile(experts, fullgraph=True, backend="aot_eager")(x)
    assert torch.equal(got, experts(x))


def _moe_qmm_out_case(run, device, name, dtype, activation_quant, tm, T=11):
    """`run`(xs, w_q, type id, n_in, tile_expert, tile_m, activation_quant, out) on row-ordered
    xs of a plan over -1 ids, into a NaN-prefilled out: unused tiles' rows zero, the rest
    against reference.moe_qmm in the mode asked for."""
    from torch_argon import reference
    from gpuq_cases import dims_for, problem
    x, _, wd, ids, w = problem(name, T, 3, 2, "neg_some", dtype, 6)
    I = dims_for(name)[1]
    plan = reference.moe_plan(ids, w, 3, tm)
    g = torch.Generator().manual_seed(tm)
    xs = (torch.randn(plan.sorted_token.shape[0], I, generator=g) * 0.5).to(dtype)
    want = reference.moe_qmm(xs, wd, name, I, plan.tile_expert, tm,
                             activation_quant=activation_quant)
    d = torch.device(device)
    out = torch.full(want.shape, float("nan"), dtype=dtype, device=d)
    ran = run(xs.to(d), wd.to(d), FORMATS[name].type_id, I, plan.tile_expert.to(d), tm,
              activation_quant, out)
    unused = (plan.tile_expert < 0).repeat_interleave(tm)
    assert (out.cpu()[unused] == 0).all()
    tol = {torch.float32: 1e-5, torch.float16: 6e-4, torch.bfloat16: 4e-3}[dtype]
    if dtype == torch.bfloat16 and activation_quant == "none" and tm > 8:
        tol = 1.5e-2  # the scaled path
    if T:
        assert rel_err(out.cpu(), want) < tol
    return ran


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,dtype,activation_quant,tm", [
    ("Q4_K", torch.bfloat16, "none", 16), ("IQ4_XS", torch.float16, "none", 1),
    ("Q6_K", torch.bfloat16, "q8", 4), ("Q8_0", torch.float32, "q8", 64),
    ("IQ3_S", torch.float16, "q8", 8)])
def test_moe_qmm_out_hook(device, name, dtype, activation_quant, tm):
    """gpuq.moe_qmm_out, the op table's moe_qmm_out on the gpuq kernels: any tile_m, both
    activation modes, fp32 xs with q8."""
    assert _moe_qmm_out_case(gpuq.moe_qmm_out, device, name, dtype, activation_quant, tm)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("activation_quant", ["none", "q8"])
def test_moe_qmm_out_cuda_kernel_runs_gpuq(device, name, activation_quant):
    """moe_qmm_out's CUDA kernel (triton_ops/quant_ops.py) serves both modes on the gpuq
    kernels for every format (here through the host emulation; the Triton kernel, which has no
    q8, would have raised for q8); bf16 and fp16 xs, 8 and 16 rows a tile."""
    from torch_argon.triton_ops import quant_ops
    i = NAMES.index(name)
    dtype = (torch.bfloat16, torch.float16)[i % 2]
    _moe_qmm_out_case(quant_ops.moe_qmm_out_cuda, device, name, dtype, activation_quant,
                      (8, 16)[i // 2 % 2])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation_quant", ["none", "q8"])
def test_moe_qmm_out_cuda_kernel_without_tokens(device, activation_quant):
    """T = 0: a plan of unused tiles only; out all zeros, nothing read."""
    from torch_argon.triton_ops import quant_ops
    _moe_qmm_out_case(quant_ops.moe_qmm_out_cuda, device, "Q4_K", torch.bfloat16,
                      activation_quant, 8, T=0)


def test_moe_qmm_out_cuda_kernel_falls_back_to_triton(monkeypatch):
    """Where gpuq declines (fp32 xs without q8; a build or GPU without the gpuq kernels) the
    CUDA kernel launches the Triton GEMM, which runs "none" only: q8 there raises the shared
    ValueError of a backend without q8 kernels before anything is written."""
    from torch_argon.triton_ops import quant_ops
    launched = []
    monkeypatch.setattr(quant_ops, "launch_moe_qmm",
                        lambda xs, *args, **kwargs: launched.append(xs.dtype))
    xs = torch.randn(8, 64)
    w = torch.zeros(2, 4, 68, dtype=torch.uint8)
    te = torch.zeros(1, dtype=torch.int32)
    out = torch.full((8, 4), float("nan"))
    quant_ops.moe_qmm_out_cuda(xs, w, FORMATS["Q8_0"].type_id, 64, te, 8, "none", out)
    assert launched == [torch.float32]
    monkeypatch.setattr(gpuq, "refusal", lambda device: "no gpuq kernels here")
    half = xs.to(torch.bfloat16)
    quant_ops.moe_qmm_out_cuda(half, w, FORMATS["Q8_0"].type_id, 64, te, 8, "none",
                               out.to(torch.bfloat16))
    assert launched == [torch.float32, torch.bfloat16]
    with pytest.raises(ValueError, match='activation_quant="q8" has no kernels on CUDA'):
        quant_ops.moe_qmm_out_cuda(xs, w, FORMATS["Q8_0"].type_id, 64, te, 8, "q8", out)
    assert len(launched) == 2 and out.isnan().all()


def test_moe_qmm_out_hook_leaves_float32_without_q8_to_the_caller():
    xs = torch.zeros(8, 64)
    w = torch.zeros(2, 4, 68, dtype=torch.uint8)
    out = torch.full((8, 4), 7.0)
    assert not gpuq.moe_qmm_out(xs, w, "Q8_0", 64, torch.zeros(1, dtype=torch.int32), 8,
                                "none", out)
    assert (out == 7.0).all()
