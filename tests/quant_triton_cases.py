"""Cases for the quantized Triton kernels (torch_argon/triton_ops: quant_blocks, the dequantize
kernel, the quantized grouped GEMM and experts path), shared by the CUDA tests and the Triton-
interpreter run on the CPU (tests/quant_triton_interpreter_run.py). Each case returns a list of
failure messages (empty = pass), checked against torch_argon.quant.dequantize_reference and the
fp32 / float64 references of torch_argon.reference."""
import torch

from routing_cases import make_ids, make_weights
from torch_argon import reference
from torch_argon.experts import run_implementation
from torch_argon.quant import (FORMATS, QuantizedExperts, QuantizedWeight, dequantize_reference,
                               force_finite_scales, qformat, random_quantized)
from torch_argon.triton_ops import quant_ops
from triton_cases import poison_allocator, rel_err

NAMES = list(FORMATS)
# Relative Frobenius error of the GEMMs against the fp32 reference GEMM on the dequantized
# weights: the dense path's tolerances (tests/triton_cases.py), since the kernel's one extra
# rounding (each dequantized weight to the activations' dtype) is the rounding a dense stack of
# that dtype already has.
QREL_TOL = {torch.float16: 2e-3, torch.bfloat16: 1.5e-2, torch.float32: 1e-5}


# The experts path takes torch_argon.quant's weights objects (the short names for the cases).
QW, QE = QuantizedWeight, QuantizedExperts


def dims_for(name):
    """(H, I) for small cases of a format: one 256-value block for the K- and IQ-quants, two
    32-value blocks for the others, and widths that are no multiple of 32 for the float types
    (the masked K tail)."""
    block = FORMATS[name].block_elems
    return {256: (256, 256), 32: (64, 64), 1: (80, 48)}[block]


# ---- dequantize --------------------------------------------------------------------------------

def same_bits_nan_as_nan(got, want):
    """Bits equal everywhere, except that NaN matches NaN (GPUs return a canonical NaN)."""
    got, want = got.cpu(), want.cpu()
    if got.shape != want.shape:
        return False
    same = got.view(torch.int32) == want.view(torch.int32)
    return bool((same | (torch.isnan(got) & torch.isnan(want))).all())


def run_dequant_case(name, device, finite=True):
    """dequantize_triton, the dequantize_out kernel (block formats: the op refuses the plain
    float ones; NaN-prefilled out, plain and strided w_q) and the launch into strided out rows,
    against the reference, on random blocks (scale fields forced finite unless `finite` is
    False: then inf / NaN scales, which must give NaN / inf where the reference does)."""
    fmt = FORMATS[name]
    n_in = {256: 512, 32: 96, 1: 80}[fmt.block_elems]
    rb = n_in // fmt.block_elems * fmt.block_bytes
    g = torch.Generator().manual_seed(100 + NAMES.index(name))
    w = torch.randint(0, 256, (2, 3, rb), dtype=torch.uint8, generator=g)
    if finite:
        w = force_finite_scales(w, name)
    want = dequantize_reference(w, name, n_in)
    failures = []
    wd = w.to(device)
    if not same_bits_nan_as_nan(quant_ops.dequantize_triton(wd, name, n_in), want):
        failures.append(f"{name} dequantize: not bit-exact")
    if not fmt.is_float:
        out = torch.full(want.shape, float("nan"), device=device)
        quant_ops.dequantize_out_cuda(wd, fmt.type_id, n_in, out)
        if not same_bits_nan_as_nan(out, want):
            failures.append(f"{name} dequantize_out: not bit-exact (NaN-prefilled out)")
        out = torch.full(want[:, ::2].shape, float("nan"), device=device)
        quant_ops.dequantize_out_cuda(wd[:, ::2], fmt.type_id, n_in, out)
        if not same_bits_nan_as_nan(out, want[:, ::2]):
            failures.append(f"{name} dequantize_out: strided w_q not bit-exact")
    wide = torch.full((6, n_in + 5), float("nan"), device=device)
    quant_ops.launch_dequantize(wd.reshape(6, rb), fmt, n_in, wide[:, 2:2 + n_in],
                                quant_ops.device_tables(device))
    if not same_bits_nan_as_nan(wide[:, 2:2 + n_in], want.reshape(6, n_in)):
        failures.append(f"{name} launch_dequantize: strided out rows not bit-exact")
    if not torch.isnan(wide[:, :2]).all() or not torch.isnan(wide[:, 2 + n_in:]).all():
        failures.append(f"{name} launch_dequantize: wrote outside the strided out rows")
    return failures


# ---- the grouped GEMMs and the experts path -----------------------------------------------------

def _problem(name, T, E, K, tm, dist, dtype, seed, down_name=None):
    H, I = dims_for(name)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H + 8, generator=g).to(dtype)[:, 3:3 + H]  # rows strided, not dense
    wgu = random_quantized(name, 2 * I, H, leading=(E,), std=0.05, generator=g)
    wd = random_quantized(down_name or name, H, I, leading=(E,), std=0.05, generator=g)
    ids, w = make_ids(T, K, E, dist, seed=seed), make_weights(T, K, seed=seed)
    return H, I, x, wgu, wd, ids, w


def run_qmm_case(name, device, dtype, *, T=8, E=3, K=2, tm=16, dist="neg_some", full=False,
                 experts=False):
    """The fused gather + gate/up + SwiGLU GEMM (zero_unused) and the row-ordered down GEMM of
    `name` against fp32 references on the dequantized weights. full: also the gathered GEMM
    without SwiGLU and the moe_qmm_out kernel (no meta, NaN-prefilled out). experts: also the
    experts path against the float64 layer reference."""
    seed = 7 * NAMES.index(name) + T + tm
    H, I, x, wgu, wd, ids, w = _problem(name, T, E, K, tm, dist, dtype, seed)
    plan = reference.moe_plan(ids, w, E, tm)
    xs = reference.moe_gather(x, plan.sorted_token)
    dgu = dequantize_reference(wgu, name, H)
    dd = dequantize_reference(wd, name, I)
    want_gu = reference.moe_mm(xs.float(), dgu, plan.tile_expert, tm)
    want_h = reference.swiglu(want_gu)
    h_in = want_h.to(dtype)
    want_y = reference.moe_mm(h_in.float(), dd, plan.tile_expert, tm)

    d = device
    dplan = plan.to(d)
    xd, wgud, wdd = x.to(d), wgu.to(d), wd.to(d)
    args = (dplan.tile_expert, dplan.meta, tm)
    tol = QREL_TOL[dtype]
    unused = (plan.tile_expert < 0).repeat_interleave(tm)
    failures = []

    def check(what, got, want, zero_unused=True):
        got = got.cpu()
        what = f"{name} {what}"
        if got.shape != want.shape or got.dtype != dtype:
            failures.append(f"{what}: {got.dtype} {tuple(got.shape)} != {dtype} "
                            f"{tuple(want.shape)}")
            return
        if not torch.isfinite(got).all():
            failures.append(f"{what}: non-finite values (unwritten elements?)")
        err = rel_err(got, want)
        if err > tol:
            failures.append(f"{what}: rel err {err:.2e} > {tol:.0e}")
        if zero_unused and unused.any() and not (got[unused] == 0).all():
            failures.append(f"{what}: rows of unused tiles are not zero")

    poison_allocator(d)
    check("gate_up_swiglu (gathered)", quant_ops.moe_gate_up_swiglu_qmm_triton(
        xd, wgud, name, H, *args, dplan.sorted_token), want_h)
    poison_allocator(d)
    check("down (row-ordered)", quant_ops.moe_qmm_triton(h_in.to(d), wdd, name, I, *args),
          want_y)
    if full:
        poison_allocator(d)
        check("gate_up (gathered, no swiglu)", quant_ops.moe_qmm_triton(
            xd, wgud, FORMATS[name].type_id, H, *args, dplan.sorted_token), want_gu)
    if full and not FORMATS[name].is_float:  # the op takes block formats (the contract)
        out = torch.full((h_in.shape[0], H), float("nan"), dtype=dtype, device=d)
        quant_ops.moe_qmm_out_cuda(h_in.to(d), wdd, FORMATS[name].type_id, I, dplan.tile_expert,
                                   tm, "none", out)
        check("moe_qmm_out (NaN-prefilled out)", out, want_y)
    if experts:
        failures += run_experts_case(name, device, dtype, T=T, E=E, K=K, tm=tm, dist=dist,
                                     problem=(H, I, x, wgu, wd, ids, w))
    return failures


def run_experts_case(name, device, dtype, *, T=8, E=3, K=2, tm=16, dist="neg_some",
                     down_name=None, split=None, problem=None, ops=None,
                     impl="triton_quantized", activation="silu"):
    """The experts implementation `impl` (triton_quantized, or cuda_quantized_dequant: the gpuq
    decode then the dense Triton GEMMs) against the float64 layer on the dequantized weights.
    split: a second format for `up` (gate and up then two tensors)."""
    from torch_argon.testing import backends
    ops = ops or backends.get("cuda" if torch.device(device).type == "cuda" else "cpu").ops
    H, I, x, wgu, wd, ids, w = problem or _problem(name, T, E, K, tm, dist, dtype,
                                                   11 * NAMES.index(name) + T,
                                                   down_name=down_name)
    down_name = down_name or name
    d = device
    dense_gu = dequantize_reference(wgu, name, H)
    if split:
        gate = wgu[:, :I]
        up = random_quantized(split, I, H, leading=(E,), std=0.05,
                              generator=torch.Generator().manual_seed(5))
        dense_gu = torch.cat([dense_gu[:, :I], dequantize_reference(up, split, H)], dim=1)
        q = QE(down=QW(wd.to(d), qformat(down_name), I), gate=QW(gate.to(d), qformat(name), H),
               up=QW(up.to(d), qformat(split), H))
    else:
        q = QE(down=QW(wd.to(d), qformat(down_name), I), gate_up=QW(wgu.to(d), qformat(name), H))
    dense_d = dequantize_reference(wd, down_name, I)
    want = reference.moe_layer(x, None, (dense_gu, dense_d), K, topk_ids=ids, topk_weights=w,
                               activation=activation)
    poison_allocator(d)
    got = run_implementation(impl, x.to(d), ids.to(d), w.to(d), q, tile_m=tm, ops=ops,
                             activation=activation)
    what = (f"{impl} {name}{'/' + split if split else ''}"
            f"{'/' + down_name if down_name != name else ''} {activation}")
    err = rel_err(got, want)
    if got.shape != want.shape or got.dtype != x.dtype or not err <= QREL_TOL[dtype]:
        return [f"{what} experts path: rel err {err:.2e} (shape {tuple(got.shape)}, "
                f"{got.dtype})"]
    return []


def run_dequant_path_case(name, **kwargs):
    """The dequant path (experts/cuda_quantized_dequant.py: the gpuq decode, here its host
    emulation from torch_argon._C_test, then the dense Triton GEMMs) on the CPU in fp16, twice:
    the second call finds the workspace NaN-filled and must overwrite every value it reads."""
    from torch_argon.experts import cuda_quantized_dequant
    failures = run_experts_case(name, "cpu", torch.float16, impl="cuda_quantized_dequant",
                                **kwargs)
    for buf in cuda_quantized_dequant.WORKSPACE.buffers.values():
        buf.fill_(float("nan"))
    return failures + run_experts_case(name, "cpu", torch.float16,
                                       impl="cuda_quantized_dequant", **kwargs)


def run_partial_tile_case(device, dtype=torch.float16, name="Q8_0"):
    """moe_qmm_out with tile_m below 16 (a program takes one tile's rows, masks the rest) and
    fp32 xs (exact products), against the fp32 reference."""
    failures = []
    for tm, xdtype in ((4, dtype), (1, torch.float32), (8, torch.float32)):
        T, E, K = 9, 3, 2
        H, I, x, _, wd, ids, w = _problem(name, T, E, K, tm, "repeated", xdtype, 3 + tm)
        plan = reference.moe_plan(ids, w, E, tm)
        xs = torch.randn(plan.sorted_token.shape[0], I).to(xdtype)
        want = reference.moe_mm(xs.float(), dequantize_reference(wd, name, I), plan.tile_expert,
                                tm)
        out = torch.full(want.shape, float("nan"), dtype=xdtype, device=device)
        quant_ops.moe_qmm_out_cuda(xs.to(device), wd.to(device), FORMATS[name].type_id, I,
                                   plan.tile_expert.to(device), tm, "none", out)
        err = rel_err(out.cpu(), want)
        if not err <= QREL_TOL[xdtype]:
            failures.append(f"moe_qmm_out tile_m={tm} {xdtype}: rel err {err:.2e}")
    return failures


def run_config_case(device, dtype=torch.float16):
    """launch_moe_qmm with configs other than the table's (the sweep's): the weight tile as the
    second tl.dot operand (swap_ab False), other block_n and blocks per step, BLOCK_M below the
    tile."""
    from torch_argon.triton_ops.quant_configs import QMMConfig
    from torch_argon.triton_ops.quant_blocks import device_tables
    failures = []
    for name, cfg, block_m in (("Q8_0", QMMConfig(32, 2, 4, 2, swap_ab=False), None),
                               ("Q4_K", QMMConfig(64, 1, 4, 2, swap_ab=False), 16),
                               ("Q5_0", QMMConfig(32, 1, 4, 3, swap_ab=True), None)):
        T, E, K, tm = 12, 3, 2, 32
        H, I, x, wgu, _, ids, w = _problem(name, T, E, K, tm, "uniform", dtype, 17)
        plan = reference.moe_plan(ids, w, E, tm)
        want = reference.swiglu(reference.moe_mm(reference.moe_gather(x, plan.sorted_token)
                                                 .float(), dequantize_reference(wgu, name, H),
                                                 plan.tile_expert, tm))
        out = torch.full(want.shape, float("nan"), dtype=dtype, device=device)
        dplan = plan.to(device)
        quant_ops.launch_moe_qmm(x.to(device), wgu.to(device), FORMATS[name], H,
                                 device_tables(device), dplan.tile_expert, dplan.meta, tm,
                                 dplan.sorted_token, out, swiglu=True, zero_unused=True,
                                 config=cfg, block_m=block_m)
        err = rel_err(out.cpu(), want)
        if not err <= QREL_TOL[dtype]:
            failures.append(f"{name} {cfg} block_m={block_m}: rel err {err:.2e}")
    return failures


# ---- the Triton-interpreter run ------------------------------------------------------------------

INTERPRETER_FULL = ("Q4_K", "Q8_0", "F16")  # every GEMM variant; the others: fused gate/up, down
_stand_in_libraries = []


def registration_case():
    """register_cuda_kernels on a stand-in library with the op table's schemas, for the CPU key:
    the ops then run the Triton kernels through the dispatcher (here, in the interpreter)."""
    lib = torch.library.Library("argon_qtest", "DEF")
    _stand_in_libraries.append(lib)
    lib.define("dequantize_out(Tensor w_q, int qtype, int n_in, Tensor(a!) out) -> ()")
    lib.define("moe_qmm_out(Tensor xs, Tensor w_q, int qtype, int n_in, Tensor tile_expert, "
               "int tile_m, str activation_quant, Tensor(a!) out) -> ()")
    failures = []
    done = quant_ops.register_cuda_kernels("argon_qtest", "CPU")
    if done != ["dequantize_out", "moe_qmm_out"]:
        failures.append(f"registered {done}")
    if quant_ops.register_cuda_kernels("argon_qtest", "CPU") != []:
        failures.append("registered twice")
    w = torch.randint(0, 256, (4, 2 * 18), dtype=torch.uint8)
    w[:, 1] &= 0x3F  # finite fp16 scales
    w[:, 19] &= 0x3F
    out = torch.full((4, 64), float("nan"))
    torch.ops.argon_qtest.dequantize_out(w, FORMATS["Q4_0"].type_id, 64, out)
    if not torch.equal(out, dequantize_reference(w, "Q4_0", 64)):
        failures.append("dequantize_out through the dispatcher differs")
    te = torch.tensor([0, -1], dtype=torch.int32)
    xs = torch.randn(32, 64)
    res = torch.full((32, 4), float("nan"))
    torch.ops.argon_qtest.moe_qmm_out(xs, w.view(1, 4, 36), FORMATS["Q4_0"].type_id, 64, te, 16,
                                      "none", res)
    want = xs[:16] @ dequantize_reference(w, "Q4_0", 64).T
    if not (torch.allclose(res[:16], want, rtol=1e-5, atol=1e-5) and (res[16:] == 0).all()):
        failures.append("moe_qmm_out through the dispatcher differs")
    try:
        torch.ops.argon_qtest.dequantize_out(w, FORMATS["Q4_0"].type_id, 63, out)
        failures.append("bad n_in accepted")
    except ValueError as e:
        if "multiple of 32" not in str(e):
            failures.append(f"bad n_in: {e}")
    return failures


def interpreter_cases():
    """(name, case) pairs for the Triton-interpreter run on the CPU: fp16 activations (the
    interpreter multiplies bf16 dot operands as raw bits; see tests/triton_interpreter_run.py)
    and fp32 for moe_qmm_out; one or two weight blocks per row; the adversarial routings on one
    cheap format (the routing logic is the same code for every format)."""
    for name in NAMES:
        yield f"dequant_{name}", lambda name=name: run_dequant_case(name, "cpu")
        yield f"dequant_nonfinite_{name}", lambda name=name: run_dequant_case(name, "cpu",
                                                                              finite=False)
    for name in NAMES:
        yield f"qmm_{name}", lambda name=name: run_qmm_case(name, "cpu", torch.float16,
                                                            full=name in INTERPRETER_FULL)
    for dist, T, tm in (("one_expert", 20, 16), ("empty", 10, 32), ("neg_all", 6, 16),
                        ("uniform", 0, 16), ("repeated", 12, 64)):
        yield f"routing_{dist}_T{T}_tm{tm}", lambda dist=dist, T=T, tm=tm: run_qmm_case(
            "Q8_0", "cpu", torch.float16, T=T, E=4, K=3, tm=tm, dist=dist, full=True,
            experts=True)
    yield "experts_Q4_K", lambda: run_experts_case("Q4_K", "cpu", torch.float16, dist="uniform")
    yield "experts_split_Q4_K_IQ4_XS_down_Q6_K", lambda: run_experts_case(
        "Q4_K", "cpu", torch.float16, split="IQ4_XS", down_name="Q6_K")
    for name, T, dist, extra in (("Q4_K", 8, "neg_some", {}), ("IQ2_XS", 12, "zipf", {}),
                                 ("Q8_0", 6, "neg_all", {}), ("Q5_0", 0, "uniform", {}),
                                 ("Q4_K", 9, "uniform", dict(split="IQ4_XS", down_name="Q6_K")),
                                 ("Q6_K", 10, "one_expert", dict(activation="gelu"))):
        yield f"dequant_path_{name}_{dist}_T{T}", lambda name=name, T=T, dist=dist, extra=extra: (
            run_dequant_path_case(name, T=T, dist=dist, **extra))
    yield "partial_tiles", lambda: run_partial_tile_case("cpu")
    yield "configs", lambda: run_config_case("cpu")
    yield "registration", registration_case


