"""The whole MoE layer as functions: route, plan, gather, gate/up GEMM, SwiGLU, down GEMM,
combine (+ a gated shared expert, + a residual). Every step is an argon op or a plain torch op
with static output sizes, so torch.compile(fullgraph=True) traces it end to end and CUDA graphs
capture it (no host sync).

Expert weights in the layout transformers stores them: w_gate_up [E, 2I, H] (each expert's gate
rows, then its up rows) and w_down [E, H, I]. Any strides: a stack stored [E, H, 2I] is passed
as w.transpose(1, 2), with no copy (moe_mm reads through the strides).
"""
import torch
import torch.nn.functional as F

from . import triton_ops
from .ops import argon_ops
from .routing import route

PATHS = ("auto", "triton", "ops")


def check_expert_weights(x, w_gate_up, w_down):
    """Raises a ValueError naming the first shape that does not fit x [T, H]."""
    H = x.shape[-1]
    if w_gate_up.dim() != 3 or w_gate_up.shape[2] != H or w_gate_up.shape[1] % 2:
        raise ValueError(f"w_gate_up must be [E, 2I, H={H}] (gate rows, then up rows), "
                         f"got {tuple(w_gate_up.shape)}")
    E, two_i = w_gate_up.shape[0], w_gate_up.shape[1]
    if tuple(w_down.shape) != (E, H, two_i // 2):
        raise ValueError(f"w_down must be [E, H, I] = [{E}, {H}, {two_i // 2}], "
                         f"got {tuple(w_down.shape)}")


def default_tile_m(device):
    """Rows per GEMM tile when the caller gives none: 16 on GPUs (the grouped GEMMs' M tile);
    1 on the CPU, where each expert's rows go to torch's matmul whole and padding is waste."""
    return 1 if torch.device(device).type == "cpu" else 16


def triton_path_refusal(x, w_gate_up, w_down, ops, tile_m):
    """Why the Triton GEMMs cannot run this call ("" when they can): they need CUDA tensors in
    fp16 / bf16, Triton, the argon op library (another OpSet means the caller wants its ops),
    and a tile_m that is None or a power of two >= 16."""
    if not triton_ops.AVAILABLE:
        return triton_ops.REASON
    if not x.is_cuda:
        return "the Triton GEMMs run on CUDA tensors only"
    if x.dtype not in (torch.float16, torch.bfloat16) or not (
            w_gate_up.dtype == w_down.dtype == x.dtype):
        return "the Triton GEMMs need x and both weight stacks in the same fp16 / bf16 dtype"
    if getattr(ops, "ns", None) is not torch.ops.argon:
        return "an OpSet other than the argon library was passed"
    if tile_m is not None and (tile_m < 16 or tile_m & (tile_m - 1)):
        return f"tile_m={tile_m}: the Triton GEMMs need a power of two >= 16"
    return ""


def moe_experts(x, topk_ids, topk_weights, w_gate_up, w_down, *, tile_m=None, shared=None,
                residual=None, ops=argon_ops, path="auto"):
    """The experts of a routed layer: plan, gather, gate/up moe_mm, swiglu, down moe_mm,
    combine. x [T, H]; topk_ids [T, K] (ids in [0, E) or -1: skipped), topk_weights [T, K].
    shared, residual: optional [T, H] added in the combine (fp32, before the one rounding).
    tile_m: rows per GEMM tile; None picks one for the path taken.
    path: "triton": the Triton GEMMs (gather and swiglu fused in; triton_ops/), an error where
    they cannot run; "ops": the ops of `ops`, one per stage; "auto" (default): triton where
    triton_path_refusal() has no objection, else ops.
    Returns [T, H] in x's dtype.
    """
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    if path != "ops":
        refusal = triton_path_refusal(x, w_gate_up, w_down, ops, tile_m)
        if not refusal:
            return triton_ops.moe_experts_triton(x, topk_ids, topk_weights, w_gate_up, w_down,
                                                 tile_m=tile_m, shared=shared,
                                                 residual=residual, ops=ops)
        if path == "triton":
            raise ValueError(f"path='triton' cannot run here: {refusal}")
    if tile_m is None:
        tile_m = default_tile_m(x.device)
    plan = ops.moe_plan(topk_ids, topk_weights, w_gate_up.shape[0], tile_m)
    xs = ops.moe_gather(x, plan)
    h = ops.swiglu(ops.moe_mm(xs, w_gate_up, plan))
    y = ops.moe_mm(h, w_down, plan)
    return ops.moe_combine(y, plan, topk_weights, shared=shared, residual=residual,
                           out_dtype=x.dtype)


def shared_expert(x, w_gate, w_up, w_down, gate_weight=None, *, ops=argon_ops):
    """A dense SwiGLU expert every token goes through, optionally scaled by its own sigmoid gate
    (Qwen2-MoE, Qwen3-Next): sigmoid(x @ gate_weight^T) * down(silu(gate(x)) * up(x)).

    w_gate, w_up: [Is, H]. w_down: [H, Is]. gate_weight: [1, H] or None.
    """
    h = ops.swiglu(F.linear(x, w_gate), F.linear(x, w_up))
    out = F.linear(h, w_down)
    if gate_weight is not None:
        out = torch.sigmoid(F.linear(x, gate_weight)) * out
    return out


def moe_layer(x, router_weight, w_gate_up, w_down, top_k, *, scoring="softmax",
              renormalize=False, tile_m=None, shared=None, residual=None, shared_expert_weights=None,
              shared_expert_gate=None, ops=argon_ops, path="auto", topk="auto"):
    """One sparse MoE layer on x [T, H].

    router_weight: [E, H]. w_gate_up: [E, 2I, H], gate rows then up rows. w_down: [E, H, I].
    scoring: "softmax" or "sigmoid"; renormalize: divide the top-k weights by their sum.
    shared: an optional precomputed [T, H] tensor added in the combine; or
    shared_expert_weights: (w_gate [Is, H], w_up [Is, H], w_down [H, Is]) of a shared expert
        computed here, scaled by sigmoid(x @ shared_expert_gate^T) when that [1, H] is given.
    residual: optional [T, H] added in the combine.
    ops: the OpSet to run on (the package default dispatches by device).
    path: "auto", "triton" or "ops": how the experts run (see moe_experts).
    topk: "auto", "torch" or "triton": the router's top-k (see routing.topk_experts).
    """
    check_expert_weights(x, w_gate_up, w_down)
    if shared_expert_weights is not None:
        if shared is not None:
            raise ValueError("pass either shared (a tensor) or shared_expert_weights, not both")
        shared = shared_expert(x, *shared_expert_weights, shared_expert_gate, ops=ops)
    topk_ids, topk_weights = route(x, router_weight, top_k, scoring=scoring,
                                   renormalize=renormalize, topk=topk)
    return moe_experts(x, topk_ids, topk_weights, w_gate_up, w_down, tile_m=tile_m,
                       shared=shared, residual=residual, ops=ops, path=path)
