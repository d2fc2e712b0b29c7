"""The whole MoE layer as functions: route, plan, gather, gate/up GEMM, SwiGLU, down GEMM,
combine (+ a gated shared expert, + a residual). Every step is an argon op or a plain torch op
with static output sizes, so torch.compile(fullgraph=True) traces it end to end and CUDA graphs
capture it (no host sync).

Expert weights come as one expert-weights object (weights.py: DenseExperts, or a quantized one),
or as the pair (w_gate_up, w_down) of float stacks in transformers' layout: w_gate_up [E, 2I, H]
(each expert's gate rows, then its up rows) and w_down [E, H, I], any strides. Which
implementation runs them, and with what tile_m, is the experts registry's choice
(torch_argon/experts: `explain` says why each implementation runs a call or not); the flow around
it (plan, gather, combine) is experts/flow.py's, the same for every entry.

Each public function here checks its arguments once, naming them, before any work.
"""
import torch
import torch.nn.functional as F

from .experts import flow, registry
from .experts.arguments import check_addends, check_experts_arguments, check_options
from .experts.base import ExpertsCall
from .experts.cpu_workspace import clear_cpu_workspace  # noqa: F401  (the layer's API)
from .ops import argon_ops
from .routing import check_router, route_checked
from .weights import as_expert_weights


def moe_experts(x, topk_ids, topk_weights, experts, *, tile_m=None, shared=None, residual=None,
                ops=argon_ops, path="auto", activation="silu", out_dtype=None,
                activation_quant="auto"):
    """The experts of a routed layer: plan, gather, gate/up GEMM, swiglu, down GEMM,
    combine. x [T, H]; topk_ids [T, K] (ids in [0, E) or -1: skipped), topk_weights [T, K].
    experts: an expert-weights object or (w_gate_up, w_down) (see the module docstring); dense
        stacks must have x's dtype and device.
    shared, residual: optional [T, H] added in the combine (fp32, before the one rounding).
    tile_m: rows per GEMM tile; None lets the implementation that runs the call pick it.
    path: "auto" (the first implementation that supports the call), "triton" or "ops" (the
        first of that family), or an implementation's name (torch_argon.experts.PATHS).
    activation: of the gated epilogue: "silu" (SwiGLU), "gelu" or "gelu_tanh" (GeGLU).
    out_dtype: the combine's one rounding goes to this dtype (default x's; float32 keeps the
        unrounded sum, as the expert-parallel layer's partial sums need).
    activation_quant: "auto", "none" or "q8": whether quantized experts quantize the
        activations to 8-bit blocks ("auto": the weights' own setting, else the
        implementation's default: "none" on every one; "q8" runs on cuda_quantized).
    Returns [T, H] in out_dtype.
    """
    weights = as_expert_weights(experts)
    check_experts_arguments(x, topk_ids, topk_weights, weights, shared=shared, residual=residual,
                            activation=activation, activation_quant=activation_quant)
    call = ExpertsCall.of(x, weights, ops=ops, tile_m=tile_m, activation=activation,
                          activation_quant=activation_quant, n_entries=topk_ids.numel(),
                          routing=topk_weights)
    return flow.run(registry.choose(call, path), call, topk_ids, topk_weights, shared=shared,
                    residual=residual, out_dtype=out_dtype)


def shared_expert(x, w_gate, w_up, w_down, gate_weight=None, *, ops=argon_ops,
                  activation="silu"):
    """A dense gated expert every token goes through, optionally scaled by its own sigmoid gate
    (Qwen2-MoE, Qwen3-Next): sigmoid(x @ gate_weight^T) * down(act(gate(x)) * up(x)).

    w_gate, w_up: [Is, H]. w_down: [H, Is]. gate_weight: [1, H] or None.
    """
    h = ops.swiglu(F.linear(x, w_gate), F.linear(x, w_up), activation=activation)
    out = F.linear(h, w_down)
    if gate_weight is not None:
        out = torch.sigmoid(F.linear(x, gate_weight)) * out
    return out


def _check_shared_expert_weights(x, weights, gate):
    """The shared expert's weights take x: x's dtype and device (named by their place in
    shared_expert_weights, or as shared_expert_gate)."""
    named = [(f"shared_expert_weights[{i}]", w) for i, w in enumerate(weights)]
    named += [("shared_expert_gate", gate)] if gate is not None else []
    for name, w in named:
        if w.dtype != x.dtype or w.device != x.device:
            raise ValueError(f"{name} is {w.dtype} on {w.device} but x is {x.dtype} on "
                             f"{x.device}: the shared expert's weights must have x's dtype and "
                             "device")


def moe_layer(x, router_weight, experts, top_k, *, scoring="softmax", renormalize=False,
              tile_m=None, shared=None, residual=None, shared_expert_weights=None,
              shared_expert_gate=None, ops=argon_ops, path="auto", topk="auto",
              activation="silu", activation_quant="auto"):
    """One sparse MoE layer on x [T, H].

    router_weight: [E, H] of x's dtype and device. experts: an expert-weights object
    (DenseExperts, a quantized one) or the pair (w_gate_up [E, 2I, H], gate rows then up rows;
    w_down [E, H, I]); dense stacks of x's dtype and device.
    scoring: "softmax" or "sigmoid"; renormalize: divide the top-k weights by their sum.
    shared: an optional precomputed [T, H] tensor added in the combine; or
    shared_expert_weights: (w_gate [Is, H], w_up [Is, H], w_down [H, Is]) of a shared expert
        computed here, scaled by sigmoid(x @ shared_expert_gate^T) when that [1, H] is given.
    residual: optional [T, H] added in the combine.
    ops: the OpSet to run on (the package default dispatches by device).
    path: how the experts run (see moe_experts).
    topk: "auto", "torch" or "triton": the router's top-k (see routing.topk_experts).
    activation: of the experts' (and the shared expert's) gated epilogue: "silu", "gelu" or
        "gelu_tanh".
    activation_quant: "auto", "none" or "q8" (see moe_experts).
    """
    check_router(x, router_weight, top_k)
    weights = as_expert_weights(experts)
    weights.check_input(x)
    if router_weight.shape[0] != weights.n_experts:
        raise ValueError(f"router_weight has {router_weight.shape[0]} rows (one per expert) but "
                         f"the expert stacks hold {weights.n_experts} experts")
    check_addends(x, shared, residual)
    check_options(activation, activation_quant)
    if shared_expert_weights is not None:
        if shared is not None:
            raise ValueError("pass either shared (a tensor) or shared_expert_weights, not both")
        _check_shared_expert_weights(x, shared_expert_weights, shared_expert_gate)
    call = ExpertsCall.of(x, weights, ops=ops, tile_m=tile_m, activation=activation,
                          activation_quant=activation_quant, n_entries=x.shape[0] * top_k,
                          routing=router_weight)
    impl = registry.choose(call, path)
    if shared_expert_weights is not None:
        shared = shared_expert(x, *shared_expert_weights, shared_expert_gate, ops=ops,
                               activation=activation)
    topk_ids, topk_weights = route_checked(x, router_weight, top_k, scoring=scoring,
                                           renormalize=renormalize, topk=topk)
    return flow.run(impl, call, topk_ids, topk_weights, shared=shared, residual=residual)
