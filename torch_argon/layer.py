"""The whole MoE layer as one function: route, plan, gather, gate/up GEMM, SwiGLU, down GEMM,
combine. Every step is an argon op, so torch.compile(fullgraph=True) traces it end to end."""
from .ops import argon_ops
from .routing import route


def moe_layer(x, router_weight, w_gate_up, w_down, top_k, *, scoring="softmax",
              renormalize=False, tile_m=16, shared=None, residual=None, ops=argon_ops):
    """One sparse MoE layer on x [T, H].

    router_weight: [E, H]. w_gate_up: [E, 2I, H], gate rows then up rows. w_down: [E, H, I].
    shared, residual: optional [T, H] tensors added in the combine (fp32, before rounding).
    ops: the OpSet to run on (the package default dispatches by device).
    """
    topk_ids, topk_weights = route(x, router_weight, top_k, scoring=scoring,
                                   renormalize=renormalize)
    plan = ops.moe_plan(topk_ids, topk_weights, w_gate_up.shape[0], tile_m)
    xs = ops.moe_gather(x, plan)
    h = ops.swiglu(ops.moe_mm(xs, w_gate_up, plan))
    y = ops.moe_mm(h, w_down, plan)
    return ops.moe_combine(y, plan, topk_weights, shared=shared, residual=residual,
                           out_dtype=x.dtype)
