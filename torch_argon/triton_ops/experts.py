"""The routed experts on the Triton path: plan -> fused gather + gate/up GEMM + SwiGLU ->
down GEMM -> the argon combine. Two GEMM launches instead of gather, gate/up moe_mm, swiglu and
down moe_mm; the [R, 2I] gate/up intermediate and the gathered copy of x are never written."""

from .ops import moe_gate_up_swiglu_triton, moe_mm_triton


def moe_experts_triton(x, topk_ids, topk_weights, w_gate_up, w_down, *, tile_m, shared=None,
                       residual=None, ops, activation="silu", out_dtype=None):
    """Same contract as layer.moe_experts, for dense stacks w_gate_up [E, 2I, H] and
    w_down [E, H, I]. tile_m: a power of two >= 16 (paths.choose_experts_path picks it)."""
    E = w_gate_up.shape[0]
    plan = ops.moe_plan(topk_ids, topk_weights, E, tile_m)
    h = moe_gate_up_swiglu_triton(x, w_gate_up, plan.tile_expert, plan.meta, tile_m,
                                  plan.sorted_token, zero_unused=False, activation=activation)
    y = moe_mm_triton(h, w_down, plan.tile_expert, plan.meta, tile_m, zero_unused=False,
                      row_token=plan.sorted_token)  # padding rows may be skipped
    return ops.moe_combine(y, plan, topk_weights, shared=shared, residual=residual,
                           out_dtype=out_dtype or x.dtype)
