"""The argon ops' backward formulas (issue 46), registered with torch.library.register_autograd on
each op library (`argon`, and a test module's as ops.add_library adds it), each a composition of
the same library's ops, so a backend's backward runs that backend's kernels:

  moe_gather   dx[t] = sum of dxs over the rows that copy token t: an fp32 sum in ascending row
               order (index_put_ with accumulate, which CPU and CUDA run in a fixed order), rounded
               once to x's dtype.
  moe_combine  dy[r] = w * dout[token of r] (the row's token and weight placed by pos, dout's
               rows gathered by moe_gather; the product in fp32, rounded once), dtopk_weights[t, k] = dout[t] . y[pos[t, k]]
               (row dot products in fp32), dshared = dresidual = dout; pos must place each row
               at most once (a plan's pos does).
  swiglu       swiglu_backward: one fused elementwise op giving [d gate | d up].
  moe_mm       dxs = moe_mm(dout, w^T) over the same tiles (moe_mm takes any strides: w's
               transpose is a view), dw = moe_mm_weight_grad(xs, dout): per-expert xs^T dout
               in fp32, in a fixed order.
  moe_qmm      dxs only: the weights are frozen bytes (uint8 cannot require grad); dxs =
               dout @ dequantize(w_q[e]) with the experts dequantized a bounded slice at a
               time (never the whole stack at once), the products in fp32, rounded once.
               activation_quant="q8" passes the gradient straight through the rounding of xs.

moe_plan is not differentiable (csrc/autograd_skip.cpp); swiglu_backward and moe_mm_weight_grad
(the formulas' own ops) and every _out form refuse gradients. No formula has a double backward.
Every reduction has a fixed order and no atomics: the same inputs give the same gradient bytes.
"""
import torch

# Bytes of fp32 dequantized weights moe_qmm's backward holds at once (a slice of experts).
QMM_BACKWARD_CHUNK_BYTES = 256 << 20


def _arg(inputs, i, default=None):
    """Argument i of an op call: the dispatcher leaves out trailing arguments at their default."""
    return inputs[i] if i < len(inputs) else default


def _needs(ctx, i):
    """Whether the call's argument i needs a gradient (absent trailing arguments do not)."""
    return i < len(ctx.needs_input_grad) and ctx.needs_input_grad[i]


def _segment_sum_rows(src, index, n):
    """out[i] = sum of src rows r with index[r] == i, for i in [0, n); rows with index -1 add to
    none. fp32 sums in ascending row order (a deterministic accumulate on every backend)."""
    key = torch.where(index >= 0, index, n).long()
    out = src.new_zeros(n + 1, src.shape[1], dtype=torch.float32)
    out.index_put_((key,), src.float(), accumulate=True)
    return out[:n]


def _rows_of_pos(pos, values, n_rows, fill):
    """A [n_rows] tensor with values[t, k] at row pos[t, k] (rows pos never names hold `fill`)."""
    key = torch.where(pos >= 0, pos, n_rows).long().reshape(-1)
    out = torch.full((n_rows + 1,), fill, dtype=values.dtype, device=values.device)
    out.index_put_((key,), values.reshape(-1))
    return out[:n_rows]


def _gather_formula(ops):
    def setup_context(ctx, inputs, output):
        x, sorted_token = inputs[0], inputs[1]
        ctx.save_for_backward(sorted_token)
        ctx.x_rows, ctx.x_dtype, ctx.n_inputs = x.shape[0], x.dtype, len(inputs)

    def backward(ctx, grad):
        (sorted_token,) = ctx.saved_tensors
        dx = None
        if _needs(ctx, 0):
            dx = _segment_sum_rows(grad, sorted_token, ctx.x_rows).to(ctx.x_dtype)
        return (dx,) + (None,) * (ctx.n_inputs - 1)

    return setup_context, backward


def _combine_formula(ops):
    def setup_context(ctx, inputs, output):
        y, pos, topk_weights = inputs[:3]
        shared, residual = _arg(inputs, 3), _arg(inputs, 4)
        ctx.save_for_backward(y, pos, topk_weights)
        ctx.dtypes = [None if t is None else t.dtype for t in (y, shared, residual)]
        ctx.n_inputs = len(inputs)

    def backward(ctx, grad):
        y, pos, topk_weights = ctx.saved_tensors
        need_y, need_w, need_shared, need_residual = (_needs(ctx, i) for i in (0, 2, 3, 4))
        dy = dw = None
        if need_y or need_w:
            T, K = pos.shape
            R = y.shape[0]
            tokens = torch.arange(T, dtype=torch.int32, device=pos.device)
            row_token = _rows_of_pos(pos, tokens[:, None].expand(T, K), R, -1)
            # dout's rows copied in its own dtype (exact); the products below widen them to
            # fp32 as they read them (type promotion), so each is an fp32 product, rounded once.
            grad_rows = ops.moe_gather(grad, row_token)
            if need_y:
                row_weight = _rows_of_pos(pos, topk_weights.float(), R, 0.0)
                dy = (grad_rows * row_weight[:, None]).to(ctx.dtypes[0])
            if need_w:
                row_dot = (grad_rows * y.float()).sum(dim=1)
                row_dot = torch.cat([row_dot, row_dot.new_zeros(1)])  # slots with pos -1: 0
                dw = row_dot[torch.where(pos >= 0, pos, R).long()].to(topk_weights.dtype)
        dshared = grad.to(ctx.dtypes[1]) if need_shared else None
        dresidual = grad.to(ctx.dtypes[2]) if need_residual else None
        return (dy, None, dw, dshared, dresidual, None)[:ctx.n_inputs]

    return setup_context, backward


def _swiglu_formula(ops):
    def setup_context(ctx, inputs, output):
        gate, up = inputs[0], _arg(inputs, 1)
        activation = _arg(inputs, 3, "silu")
        ctx.save_for_backward(gate, up)
        ctx.activation, ctx.n_inputs = activation, len(inputs)

    def backward(ctx, grad):
        gate, up = ctx.saved_tensors
        d = ops.swiglu_backward(grad, gate, up, activation=ctx.activation)
        if up is None:
            return (d,) + (None,) * (ctx.n_inputs - 1)
        inner = gate.shape[1]
        return (d[:, :inner], d[:, inner:]) + (None,) * (ctx.n_inputs - 2)

    return setup_context, backward


def _moe_mm_formula(ops):
    def setup_context(ctx, inputs, output):
        xs, w, tile_expert, tile_m = inputs[:4]
        ctx.save_for_backward(xs, w, tile_expert)
        ctx.tile_m, ctx.n_inputs = tile_m, len(inputs)

    def backward(ctx, grad):
        xs, w, tile_expert = ctx.saved_tensors
        dxs = dw = None
        if _needs(ctx, 0):
            dxs = ops.moe_mm(grad, w.transpose(1, 2), tile_expert, ctx.tile_m)
        if _needs(ctx, 1):
            dw = ops.moe_mm_weight_grad(xs, grad, tile_expert, w.shape[0], ctx.tile_m)
        return (dxs, dw) + (None,) * (ctx.n_inputs - 2)

    return setup_context, backward


def _moe_qmm_formula(ops):
    def setup_context(ctx, inputs, output):
        xs, w_q, qtype, n_in, tile_expert, tile_m = inputs[:6]
        ctx.save_for_backward(w_q, tile_expert)
        ctx.qtype, ctx.n_in, ctx.tile_m = qtype, n_in, tile_m
        ctx.xs_dtype, ctx.n_inputs = xs.dtype, len(inputs)

    def backward(ctx, grad):
        w_q, tile_expert = ctx.saved_tensors
        if not _needs(ctx, 0):
            return (None,) * ctx.n_inputs
        E, N = w_q.shape[0], w_q.shape[1]
        per_chunk = max(1, QMM_BACKWARD_CHUNK_BYTES // max(1, N * ctx.n_in * 4))
        grad32 = grad.float()
        dxs = None
        for e0 in range(0, E, per_chunk):
            e1 = min(E, e0 + per_chunk)
            w = ops.dequantize(w_q[e0:e1], ctx.qtype, ctx.n_in)  # [e1 - e0, N, n_in] fp32
            owned = (tile_expert >= e0) & (tile_expert < e1)
            tiles = torch.where(owned, tile_expert - e0, -1).to(torch.int32)
            part = ops.moe_mm(grad32, w.transpose(1, 2), tiles, ctx.tile_m)
            dxs = part if dxs is None else dxs + part  # other slices' rows add exact zeros
        return (dxs.to(ctx.xs_dtype),) + (None,) * (ctx.n_inputs - 1)

    return setup_context, backward


FORMULAS = {
    "moe_gather": _gather_formula,
    "moe_combine": _combine_formula,
    "swiglu": _swiglu_formula,
    "moe_mm": _moe_mm_formula,
    "moe_qmm": _moe_qmm_formula,
}


def register_formulas(lib: str) -> None:
    """Registers the backward formulas of op library `lib` (`argon`, or a test module's library
    of the same op table), each computed with that library's own ops."""
    from .ops import OpSet

    ops = OpSet(getattr(torch.ops, lib))
    for name, formula in FORMULAS.items():
        setup_context, backward = formula(ops)
        torch.library.register_autograd(f"{lib}::{name}", backward, setup_context=setup_context)
