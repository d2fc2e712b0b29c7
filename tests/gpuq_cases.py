"""Cases for the gpuq kernels (torch_argon/gpuq, csrc/gpuq), run on the CPU through the host
emulation in CI and on a CUDA GPU where there is one (tests/test_gpuq.py). Each case returns a
list of failure messages (empty = pass).

References: torch_argon.reference.moe_qmm, the float64 product on the exactly dequantized
weights (activation_quant "none"), or on the q8 activations (activation_quant "q8"). The kernels
compute those products up to float32 rounding (no weight is rounded), so the tolerance is the
rounding of the output to its dtype, with margin: far tighter than the Triton kernels' 1.5e-2.
"""
import torch

from routing_cases import make_ids, make_weights
from torch_argon import reference
from torch_argon.gpuq import ops as gpuq
from torch_argon.quant import FORMATS, random_quantized
from torch_argon.quant.activation_q8 import q8_activations

NAMES = list(gpuq.FORMATS)
# Relative Frobenius error against the float64 reference: the output's rounding (bf16: 2^-9 of
# each value, about 1.2e-3 over a tensor; fp16: 2^-12) with a factor 3 of margin.
REL_TOL = {torch.bfloat16: 4e-3, torch.float16: 6e-4}
# bf16 tiles of more than 8 rows per warp without q8 take the scaled path (csrc/gpuq/
# gpuq_kernel.h): each weight rounded to bf16, the Triton kernels' tolerance.
SCALED_TOL = 1.5e-2


def scaled_path(dtype, activation_quant, tm):
    return dtype == torch.bfloat16 and activation_quant == "none" and min(tm, 32) > 8
# q8 against the exact product on realistic data (the bound).
Q8_VS_EXACT_TOL = 1e-2


def dims_for(name):
    """(H, I): one or two 256-value blocks for the K- and IQ-quants, a few 32-value blocks for
    the others; N not a multiple of a block's 64 or 128 columns (the masked column tail)."""
    return (512, 256) if FORMATS[name].block_elems == 256 else (96, 160)


def rel_err(got, want):
    got, want = got.double(), want.double()
    return float((got - want).norm() / want.norm().clamp_min(1e-300))


def close_failures(what, got, want, tol):
    """[] where got is finite and within tol of want (relative Frobenius error), else why not."""
    if not torch.isfinite(got).all():
        return [f"{what}: non-finite values (unwritten elements?)"]
    err = rel_err(got, want)
    return [f"{what}: rel err {err:.2e} > {tol:.0e}"] if err > tol else []


def _act(activation, g):
    return reference.ACTIVATIONS[activation](g)


def problem(name, T, E, K, dist, dtype, seed, dims=None):
    """x [T, H] (rows strided), gate_up [E, 2I, H] and down [E, H - 32, I] of `name`, ids and
    routing weights; (H, I) = dims or dims_for(name)."""
    H, I = dims or dims_for(name)
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(T, H + 16, generator=g) * 0.7).to(dtype)[:, 8:8 + H]  # strided rows
    wgu = random_quantized(name, 2 * I, H, leading=(E,), std=0.05, generator=g)
    wd = random_quantized(name, H - 32, I, leading=(E,), std=0.05, generator=g)
    ids, w = make_ids(T, K, E, dist, seed=seed), make_weights(T, K, seed=seed)
    return x, wgu, wd, ids, w


def run_gemm_case(name, device, dtype, *, activation_quant="none", activation="silu", T=12,
                  E=3, K=2, tm=8, dist="neg_some", seed=0):
    """The gathered gate/up GEMM with the activation epilogue (meta, zero_unused) and the
    row-ordered down GEMM (no meta, NaN-prefilled out), against the references; unused tiles'
    rows zero; q8 within Q8_VS_EXACT_TOL of the exact product."""
    x, wgu, wd, ids, w = problem(name, T, E, K, dist, dtype, seed + 31 * NAMES.index(name))
    H, I = x.shape[1], wgu.shape[1] // 2
    plan = reference.moe_plan(ids, w, E, tm)
    R = plan.sorted_token.shape[0]
    xs = reference.moe_gather(x, plan.sorted_token)
    gu = reference.moe_qmm(xs, wgu, name, H, plan.tile_expert, tm,
                           activation_quant=activation_quant).double()
    # the reference's products before rounding, for the epilogue (rounded once)
    a = q8_activations(xs.float()) if activation_quant == "q8" else xs.double()
    gu64 = _exact_mm(a, wgu, name, H, plan.tile_expert, tm)
    want_h = (_act(activation, gu64[:, :I]) * gu64[:, I:])
    h_in = want_h.to(dtype)
    want_y = _exact_mm(q8_activations(h_in.float()) if activation_quant == "q8"
                       else h_in.double(), wd, name, I, plan.tile_expert, tm)
    unused = (plan.tile_expert < 0).repeat_interleave(tm)
    d = torch.device(device)
    failures = []
    tol = SCALED_TOL if scaled_path(dtype, activation_quant, tm) else REL_TOL[dtype]
    tag = f"{name} {str(dtype)[6:]} {activation_quant} tm={tm}"

    def check(what, got, want):
        got = got.cpu()
        failures.extend(close_failures(f"{tag} {what}", got, want, tol))
        if not torch.isfinite(got).all():
            return None
        if unused.any() and not (got[unused] == 0).all():
            failures.append(f"{tag} {what}: rows of unused tiles are not zero")
        return got

    dev_plan = plan.to(d)
    h = gpuq.qmm(x.to(d), wgu.to(d), name, H, dev_plan.tile_expert, tm, meta=dev_plan.meta,
                 row_token=dev_plan.sorted_token, swiglu=True, activation=activation,
                 activation_quant=activation_quant)
    check(f"gate_up {activation} (gathered)", h, want_h)
    out = torch.full((R, wd.shape[1]), float("nan"), dtype=dtype, device=d)
    gpuq.qmm(h_in.to(d), wd.to(d), name, I, dev_plan.tile_expert, tm,
             activation_quant=activation_quant, out=out)
    y = check("down (row-ordered, NaN-prefilled out)", out, want_y)
    if activation_quant == "q8" and y is not None:
        exact = _exact_mm(h_in.double(), wd, name, I, plan.tile_expert, tm)
        err = rel_err(y, exact)
        if err > Q8_VS_EXACT_TOL:
            failures.append(f"{tag} down: q8 vs exact rel err {err:.2e} > {Q8_VS_EXACT_TOL}")
    return failures


def _exact_mm(a64, w_q, name, n_in, tile_expert, tm):
    """float64 a @ dequantize(w_q[e])^T per tile's expert (rows of unused tiles zero)."""
    from torch_argon.quant import dequantize_reference
    out = torch.zeros(a64.shape[0], w_q.shape[1], dtype=torch.float64)
    row_expert = tile_expert.long().repeat_interleave(tm)
    for e in row_expert.unique().tolist():
        if e < 0:
            continue
        rows = row_expert == e
        out[rows] = a64[rows] @ dequantize_reference(w_q[e], name, n_in).double().T
    return out


def run_unused_kept_case(device, name="Q4_K", dtype=torch.bfloat16, tm=8):
    """zero_unused=False leaves the rows of unused tiles (here: every tile unused, expert -1, or
    past meta's n_tiles) as they were, at tile_m tm."""
    x, wgu, _, _, _ = problem(name, 8, 2, 1, "uniform", dtype, 5)
    H = x.shape[1]
    d = torch.device(device)
    tile_expert = torch.tensor([-1, 1, 0], dtype=torch.int32, device=d)
    meta = torch.tensor([2 * tm, 1, 0, 0], dtype=torch.int32, device=d)  # n_tiles = 1
    row_token = torch.zeros(3 * tm, dtype=torch.int32, device=d)
    out = torch.full((3 * tm, wgu.shape[1] // 2), 7.0, dtype=dtype, device=d)
    gpuq.qmm(x.to(d), wgu.to(d), name, H, tile_expert, tm, meta=meta, row_token=row_token,
             swiglu=True, zero_unused=False, out=out)
    return [] if (out.cpu() == 7.0).all() else ["unused tiles' rows were written"]


def run_loops_case(name, device, dtype, blocks, activation_quant, tm, T=13, E=3, K=2,
                   loop="pipelined"):
    """The gate/up GEMM (gathered, activation epilogue) over rows of blocks[0] blocks and the
    down GEMM over rows of blocks[1] blocks, into NaN-prefilled outs, with the plain K loop and
    `loop` (ARGON_GPUQ_LOOP): the outputs of `loop` bit for bit the plain loop's, and within
    the tolerance of the float64 reference."""
    import os
    from torch_argon.quant import dequantize_reference
    be = FORMATS[name].block_elems
    H, I = blocks[0] * be, blocks[1] * be
    g = torch.Generator().manual_seed(7 + NAMES.index(name) + 100 * blocks[0])
    x = (torch.randn(T, H, generator=g) * 0.7).to(dtype)
    wgu = random_quantized(name, 2 * 24, H, leading=(E,), std=0.05, generator=g)
    wd = random_quantized(name, 40, I, leading=(E,), std=0.05, generator=g)
    ids, w = make_ids(T, K, E, "neg_some", seed=blocks[1]), make_weights(T, K, seed=1)
    plan = reference.moe_plan(ids, w, E, tm)
    R = plan.sorted_token.shape[0]
    h_in = (torch.randn(R, I, generator=g) * 0.5).to(dtype)
    d = torch.device(device)
    dev_plan = plan.to(d)
    tag = f"{name} {str(dtype)[6:]} {activation_quant} tm={tm} blocks={blocks} {loop}"
    outs = {}
    previous = os.environ.get("ARGON_GPUQ_LOOP")
    try:
        for run in ("plain", loop):
            os.environ["ARGON_GPUQ_LOOP"] = run
            gu = torch.full((R, 24), float("nan"), dtype=dtype, device=d)
            gpuq.qmm(x.to(d), wgu.to(d), name, H, dev_plan.tile_expert, tm, meta=dev_plan.meta,
                     row_token=dev_plan.sorted_token, swiglu=True,
                     activation_quant=activation_quant, out=gu)
            dn = torch.full((R, 40), float("nan"), dtype=dtype, device=d)
            gpuq.qmm(h_in.to(d), wd.to(d), name, I, dev_plan.tile_expert, tm,
                     activation_quant=activation_quant, out=dn)
            outs[run] = (gu.cpu(), dn.cpu())
    finally:
        if previous is None:
            os.environ.pop("ARGON_GPUQ_LOOP", None)
        else:
            os.environ["ARGON_GPUQ_LOOP"] = previous
    failures = []
    for what, plain, other in zip(("gate_up", "down"), outs["plain"], outs[loop]):
        if not torch.equal(plain.view(torch.int16), other.view(torch.int16)):
            bad = (plain.view(torch.int16) != other.view(torch.int16)).nonzero()
            failures.append(f"{tag} {what}: {loop} differs from plain at {bad.numel() // 2} "
                            f"values, first {bad[0].tolist()}")
    # the reference for the outputs of `loop`
    xs = reference.moe_gather(x, plan.sorted_token)
    a = q8_activations(xs.float()) if activation_quant == "q8" else xs.double()
    gu64 = _exact_mm(a, wgu, name, H, plan.tile_expert, tm)
    want_gu = _act("silu", gu64[:, :24]) * gu64[:, 24:]
    want_dn = _exact_mm(q8_activations(h_in.float()) if activation_quant == "q8"
                        else h_in.double(), wd, name, I, plan.tile_expert, tm)
    tol = SCALED_TOL if scaled_path(dtype, activation_quant, tm) else REL_TOL[dtype]
    failures += close_failures(f"{tag} gate_up", outs[loop][0], want_gu, tol)
    failures += close_failures(f"{tag} down", outs[loop][1], want_dn, tol)
    return failures
