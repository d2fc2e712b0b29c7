"""The contract (docs/contract.md) in plain torch: slow, obvious, and the yardstick for every
backend. Each function takes and returns what the public op of the same name does.
"""
import torch

from . import activations
from ._shapes import META_SIZE, plan_rows
from .plan import MoEPlan
from .quant import dequantize_reference
from .quant.activation_q8 import check_activation_quant, q8_activations


def _check_ids(topk_ids, n_expert):
    bad = (topk_ids < -1) | (topk_ids >= n_expert)
    if bool(bad.any()):
        t, k = (int(v) for v in bad.nonzero()[0])
        raise ValueError(
            f"topk_ids[{t}, {k}] = {int(topk_ids[t, k])} is out of range: "
            f"ids must be in [0, n_expert={n_expert}) or -1 (skipped)"
        )


def moe_plan(topk_ids, topk_weights, n_expert, tile_m=16) -> MoEPlan:
    T, K = topk_ids.shape
    E, tm = n_expert, tile_m
    dev = topk_ids.device
    _check_ids(topk_ids, E)
    ids = topk_ids.reshape(-1).long()
    w = topk_weights.reshape(-1).float()
    R = plan_rows(T, K, E, tm)

    # Valid entries in ascending flat index, then stably sorted by expert.
    entries = (ids >= 0).nonzero().reshape(-1)
    order = entries[torch.argsort(ids[entries], stable=True)]
    expert = ids[order]

    counts = torch.bincount(ids[entries], minlength=E)
    padded = (counts + tm - 1) // tm * tm
    offsets = torch.cat([torch.zeros(1, dtype=torch.long, device=dev), padded.cumsum(0)])
    first_in_sorted = counts.cumsum(0) - counts  # where expert e starts in `order`
    rank = torch.arange(order.numel(), device=dev) - first_in_sorted[expert]
    rows = offsets[expert] + rank

    sorted_token = torch.full((R,), -1, dtype=torch.int32, device=dev)
    sorted_token[rows] = (order // K).int()
    sorted_weight = torch.zeros(R, dtype=torch.float32, device=dev)
    sorted_weight[rows] = w[order]
    pos = torch.full((T * K,), -1, dtype=torch.int32, device=dev)
    pos[order] = rows.int()

    n_rows = int(offsets[-1])
    tile_expert = torch.full((R // tm,), -1, dtype=torch.int32, device=dev)
    tile_expert[: n_rows // tm] = torch.repeat_interleave(
        torch.arange(E, dtype=torch.int32, device=dev), padded // tm
    )
    meta = torch.tensor([n_rows, n_rows // tm, order.numel(), 0], dtype=torch.int32, device=dev)
    assert meta.numel() == META_SIZE
    return MoEPlan(
        counts.int(), offsets.int(), sorted_token, sorted_weight, pos.view(T, K), tile_expert,
        meta, tm,
    )


def moe_gather(x, sorted_token, out_dtype=None):
    out = torch.zeros(sorted_token.shape[0], x.shape[1], dtype=out_dtype or x.dtype, device=x.device)
    rows = sorted_token >= 0
    out[rows] = x[sorted_token[rows].long()].to(out.dtype)
    return out


def moe_combine(y, pos, topk_weights, shared=None, residual=None, out_dtype=None):
    T, K = pos.shape
    acc = torch.zeros(T, y.shape[1], dtype=torch.float32, device=y.device)
    for k in range(K):  # ascending k, fp32, one rounding per step
        valid = (pos[:, k] >= 0)[:, None]
        term = topk_weights[:, k, None].float() * y[pos[:, k].clamp(min=0).long()].float()
        acc = torch.where(valid, acc + term, acc)
    if shared is not None:
        acc = acc + shared.float()
    if residual is not None:
        acc = acc + residual.float()
    return acc.to(out_dtype or y.dtype)


ACTIVATIONS = activations.REFERENCE


def swiglu(gate, up=None, out_dtype=None, activation="silu"):
    activations.check(activation)
    if up is None:
        gate, up = gate.chunk(2, dim=-1)
    return (ACTIVATIONS[activation](gate.float()) * up.float()).to(out_dtype or gate.dtype)


def swiglu_backward(grad_out, gate, up=None, activation="silu"):
    """[d gate | d up] of swiglu, [R, 2I] in gate's dtype: grad_out * up * act'(gate) and
    grad_out * act(gate), in float64, rounded once."""
    activations.check(activation)
    if up is None:
        gate, up = gate.chunk(2, dim=-1)
    g, u, dy = gate.double(), up.double(), grad_out.double()
    a = ACTIVATIONS[activation](g)
    da = activations.DERIVATIVE[activation](g)
    return torch.cat([dy * u * da, dy * a], dim=-1).to(gate.dtype)


def moe_mm(xs, w, tile_expert, tile_m):
    out = torch.zeros(xs.shape[0], w.shape[1], dtype=xs.dtype, device=xs.device)
    row_expert = tile_expert.long().repeat_interleave(tile_m)
    for e in row_expert.unique().tolist():
        if e < 0:
            continue
        rows = row_expert == e
        out[rows] = (xs[rows].double() @ w[e].double().T).to(xs.dtype)
    return out


def moe_mm_weight_grad(xs, grad_out, tile_expert, tile_m, n_expert):
    """out[e] = sum over the rows of tiles of expert e of grad_out[r]^T xs[r], [E, N, Kd] in
    xs's dtype (float64 sums, rounded once); experts without tiles get zeros."""
    out = torch.zeros(n_expert, grad_out.shape[1], xs.shape[1], dtype=torch.float64,
                      device=xs.device)
    row_expert = tile_expert.long().repeat_interleave(tile_m)
    for e in row_expert.unique().tolist():
        if e < 0:
            continue
        if e >= n_expert:
            j = int((tile_expert == e).nonzero()[0])
            raise ValueError(f"tile_expert[{j}] = {e} is out of range: expected -1 or an expert "
                             f"in [0, n_expert={n_expert})")
        rows = row_expert == e
        out[e] = grad_out[rows].double().T @ xs[rows].double()
    return out.to(xs.dtype)


def dequantize(w_q, qtype, n_in):
    return dequantize_reference(w_q, qtype, n_in)


def moe_qmm(xs, w_q, qtype, n_in, tile_expert, tile_m, activation_quant="none"):
    """moe_mm with the weights dequantized (exactly, float32) first: the products and sums in
    float64, rounded once to xs's dtype. activation_quant="q8": xs is first replaced by its
    8-bit block quantization d * q (quant/activation_q8.py), as the integer kernels see it."""
    check_activation_quant(activation_quant)
    a = q8_activations(xs) if activation_quant == "q8" else xs
    out = torch.zeros(xs.shape[0], w_q.shape[1], dtype=xs.dtype, device=xs.device)
    row_expert = tile_expert.long().repeat_interleave(tile_m)
    for e in row_expert.unique().tolist():
        if e < 0:
            continue
        rows = row_expert == e
        w = dequantize_reference(w_q[e], qtype, n_in)
        out[rows] = (a[rows].double() @ w.double().T).to(xs.dtype)
    return out


def moe_layer(x, router_weight, experts, top_k, *, scoring="softmax", renormalize=False,
              shared=None, residual=None, topk_ids=None, topk_weights=None, activation="silu",
              activation_quant="none"):
    """The whole layer, one expert at a time in float64: the ground truth for moe_layer.
    experts: as moe_layer takes them (an expert-weights object or (w_gate_up, w_down)); quantized
    experts are dequantized first. activation_quant="q8": each GEMM's activations (x's rows,
    then h rounded to float32) replaced by their 8-bit block quantization, as moe_qmm's q8
    kernels see them.

    Routing is shared with the fast layer (routing.route) unless ids and weights are given, so
    ties in the router's top-k cannot make the two disagree.
    """
    from .routing import route
    from .weights import as_expert_weights

    check_activation_quant(activation_quant)
    dense = as_expert_weights(experts).to_dense()
    w_gate_up, w_down = dense.gate_up, dense.down

    if topk_ids is None:
        topk_ids, topk_weights = route(x, router_weight, top_k, scoring=scoring,
                                       renormalize=renormalize)
    T, H = x.shape
    inter = w_down.shape[2]
    acc = torch.zeros(T, H, dtype=torch.float64, device=x.device)
    for e in topk_ids[topk_ids >= 0].unique().tolist():
        t, k = (topk_ids == e).nonzero(as_tuple=True)
        a = x[t].double() if activation_quant == "none" else q8_activations(x[t].float())
        gu = a @ w_gate_up[e].double().T
        h = ACTIVATIONS[activation](gu[:, :inter]) * gu[:, inter:]
        if activation_quant == "q8":
            h = q8_activations(h.float())
        acc.index_add_(0, t, topk_weights[t, k, None].double() * (h @ w_down[e].double().T))
    if shared is not None:
        acc += shared.double()
    if residual is not None:
        acc += residual.double()
    return acc.to(x.dtype)
