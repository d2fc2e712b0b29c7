"""Every argument misuse of the op API that the checks refuse without reading data: wrong dtypes,
shapes, tile sizes, formats, out= buffers that do not fit or overlap an input. One table, run by
tests/test_bad_input.py on every backend (the error, and nothing written) and by
tests/test_fakes.py on meta tensors and under torch.compile (the same error, at trace time).
Value checks (ids or plan indices out of range) read data: test_bad_input.py holds them.

A case is `make(ops, device) -> (call, tensors)`: call(*tensors) makes the misuse through the
OpSet `ops`, with tensors made fresh on `device` (constants live in the call, so a compiled call
takes the tensors as its inputs)."""
from dataclasses import dataclass
from typing import Callable

import pytest
import torch

from routing_cases import make_ids, make_weights
from torch_argon._shapes import META_SIZE, plan_rows
from torch_argon.plan import MoEPlan
from torch_argon.quant import FORMATS, random_quantized

T, K, E, TM, H = 20, 4, 8, 16, 16
R = plan_rows(T, K, E, TM)
Q4_K, Q8_0 = FORMATS["Q4_K"].type_id, FORMATS["Q8_0"].type_id


@dataclass(frozen=True)
class Misuse:
    name: str
    match: str  # a regex of the error message
    make: Callable
    exception: type = ValueError
    quantized: bool = False  # a quantized op: needs the backend's quantized kernels

    def __repr__(self):
        return self.name


CASES = []


def skip_without_kernels(backend, case):
    """A quantized case skips on a backend whose library has no quantized kernels there."""
    lib = backend.ops.ns.name
    key = {"cpu": "CPU", "cuda": "CUDA", "mps": "MPS"}[torch.device(backend.device).type]
    if case.quantized and not torch._C._dispatch_has_kernel_for_dispatch_key(
            f"{lib}::dequantize_out", key):
        pytest.skip(f"{backend.name}: {lib} has no quantized kernels for {key}")


def misuse(match, name=None, **kw):
    def register(make):
        CASES.append(Misuse(name or make.__name__, match, make, **kw))
        return make
    return register


def routing(device, ids_dtype=torch.int64):
    return (make_ids(T, K, E, "uniform").to(ids_dtype).to(device),
            make_weights(T, K).to(device))


def plan_of(ops, device):
    return ops.moe_plan(*routing(device), E, TM)


def rand(*shape, device, dtype=torch.float32):
    return torch.randn(*shape, device=device).to(dtype)


# ---- moe_plan: arguments -----------------------------------------------------------------------

def plan_call(change, n_expert=E, tile_m=TM):
    def make(ops, d):
        ids, w = change(*routing(d))
        return (lambda i, x: ops.moe_plan(i, x, n_expert, tile_m)), (ids, w)
    return make


for name, match, change, n_expert, tile_m in [
        ("ids_float", "topk_ids must be int32 or int64", lambda i, w: (i.float(), w), E, TM),
        ("weights_int", "topk_weights must be float32, float16 or bfloat16",
         lambda i, w: (i, w.int()), E, TM),
        ("weights_fp64", "topk_weights must be float32, float16 or bfloat16, got Double",
         lambda i, w: (i, w.double()), E, TM),
        ("ids_1d", "topk_ids must be 2-D", lambda i, w: (i.reshape(-1), w), E, TM),
        ("weights_shape", "topk_weights must have the shape of topk_ids",
         lambda i, w: (i, w[:, :2]), E, TM),
        ("no_expert", "n_expert must be >= 1", lambda i, w: (i, w), 0, TM),
        ("negative_experts", "n_expert must be >= 1", lambda i, w: (i, w), -3, TM),
        ("too_many_experts", "n_expert must be at most 16777216", lambda i, w: (i, w),
         2**24 + 1, TM),
        ("n_expert_beyond_int64", "n_expert must fit in int64", lambda i, w: (i, w), 2**70, TM),
        ("n_expert_float", "n_expert must be an int, got float", lambda i, w: (i, w), 3.0, TM),
        ("tile_m_12", "tile_m must be a power of two", lambda i, w: (i, w), E, 12),
        ("tile_m_3", "tile_m must be a power of two", lambda i, w: (i, w), E, 3),
        ("tile_m_0", "tile_m must be a power of two", lambda i, w: (i, w), E, 0),
        ("tile_m_8192", r"tile_m must be a power of two in \[1, 4096\]", lambda i, w: (i, w),
         E, 8192),
        # 2^32 entries: the ids broadcast from one element, so no memory is spent.
        ("entries_beyond_int32", "T\\*K plus padding must fit in int32 rows",
         lambda i, w: (i[:1, :1].expand(2**31, 2), w[:1, :1].expand(2**31, 2)), E, TM),
]:
    misuse(match, name=f"plan_{name}")(plan_call(change, n_expert, tile_m))


# ---- moe_plan: out= buffers --------------------------------------------------------------------

PLAN_SIZES = {"counts": E, "offsets": E + 1, "sorted_token": R, "sorted_weight": R,
              "pos": T * K, "tile_expert": R // TM, "meta": META_SIZE}


def plan_buffers(device, overlaps=()):
    """The seven plan outputs as slices of one int32 buffer laid end to end, except the pairs in
    `overlaps`, where the second starts one element into the first."""
    total = sum(PLAN_SIZES.values()) + 8
    big = torch.full((total,), 0x5A5A5A5A, dtype=torch.int32, device=device)
    start, at = 0, {}
    for name, n in PLAN_SIZES.items():
        at[name] = start
        start += n
    for first, second in overlaps:
        at[second] = at[first] + 1
    bufs = [big[at[name]:at[name] + n] for name, n in PLAN_SIZES.items()]
    bufs[3] = bufs[3].view(torch.float32)
    bufs[4] = bufs[4].view(T, K)
    return bufs


def plan_into(buffers_of):
    def make(ops, d):
        ids, w = routing(d, torch.int32)
        bufs = buffers_of(ids, d)
        return (lambda i, x, *b: ops.moe_plan(i, x, E, TM, out=MoEPlan(*b, TM))), (ids, w, *bufs)
    return make


def short_buffer(i):
    def buffers(ids, d):
        bufs = plan_buffers(d)
        bufs[i] = bufs[i][:-1] if bufs[i].dim() == 1 else bufs[i][:, :-1]
        return bufs
    return buffers


for i, field in enumerate(MoEPlan._fields[:7]):
    misuse(f"{field} must have shape", name=f"plan_out_short_{field}")(plan_into(short_buffer(i)))


def strided_pos(ids, d):
    bufs = plan_buffers(d)
    bufs[4] = torch.empty(K, T, dtype=torch.int32, device=d).t()
    return bufs


misuse("pos must be contiguous", name="plan_out_strided_pos")(plan_into(strided_pos))
for first, second in [("counts", "offsets"), ("offsets", "meta"), ("counts", "meta"),
                      ("sorted_token", "pos"), ("pos", "tile_expert")]:
    misuse("overlap", name=f"plan_out_{first}_over_{second}")(
        plan_into(lambda ids, d, pair=(first, second): plan_buffers(d, [pair])))


def pos_over_ids(ids, d):
    bufs = plan_buffers(d)
    bufs[4] = ids  # writing pos would overwrite the ids being read
    return bufs


misuse("pos overlaps the input topk_ids", name="plan_out_pos_over_ids")(plan_into(pos_over_ids))


# ---- moe_gather, moe_combine, swiglu -----------------------------------------------------------

@misuse("sorted_token must be int32")
def gather_sorted_token_int64(ops, d):
    return (lambda x, st: ops.moe_gather(x, st)), (rand(T, H, device=d),
                                                    plan_of(ops, d).sorted_token.long())


@misuse("x must be 2-D")
def gather_x_1d(ops, d):
    return (lambda x, st: ops.moe_gather(x, st)), (rand(H, device=d), plan_of(ops, d).sorted_token)


@misuse("x must be float32, float16 or bfloat16")
def gather_x_int(ops, d):
    return (lambda x, st: ops.moe_gather(x, st)), (rand(T, H, device=d).int(),
                                                    plan_of(ops, d).sorted_token)


@misuse("out must be float32, float16 or bfloat16, got Int")
def gather_out_dtype_int(ops, d):
    return ((lambda x, st: ops.moe_gather(x, st, out_dtype=torch.int32)),
            (rand(T, H, device=d), plan_of(ops, d).sorted_token))


@misuse("out must have shape")
def gather_out_shape(ops, d):
    return ((lambda x, st, o: ops.moe_gather(x, st, out=o)),
            (rand(T, H, device=d), plan_of(ops, d).sorted_token, rand(3, H, device=d)))


@misuse("out_dtype is torch.float16 but out is torch.float32")
def gather_out_dtype_against_out(ops, d):
    return ((lambda x, st, o: ops.moe_gather(x, st, out_dtype=torch.float16, out=o)),
            (rand(T, H, device=d), plan_of(ops, d).sorted_token, rand(R, H, device=d)))


@misuse("out overlaps the input x")
def gather_out_over_x(ops, d):
    big = rand(R + T, H, device=d)
    return ((lambda x, st, o: ops.moe_gather(x, st, out=o)),
            (big[:T], plan_of(ops, d).sorted_token, big[T // 2:T // 2 + R]))


@misuse("topk_weights must have the shape of pos")
def combine_weights_shape(ops, d):
    ids, w = routing(d)
    plan = ops.moe_plan(ids, w, E, TM)
    return (lambda y, pos, w: ops.moe_combine(y, pos, w)), (rand(R, H, device=d), plan.pos,
                                                             w[:, :1])


@misuse("pos must be int32")
def combine_pos_int64(ops, d):
    ids, w = routing(d)
    plan = ops.moe_plan(ids, w, E, TM)
    return (lambda y, pos, w: ops.moe_combine(y, pos, w)), (rand(R, H, device=d), plan.pos.long(),
                                                             w)


def combine_with(name, extra_of):
    """A combine given shared or residual (`name`): extra_of(y, device) -> (that tensor, the
    out= buffer or None)."""
    def make(ops, d):
        ids, w = routing(d)
        plan = ops.moe_plan(ids, w, E, TM)
        y = rand(R, H, device=d)
        extra, out = extra_of(y, d)

        def call(y, pos, w, extra, *out):
            return ops.moe_combine(y, pos, w, **{name: extra}, out=out[0] if out else None)
        return call, (y, plan.pos, w, extra) + ((out,) if out is not None else ())
    return make


misuse(r"shared must have shape \[T, H\]", name="combine_shared_shape")(combine_with(
    "shared", lambda y, d: (rand(T, 15, device=d), None)))
misuse(r"residual must have shape \[T, H\]", name="combine_residual_shape")(combine_with(
    "residual", lambda y, d: (rand(T + 1, H, device=d), None)))


def over_extra(y, d):
    buf = rand(T + 1, H, device=d)
    return buf[1:], buf[:T]


misuse("out overlaps the input shared", name="combine_out_over_shared")(combine_with(
    "shared", over_extra))
misuse("out overlaps the input residual", name="combine_out_over_residual")(combine_with(
    "residual", over_extra))
misuse("out overlaps the input y", name="combine_out_over_y")(combine_with(
    "shared", lambda y, d: (rand(T, H, device=d), y[:T])))


@misuse("out_dtype is torch.bfloat16 but out is torch.float32")
def combine_out_dtype_against_out(ops, d):
    ids, w = routing(d)
    plan = ops.moe_plan(ids, w, E, TM)
    return ((lambda y, pos, w, o: ops.moe_combine(y, pos, w, out_dtype=torch.bfloat16, out=o)),
            (rand(R, H, device=d), plan.pos, w, rand(T, H, device=d)))


@misuse("last dim must be even")
def swiglu_odd_width(ops, d):
    return ops.swiglu, (rand(4, 7, device=d),)


@misuse("up must have the shape of gate")
def swiglu_up_shape(ops, d):
    g = rand(4, 7, device=d)
    return ops.swiglu, (g, g[:, :3])


@misuse("up must have the dtype of gate")
def swiglu_up_dtype(ops, d):
    return ops.swiglu, (rand(4, 7, device=d), rand(4, 7, device=d, dtype=torch.half))


@misuse("activation must be one of")
def swiglu_activation(ops, d):
    return (lambda g: ops.swiglu(g, activation="relu")), (rand(4, 8, device=d),)


@misuse("out overlaps the input gate")
def swiglu_out_over_fused_input(ops, d):
    gu = rand(R, 2 * H, device=d)
    return (lambda g, o: ops.swiglu(g, out=o)), (gu, gu.view(-1)[:R * H].view(R, H))


@misuse("out_dtype is torch.float16 but out is torch.float32")
def swiglu_out_dtype_against_out(ops, d):
    return ((lambda g, o: ops.swiglu(g, out_dtype=torch.float16, out=o)),
            (rand(4, 8, device=d), rand(4, 4, device=d)))


@misuse("grad_out must have swiglu's output shape")
def swiglu_backward_grad_shape(ops, d):
    return ops.swiglu_backward, (rand(4, 3, device=d), rand(4, 8, device=d))


@misuse("grad_out must be float32, float16 or bfloat16")
def swiglu_backward_grad_int(ops, d):
    return (ops.swiglu_backward,
            (torch.zeros(4, 4, dtype=torch.int32, device=d), rand(4, 8, device=d)))


@misuse("out overlaps the input gate")
def swiglu_backward_out_over_gate(ops, d):
    gu = rand(4, 8, device=d)
    return (lambda dy, g: ops.swiglu_backward(dy, g, out=g)), (rand(4, 4, device=d), gu)


# ---- moe_mm ------------------------------------------------------------------------------------

def mm_call(change, tile_m=None):
    def make(ops, d):
        plan = plan_of(ops, d)
        xs, w, te = change(rand(R, 32, device=d), rand(E, 24, 32, device=d), plan.tile_expert)
        return (lambda xs, w, te: ops.moe_mm(xs, w, te, tile_m or TM)), (xs, w, te)
    return make


for name, match, change, tile_m in [
        ("w_dtype", "w must have the dtype of xs", lambda xs, w, te: (xs, w.half(), te), None),
        ("inner_size", r"w must be \[E, N, Kd\] with Kd", lambda xs, w, te: (xs, w[:, :, :16], te),
         None),
        ("xs_rows", "xs must have tile_expert.size", lambda xs, w, te: (xs[:-1], w, te), None),
        ("tile_m_3", "tile_m must be a power of two", lambda xs, w, te: (xs, w, te), 3),
        ("tile_expert_int64", "tile_expert must be int32", lambda xs, w, te: (xs, w, te.long()),
         None),
        ("xs_1d", "xs must be 2-D", lambda xs, w, te: (xs[0], w, te), None),
]:
    misuse(match, name=f"moe_mm_{name}")(mm_call(change, tile_m))


@misuse("out overlaps the input xs")
def moe_mm_out_over_xs(ops, d):
    plan = plan_of(ops, d)
    xs = rand(R, H, device=d)
    return ((lambda xs, w, te: ops.moe_mm(xs, w, te, TM, out=xs)),
            (xs, rand(E, H, H, device=d), plan.tile_expert))


def weight_grad_call(change, n_expert=E):
    def make(ops, d):
        plan = plan_of(ops, d)
        xs, dy, te = change(rand(R, 32, device=d), rand(R, 24, device=d), plan.tile_expert)
        return ((lambda xs, dy, te: ops.moe_mm_weight_grad(xs, dy, te, n_expert, TM)),
                (xs, dy, te))
    return make


for name, match, change, n_expert in [
        ("grad_dtype", "grad_out must have the dtype of xs",
         lambda xs, dy, te: (xs, dy.half(), te), E),
        ("grad_rows", "grad_out must have the rows of xs",
         lambda xs, dy, te: (xs, dy[:-1], te), E),
        ("xs_rows", "xs must have tile_expert.size", lambda xs, dy, te: (xs[:-1], dy[:-1], te), E),
        ("tile_expert_int64", "tile_expert must be int32",
         lambda xs, dy, te: (xs, dy, te.long()), E),
        ("n_expert_0", "n_expert must be >= 1", lambda xs, dy, te: (xs, dy, te), 0),
]:
    misuse(match, name=f"moe_mm_weight_grad_{name}")(weight_grad_call(change, n_expert))


@misuse("out overlaps the input xs")
def moe_mm_weight_grad_out_over_xs(ops, d):
    plan = plan_of(ops, d)
    xs = rand(R, H, device=d)
    return ((lambda xs, dy, te: ops.moe_mm_weight_grad(xs, dy, te, 1, TM, out=xs[:H].view(1, H, H))),
            (xs, rand(R, H, device=d), plan.tile_expert))


# ---- dequantize --------------------------------------------------------------------------------

def q8_weights(d):
    return random_quantized("Q8_0", 4, 64, leading=(2,), generator=torch.Generator().manual_seed(6),
                            device=d)


def dequantize_call(qtype, n_in, change=lambda w: w, out_of=None):
    """The op itself for a ggml type id (what the kernels see), the API for a type name."""
    def make(ops, d):
        w_q = change(q8_weights(d))
        if out_of is None:
            dequantize = ops.op.dequantize if isinstance(qtype, int) else ops.dequantize
            return (lambda w: dequantize(w, qtype, n_in)), (w_q,)
        return (lambda w, o: ops.op.dequantize_out(w, qtype, n_in, o)), (w_q, out_of(w_q, d))
    return make


for name, match, qtype, n_in, change in [
        ("qtype_77", "qtype 77 is not a GGML type", 77, 64, lambda w: w),
        ("unknown_name", "unknown quantized type 'Q9_K'", "Q9_K", 64, lambda w: w),
        ("n_in_48", "Q8_0 needs the input dim to be a multiple of 32, got n_in=48", Q8_0, 48,
         lambda w: w),
        ("n_in_32", "w_q has 68 bytes per row", Q8_0, 32, lambda w: w),
        ("w_q_1d", "w_q must have at least 2 dims", Q8_0, 64, lambda w: w[0, 0]),
        ("w_q_int8", r"w_q must be uint8 \(raw Q8_0 blocks\)", Q8_0, 64,
         lambda w: w.view(torch.int8)),
]:
    misuse(match, name=f"dequantize_{name}", quantized=True)(dequantize_call(qtype, n_in, change))

@misuse("w_q has 144 bytes per row, but Q4_K rows of n_in=512 take 288", quantized=True)
def dequantize_q4_k_rows_of_256_as_512(ops, d):
    """The issue's case: Q4_K blocks of 256-value rows (144 bytes) read as rows of 512."""
    w_q = random_quantized("Q4_K", 4, 256, generator=torch.Generator().manual_seed(0), device=d)
    return (lambda w: ops.dequantize(w, "Q4_K", 512)), (w_q,)


for name, match, qtype, out_of in [
        ("out_shape", "out must have shape", Q8_0,
         lambda w, d: torch.empty(2, 4, 32, device=d)),
        ("out_half", "out must be Float", Q8_0,
         lambda w, d: torch.empty(2, 4, 64, device=d, dtype=torch.half)),
        ("out_strided", "out must be contiguous", Q8_0,
         lambda w, d: torch.empty(2, 64, 4, device=d).transpose(1, 2)),
]:
    misuse(match, name=f"dequantize_{name}", quantized=True)(
        dequantize_call(qtype, 64, out_of=out_of))


@misuse("out overlaps the input w_q", quantized=True)
def dequantize_out_over_its_blocks(ops, d):
    buf = torch.zeros(2 * 4 * 64, device=d)
    blocks = buf.view(torch.uint8)[:2 * 4 * 68].view(2, 4, 68)
    return (lambda w, o: ops.dequantize(w, "Q8_0", 64, out=o)), (blocks, buf.view(2, 4, 64))


def f16_rows(d):
    return torch.randn(4, 8, device=d).half().view(torch.uint8)


# The plain float formats: their out= meets the same checks (a reinterpretation, no kernel).
for name, match, out_of in [
        ("int32", "out must be Float, got Int",
         lambda d: torch.empty(4, 8, dtype=torch.int32, device=d)),
        ("broadcast", r"out must have shape \[4, 8\], got \[3, 4, 8\]",
         lambda d: torch.empty(3, 4, 8, device=d)),
]:
    misuse(match, name=f"dequantize_f16_out_{name}")(
        lambda ops, d, out_of=out_of: ((lambda w, o: ops.dequantize(w, "F16", 8, out=o)),
                                       (f16_rows(d), out_of(d))))


# ---- moe_qmm -----------------------------------------------------------------------------------

def qmm_inputs(ops, d):
    """Plan, rows xs [R, 256] and Q4_K weights [4, 24, 144] (n_in 256)."""
    ids = make_ids(20, 2, 4, "uniform").to(d)
    plan = ops.moe_plan(ids, make_weights(20, 2).to(d), 4, 16)
    w_q = random_quantized("Q4_K", 24, 256, leading=(4,), generator=torch.Generator().manual_seed(0),
                           device=d)
    return plan, rand(plan.sorted_token.shape[0], 256, device=d), w_q


def qmm_call(change, out=False):
    def make(ops, d):
        plan, xs, w_q = qmm_inputs(ops, d)
        xs, w_q, qtype, n_in, te, tm = change(xs, w_q, Q4_K, 256, plan.tile_expert, 16)
        if not out:
            return (lambda xs, w, te: ops.op.moe_qmm(xs, w, qtype, n_in, te, tm)), (xs, w_q, te)
        o = torch.empty(xs.shape[0] if xs.dim() else 0, 24, device=d, dtype=xs.dtype)
        return ((lambda xs, w, te, o: ops.op.moe_qmm_out(xs, w, qtype, n_in, te, tm, "none", o)),
                (xs, w_q, te, o))
    return make


for name, match, change in [
        ("qtype_99", "qtype 99 is not a GGML type", lambda xs, w, q, n, te, tm: (xs, w, 99, n, te, tm)),
        ("qtype_f16", "qtype 1 is F16, a plain float type",
         lambda xs, w, q, n, te, tm: (xs, w, 1, n, te, tm)),
        ("n_in_100", "Q4_K needs the input dim to be a multiple of 256, got n_in=100",
         lambda xs, w, q, n, te, tm: (xs[:, :100], w, q, 100, te, tm)),
        ("w_q_int8", "w_q must be uint8", lambda xs, w, q, n, te, tm: (xs, w.view(torch.int8), q, n,
                                                                      te, tm)),
        ("row_bytes", "w_q has 143 bytes per row",
         lambda xs, w, q, n, te, tm: (xs, w[:, :, :-1], q, n, te, tm)),
        ("w_q_2d", "w_q must be 3-D", lambda xs, w, q, n, te, tm: (xs, w[0], q, n, te, tm)),
        ("xs_int", "xs must be float32", lambda xs, w, q, n, te, tm: (xs.int(), w, q, n, te, tm)),
        ("q8_0_rows", "w_q has 144 bytes per row",
         lambda xs, w, q, n, te, tm: (xs, w, Q8_0, 256, te, tm)),
        ("xs_width", r"xs must be \[R, n_in\]",
         lambda xs, w, q, n, te, tm: (xs[:, :128], w, q, n, te, tm)),
        ("tile_expert_int64", "tile_expert must be int32",
         lambda xs, w, q, n, te, tm: (xs, w, q, n, te.long(), tm)),
        ("tile_m_3", "tile_m must be a power of two",
         lambda xs, w, q, n, te, tm: (xs, w, q, n, te, 3)),
        ("xs_rows", "xs must have tile_expert.size",
         lambda xs, w, q, n, te, tm: (xs[:-1], w, q, n, te, tm)),
]:
    misuse(match, name=f"moe_qmm_{name}", quantized=True)(qmm_call(change))
    misuse(match, name=f"moe_qmm_out_{name}", quantized=True)(qmm_call(change, out=True))


def qmm_into(out_of):
    def make(ops, d):
        plan, xs, w_q = qmm_inputs(ops, d)
        return ((lambda xs, w, te, o: ops.moe_qmm(xs, w, "Q4_K", 256, te, 16, out=o)),
                (xs, w_q, plan.tile_expert, out_of(xs, d)))
    return make


for name, match, out_of in [
        ("out_shape", "out must have shape", lambda xs, d: torch.empty(xs.shape[0], 23, device=d)),
        ("out_half", "out must be Float",
         lambda xs, d: torch.empty(xs.shape[0], 24, device=d, dtype=torch.half)),
        ("out_strided", "out must be contiguous",
         lambda xs, d: torch.empty(24, xs.shape[0], device=d).t()),
]:
    misuse(match, name=f"moe_qmm_{name}", quantized=True)(qmm_into(out_of))


def qmm_activation_quant(mode, out):
    def make(ops, d):
        plan, xs, w_q = qmm_inputs(ops, d)
        if not out:
            return ((lambda xs, w, te: ops.moe_qmm(xs, w, "Q4_K", 256, te, 16,
                                                   activation_quant=mode)),
                    (xs, w_q, plan.tile_expert))
        return ((lambda xs, w, te, o: ops.moe_qmm(xs, w, "Q4_K", 256, te, 16,
                                                  activation_quant=mode, out=o)),
                (xs, w_q, plan.tile_expert, torch.empty(xs.shape[0], 24, device=d)))
    return make


for out in (False, True):
    misuse('activation_quant must be one of "none", "q8", got "q4"', quantized=True,
           name=f"moe_qmm{'_out' if out else ''}_activation_quant_q4")(
        qmm_activation_quant("q4", out))


@misuse("out overlaps the input xs", quantized=True)
def moe_qmm_out_over_xs(ops, d):
    plan, xs, w_q = qmm_inputs(ops, d)
    rows = xs.shape[0]
    buf = rand(rows * 256 + rows * 24, device=d)
    return ((lambda xs, w, te, o: ops.moe_qmm(xs, w, "Q4_K", 256, te, 16, out=o)),
            (buf[:rows * 256].view(rows, 256), w_q, plan.tile_expert,
             buf[rows * 232:rows * 256].view(rows, 24)))
