"""The whole MoE layer as functions: route, plan, gather, gate/up GEMM, SwiGLU, down GEMM,
combine (+ a gated shared expert, + a residual). Every step is an argon op or a plain torch op
with static output sizes, so torch.compile(fullgraph=True) traces it end to end and CUDA graphs
capture it (no host sync).

Expert weights come as one expert-weights object (weights.py: DenseExperts, or a quantized one),
or as the pair (w_gate_up, w_down) of float stacks in transformers' layout: w_gate_up [E, 2I, H]
(each expert's gate rows, then its up rows) and w_down [E, H, I], any strides. Which kernels run
them, and with what tile_m, is paths.choose_experts_path's decision.
"""
import math
import threading

import torch
import torch.nn.functional as F

from . import triton_ops
from .ops import argon_ops
from .paths import choose_experts_path
from .routing import check_router, route
from .weights import as_expert_weights


def moe_experts(x, topk_ids, topk_weights, experts, *, tile_m=None, shared=None, residual=None,
                ops=argon_ops, path="auto", activation="silu", out_dtype=None):
    """The experts of a routed layer: plan, gather, gate/up moe_mm, swiglu, down moe_mm,
    combine. x [T, H]; topk_ids [T, K] (ids in [0, E) or -1: skipped), topk_weights [T, K].
    experts: an expert-weights object or (w_gate_up, w_down) (see the module docstring).
    shared, residual: optional [T, H] added in the combine (fp32, before the one rounding).
    tile_m: rows per GEMM tile; None picks one for the path taken.
    path: "auto", "triton" or "ops" (see paths.py).
    activation: of the gated epilogue: "silu" (SwiGLU), "gelu" or "gelu_tanh" (GeGLU).
    out_dtype: the combine's one rounding goes to this dtype (default x's; float32 keeps the
        unrounded sum, as the expert-parallel layer's partial sums need).
    Returns [T, H] in out_dtype.
    """
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [T, H], got shape {tuple(x.shape)}")
    experts = as_expert_weights(experts)
    experts.check(x.shape[1])
    if topk_ids.dim() != 2 or topk_ids.shape[0] != x.shape[0]:
        raise ValueError(f"topk_ids must be [T={x.shape[0]}, K], got {tuple(topk_ids.shape)}")
    chosen = choose_experts_path(x, experts, ops, n_entries=topk_ids.numel(), tile_m=tile_m,
                                 path=path)
    if chosen.name == "triton":
        kw = dict(tile_m=chosen.tile_m, shared=shared, residual=residual, ops=ops,
                  activation=activation)
        if experts.kind == "quantized":
            return triton_ops.moe_experts_triton_quant(x, topk_ids, topk_weights, experts, **kw)
        return triton_ops.moe_experts_triton(x, topk_ids, topk_weights, experts.gate_up,
                                             experts.down, **kw)
    plan = ops.moe_plan(topk_ids, topk_weights, experts.n_experts, chosen.tile_m)
    if experts.kind == "dense" and _cpu_workspace_applies(x, experts, ops):
        xs = ops.moe_gather(x, plan, out=_CPU_WORKSPACE.buffer("xs", (plan.sorted_token.shape[0],
                                                                      x.shape[1]), x.dtype))
    else:
        xs = ops.moe_gather(x, plan)
    if experts.kind == "quantized":
        h = _quantized_gate_up(ops, xs, experts, plan, activation)
        y = ops.moe_qmm(h, experts.down.data, experts.down.qtype, experts.down.n_in, plan)
    elif _cpu_workspace_applies(x, experts, ops):
        y = _dense_experts_cpu(ops, x, xs, experts, plan, activation)
    else:
        h = ops.swiglu(ops.moe_mm(xs, experts.gate_up, plan), activation=activation)
        y = ops.moe_mm(h, experts.down, plan)
    return ops.moe_combine(y, plan, topk_weights, shared=shared, residual=residual,
                           out_dtype=out_dtype or x.dtype)


class _CpuWorkspace(threading.local):
    """The CPU experts path's intermediates (gathered rows, gate/up, SwiGLU, down outputs), kept
    from one layer call to the next, one set per Python thread.

    Why: at T*K = 16384 rows each of them is 8 to 64 MB, above glibc's largest mmap threshold
    (32 MB), so a fresh tensor is fresh pages on every call: the kernel zeroes and maps them
    (page faults) before our kernels write a byte. Measured (bench/cpu_experts_notes.md): the
    gather into a fresh tensor takes 4-5x as long as into a reused one, and the layer at
    T = 2048 about 1.2x as long. A per-expert loop allocates a few small tensors per expert
    that malloc recycles, so it never pays this. None of these buffers leaves the layer (the
    combine writes a fresh output), so reusing them is invisible to the caller; they hold the
    largest shapes seen until clear_cpu_workspace()."""

    def __init__(self):
        self.buffers = {}

    def buffer(self, role, shape, dtype):
        numel = math.prod(shape)
        key = (role, dtype, torch.is_inference_mode_enabled())  # inference tensors stay inside
        buf = self.buffers.get(key)
        if buf is None or buf.numel() < numel:
            self.buffers[key] = None  # free the old one before taking the new
            buf = self.buffers[key] = torch.empty(numel, dtype=dtype)
        return buf[:numel].view(shape)


_CPU_WORKSPACE = _CpuWorkspace()


def clear_cpu_workspace():
    """Free the calling thread's CPU layer buffers (they are taken again on the next call)."""
    _CPU_WORKSPACE.buffers.clear()


def _cpu_workspace_applies(x, experts, ops):
    """Whether this call's intermediates may live in _CPU_WORKSPACE: dense experts on the CPU,
    through the argon op library (other OpSets get fresh tensors), eagerly (never while
    torch.compile traces), and with no autograd graph to record."""
    return (x.device.type == "cpu" and experts.kind == "dense"
            and getattr(ops, "ns", None) is torch.ops.argon
            and not torch.compiler.is_compiling()
            and not (torch.is_grad_enabled() and (
                x.requires_grad or experts.gate_up.requires_grad or experts.down.requires_grad)))


def _dense_experts_cpu(ops, x, xs, experts, plan, activation):
    """Gate/up moe_mm, SwiGLU and down moe_mm into _CPU_WORKSPACE's buffers; returns y."""
    rows, inter = xs.shape[0], experts.inter
    ws = _CPU_WORKSPACE
    gate_up = ops.moe_mm(xs, experts.gate_up, plan,
                         out=ws.buffer("gate_up", (rows, 2 * inter), xs.dtype))
    h = ops.swiglu(gate_up, activation=activation, out=ws.buffer("h", (rows, inter), xs.dtype))
    return ops.moe_mm(h, experts.down, plan,
                      out=ws.buffer("y", (rows, experts.down.shape[1]), xs.dtype))


def _quantized_gate_up(ops, xs, experts, plan, activation):
    """act(gate) * up of quantized experts on the ops path: one moe_qmm over the concatenated
    gate_up rows, or one each for gate and up when their formats differ."""
    def qmm(w):
        return ops.moe_qmm(xs, w.data, w.qtype, w.n_in, plan)

    if experts.fused:
        return ops.swiglu(qmm(experts.gate_up), activation=activation)
    return ops.swiglu(qmm(experts.gate), qmm(experts.up), activation=activation)


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


def moe_layer(x, router_weight, experts, top_k, *, scoring="softmax", renormalize=False,
              tile_m=None, shared=None, residual=None, shared_expert_weights=None,
              shared_expert_gate=None, ops=argon_ops, path="auto", topk="auto",
              activation="silu"):
    """One sparse MoE layer on x [T, H].

    router_weight: [E, H]. experts: an expert-weights object (DenseExperts, a quantized one) or
    the pair (w_gate_up [E, 2I, H], gate rows then up rows; w_down [E, H, I]).
    scoring: "softmax" or "sigmoid"; renormalize: divide the top-k weights by their sum.
    shared: an optional precomputed [T, H] tensor added in the combine; or
    shared_expert_weights: (w_gate [Is, H], w_up [Is, H], w_down [H, Is]) of a shared expert
        computed here, scaled by sigmoid(x @ shared_expert_gate^T) when that [1, H] is given.
    residual: optional [T, H] added in the combine.
    ops: the OpSet to run on (the package default dispatches by device).
    path: "auto", "triton" or "ops": how the experts run (see moe_experts).
    topk: "auto", "torch" or "triton": the router's top-k (see routing.topk_experts).
    activation: of the experts' (and the shared expert's) gated epilogue: "silu", "gelu" or
        "gelu_tanh".
    """
    check_router(x, router_weight, top_k)
    experts = as_expert_weights(experts)
    experts.check(x.shape[-1])
    if router_weight.shape[0] != experts.n_experts:
        raise ValueError(f"router_weight has {router_weight.shape[0]} rows (one per expert) but "
                         f"the expert stacks hold {experts.n_experts} experts")
    if shared_expert_weights is not None:
        if shared is not None:
            raise ValueError("pass either shared (a tensor) or shared_expert_weights, not both")
        shared = shared_expert(x, *shared_expert_weights, shared_expert_gate, ops=ops,
                               activation=activation)
    topk_ids, topk_weights = route(x, router_weight, top_k, scoring=scoring,
                                   renormalize=renormalize, topk=topk)
    return moe_experts(x, topk_ids, topk_weights, experts, tile_m=tile_m, shared=shared,
                       residual=residual, ops=ops, path=path, activation=activation)
