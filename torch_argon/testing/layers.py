"""Synthetic MoE layers and their stages: what the main job (python -m torch_argon) and
bench/bench_layer.py build, check and time, written once.

- make_layer: x, router and expert stacks of a layer config, seeded, every stage's values O(1).
- experts_path: the path ("triton" or "ops") and tile_m the layer takes for a call: the one
  place the harness asks the library's path choice.
- argon_stages: the layer's stages along a path, each on the intermediates of one layer call,
  each with the plain-torch stage it replaces on the same plan (its baseline).
- torch_layer_stages: the best plain-torch layer (argsort + torch._grouped_mm), stage by stage.
- layer_baselines: whole plain-torch layers (that one, and the per-expert loop).
- quantized_experts: the layer's experts as synthetic GGUF blocks of a format.
- relative_error, plan_matches_reference, float64_error: the parity checks.
"""
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Optional

import torch

from .. import reference
from ..layer import moe_layer
from ..experts import choose
from ..routing import route
from ..weights import DenseExperts
from . import baselines

# Display names of the stages (the main job's table); the keys are the bench records' names.
STAGE_LABELS = {"route": "route", "plan": "plan", "gather": "gather",
                "gate_up_mm": "gate/up GEMM", "swiglu": "SwiGLU",
                "gate_up_swiglu": "gather + gate/up GEMM + SwiGLU", "down_mm": "down GEMM",
                "combine": "combine", "layer": "whole layer"}


@dataclass
class Layer:
    """One MoE layer's inputs: x [T, H], router_weight [E, H], w_gate_up [E, 2I, H] (gate rows,
    then up rows) and w_down [E, H, I], routed top_k of E."""
    x: torch.Tensor
    router_weight: torch.Tensor
    w_gate_up: torch.Tensor
    w_down: torch.Tensor
    top_k: int

    @property
    def T(self):
        return self.x.shape[0]

    @property
    def E(self):
        return self.w_gate_up.shape[0]

    @property
    def H(self):
        return self.x.shape[1]

    @property
    def I(self):  # noqa: E743 (the expert width, as in the docs' formulas)
        return self.w_down.shape[2]

    @cached_property
    def experts(self):
        return DenseExperts(self.w_gate_up, self.w_down)

    @property
    def weight_bytes(self):
        """Bytes of the two expert stacks as stored."""
        return (self.w_gate_up.numel() + self.w_down.numel()) * self.w_gate_up.element_size()


def make_layer(T, E, K, H, I, dtype, device, *, dist="uniform", seed=0):
    """A layer drawn from a generator of `device` seeded with `seed` (the same values on every
    run), scaled so every stage's values are O(1): x ~ N(0, 1), router and gate/up rows
    N(0, 1/H), down rows N(0, 1/I). dist "skewed": a bias column makes expert popularity about
    Zipf(1.2); "uniform": none."""
    g = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape, scale):
        return (torch.randn(*shape, generator=g, device=device, dtype=torch.float32)
                * scale).to(dtype)

    x = randn(T, H, scale=1.0)
    router = randn(E, H, scale=H ** -0.5)
    if dist == "skewed":
        zipf = torch.arange(1, E + 1, device=device, dtype=torch.float32) ** -1.2
        x[:, 0] = 1
        router[:, 0] = (zipf / zipf.sum()).log().to(dtype)
    elif dist != "uniform":
        raise ValueError(f"dist must be uniform or skewed, got {dist!r}")
    w_gate_up = randn(E, 2 * I, H, scale=H ** -0.5)
    w_down = randn(E, H, I, scale=I ** -0.5)
    return Layer(x, router, w_gate_up, w_down, K)


@dataclass(frozen=True)
class ExpertsChoice:
    """How moe_layer runs a call's experts: the path that runs them, its tile_m, and why each
    path tried before it declined ({path: reason}), and the activation_quant mode it runs."""
    name: str
    tile_m: int
    declined: dict
    activation_quant: str = "none"


def experts_path(x, experts, ops, *, top_k, tile_m=None, path="auto"):
    """The ExpertsChoice moe_layer makes for x and these experts (path: "auto", a family or an
    implementation's name): the harness's one question to the experts registry, which
    decides. `name` is the family ("triton" or "ops") the tables group by; `declined` holds
    every implementation tried before the chosen one, with its reason."""
    chosen = choose(x, experts, n_entries=x.shape[0] * top_k, ops=ops, tile_m=tile_m, path=path)
    return ExpertsChoice(chosen.path, chosen.tile_m, dict(chosen.declined),
                         chosen.activation_quant)


def run_layer(layer, ops, path, tile_m, *, experts=None, topk="auto"):
    """One moe_layer call on the layer (or on other `experts` of its shape)."""
    return moe_layer(layer.x, layer.router_weight,
                     layer.experts if experts is None else experts, layer.top_k,
                     tile_m=tile_m, ops=ops, path=path, topk=topk)


@dataclass
class Baseline:
    name: str
    call: Callable
    capturable: bool = True  # False: it syncs with the host (no CUDA graph)


@dataclass
class Stage:
    call: Callable
    baseline: Optional[Baseline] = None  # the plain-torch stage it replaces, on the same plan
    weight_bytes: int = 0  # expert weight bytes a GEMM stage reads


def _touched_weight_bytes(plan, w):
    """Bytes of an expert stack that a GEMM over this plan reads."""
    return int((plan.counts > 0).sum()) * w[0].numel() * w.element_size()


def _grouped_mm_padded(a, w, plan):
    """torch._grouped_mm over the plan's padded groups (the rows an argon GEMM takes)."""
    return torch._grouped_mm(a, w.transpose(1, 2), offs=plan.offsets[1:])


def argon_stages(layer, ops, path, tile_m, *, topk="auto"):
    """{stage: Stage} of the layer along `path` ("ops": one argon op a stage; "triton": the
    gather and SwiGLU fused into the gate/up GEMM), each stage on the intermediates of one layer
    call (each stage runs once here to make the next one's inputs), and "layer": the whole
    moe_layer call. On the CPU the ops path's stages write into buffers kept across calls, as
    the layer's CPU workspace does, so the stages add up to the layer."""
    x, rw, wgu, wd, K = layer.x, layer.router_weight, layer.w_gate_up, layer.w_down, layer.top_k
    E, tm = layer.E, tile_m
    ids, weights = route(x, rw, K, topk=topk)
    plan = ops.moe_plan(ids, weights, E, tm)
    stages = {
        "route": Stage(lambda: route(x, rw, K, topk=topk),
                       Baseline("torch_topk", lambda: route(x, rw, K, topk="torch"))
                       if path == "triton" else None),
        "plan": Stage(lambda: ops.moe_plan(ids, weights, E, tm),
                      Baseline("torch_argsort",
                               lambda: baselines.plan_argsort(ids, weights, E, tm), False)),
    }
    grouped = hasattr(torch, "_grouped_mm")
    if path == "triton":
        from .. import triton_ops
        tiles = (plan.tile_expert, plan.meta, tm)

        def gate_up():
            return triton_ops.moe_gate_up_swiglu_triton(x, wgu, *tiles, plan.sorted_token,
                                                        zero_unused=False)

        def down():
            return triton_ops.moe_mm_triton(h, wd, *tiles, zero_unused=False,
                                            row_token=plan.sorted_token)

        def gate_up_torch():
            xs = baselines.gather_index_select(x, plan.sorted_token)
            return baselines.swiglu_torch(_grouped_mm_padded(xs, wgu, plan))

        h = gate_up()
        y = down()
        stages["gate_up_swiglu"] = Stage(
            gate_up, Baseline("torch_gather_grouped_mm_silu_mul", gate_up_torch),
            _touched_weight_bytes(plan, wgu))
    else:
        xs = ops.moe_gather(x, plan)
        gu = ops.moe_mm(xs, wgu, plan)
        h = ops.swiglu(gu)
        y = ops.moe_mm(h, wd, plan)
        out = (dict(gather=xs.clone(), gate_up_mm=gu.clone(), swiglu=h.clone(), down_mm=y.clone())
               if x.device.type == "cpu" else {})
        stages["gather"] = Stage(
            lambda: ops.moe_gather(x, plan, out=out.get("gather")),
            Baseline("torch_index_select",
                     lambda: baselines.gather_index_select(x, plan.sorted_token)))
        stages["gate_up_mm"] = Stage(
            lambda: ops.moe_mm(xs, wgu, plan, out=out.get("gate_up_mm")),
            Baseline("torch_grouped_mm", lambda: _grouped_mm_padded(xs, wgu, plan))
            if grouped else None, _touched_weight_bytes(plan, wgu))
        stages["swiglu"] = Stage(lambda: ops.swiglu(gu, out=out.get("swiglu")),
                                 Baseline("torch_silu_mul", lambda: baselines.swiglu_torch(gu)))

        def down():
            return ops.moe_mm(h, wd, plan, out=out.get("down_mm"))
    stages["down_mm"] = Stage(down, Baseline("torch_grouped_mm",
                                             lambda: _grouped_mm_padded(h, wd, plan))
                              if grouped else None, _touched_weight_bytes(plan, wd))
    stages["combine"] = Stage(
        lambda: ops.moe_combine(y, plan, weights, out_dtype=x.dtype),
        Baseline("torch_gather_sum", lambda: baselines.combine_torch(y, plan.pos, weights)))
    stages["layer"] = Stage(lambda: run_layer(layer, ops, path, tm, topk=topk))
    return stages


def torch_layer_stages(layer):
    """{stage: call} of the argsort + torch._grouped_mm layer (baselines.
    layer_argsort_grouped_mm) stage by stage on the layer's routing, and "layer": the whole of
    it; the GEMM stages and the whole layer only where torch offers torch._grouped_mm for this
    device and dtype."""
    x, rw, wgu, wd, K = layer.x, layer.router_weight, layer.w_gate_up, layer.w_down, layer.top_k
    ids, w = route(x, rw, K)
    order, ends = baselines.argsort_plan(ids, layer.E)
    stages = {"plan": lambda: baselines.argsort_plan(ids, layer.E),
              "gather": lambda: baselines.argsort_gather(x, order, K)}
    if baselines.has_grouped_mm(x.device, x.dtype):
        xs = baselines.argsort_gather(x, order, K)
        gu = baselines.grouped_mm(xs, wgu, ends)
        h = baselines.swiglu_torch(gu)
        y = baselines.grouped_mm(h, wd, ends)
        stages.update({
            "gate_up_mm": lambda: baselines.grouped_mm(xs, wgu, ends),
            "swiglu": lambda: baselines.swiglu_torch(gu),
            "down_mm": lambda: baselines.grouped_mm(h, wd, ends),
            "combine": lambda: baselines.argsort_combine(y, order, w, K, layer.T),
            "layer": lambda: baselines.layer_argsort_grouped_mm(x, rw, wgu, wd, K)})
    return stages


def layer_baselines(layer, *, loop=True):
    """{name: call} of whole plain-torch layers on the layer: argsort + torch._grouped_mm (where
    torch offers it for this device and dtype) and, with loop, the per-expert Python loop."""
    x, rw, wgu, wd, K = layer.x, layer.router_weight, layer.w_gate_up, layer.w_down, layer.top_k
    calls = {}
    if loop:
        calls["layer_per_expert_loop"] = lambda: baselines.layer_per_expert_loop(x, rw, wgu, wd,
                                                                                 K)
    if baselines.has_grouped_mm(x.device, x.dtype):
        calls["layer_argsort_grouped_mm"] = lambda: baselines.layer_argsort_grouped_mm(
            x, rw, wgu, wd, K)
    return calls


def quantized_experts(layer, fmt, *, seed):
    """The layer's experts as synthetic GGUF blocks of format `fmt` (random quant bits, finite
    scales; torch_argon has no quantizer) whose dequantized weights have the dense stacks'
    standard deviation (H^-1/2 for gate/up, I^-1/2 for down); gate and up one [E, 2I, H] tensor
    (one GEMM), as the dense stack."""
    from ..quant import QuantizedExperts, QuantizedWeight, random_quantized
    E, H, I = layer.E, layer.H, layer.I
    g = torch.Generator(device="cpu").manual_seed(seed)
    gate_up = random_quantized(fmt, 2 * I, H, leading=(E,), std=H ** -0.5, generator=g)
    down = random_quantized(fmt, H, I, leading=(E,), std=I ** -0.5, generator=g)
    return QuantizedExperts(down=QuantizedWeight(down, fmt, I),
                            gate_up=QuantizedWeight(gate_up, fmt, H)).to(layer.x.device)


def relative_error(out, ref):
    """||out - ref|| / ||ref|| in float64; 0 where both are empty or zero (T = 0), not 0/0."""
    diff = float((out.double() - ref.double()).norm())
    norm = float(ref.double().norm())
    if norm == 0:
        return 0.0 if diff == 0 else float("inf")
    return diff / norm


def max_relative_error(out, ref):
    """max |out - ref| / max |ref| (the bench records' max_rel_err_vs_baseline)."""
    return ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()


def plan_matches_reference(layer, ops, tile_m):
    """Whether ops.moe_plan of the layer's routing equals reference.moe_plan bit for bit."""
    ids, w = route(layer.x, layer.router_weight, layer.top_k)
    got = ops.moe_plan(ids, w, layer.E, tile_m)
    want = reference.moe_plan(ids.cpu(), w.cpu(), layer.E, tile_m)
    return all(torch.equal(a.cpu(), b) for a, b in zip(got.tensors(), want.tensors()))


def float64_error(layer, out, *, experts=None, float64_x=False, activation_quant="none"):
    """relative_error of a layer output against reference.moe_layer (one expert at a time in
    float64) on the same routing, for the layer's experts or other `experts` (quantized ones
    are dequantized); float64_x: the reference keeps float64 (else it rounds to x's dtype);
    activation_quant: the mode the layer ran (the reference quantizes as q8 does)."""
    x, rw, K = layer.x, layer.router_weight, layer.top_k
    ids, w = route(x, rw, K)
    ref = reference.moe_layer(x.double() if float64_x else x, rw,
                              layer.experts if experts is None else experts, K, topk_ids=ids,
                              topk_weights=w, activation_quant=activation_quant)
    return relative_error(out, ref)


def float64_block_error(moe, x, activation_quant="none"):
    """relative_error of nn.MoE block `moe` on x against reference.moe_layer in float64 on its
    experts (quantized ones dequantized), with the block's own routing, plus its shared expert
    (if any) in float64 on the same dense weights; activation_quant: the mode the block ran."""
    _, weights, ids = moe.gate(x)
    act = reference.ACTIVATIONS[moe.activation]
    shared = None
    if moe.shared_expert is not None:
        s, xd = moe.shared_expert, x.double()
        h = act(xd @ s.gate_proj.weight.double().T) * (xd @ s.up_proj.weight.double().T)
        shared = h @ s.down_proj.weight.double().T
        if moe.shared_expert_gate is not None:
            shared = torch.sigmoid(xd @ moe.shared_expert_gate.weight.double().T) * shared
    ref = reference.moe_layer(x.double(), None, moe.experts.expert_weights(), ids.shape[1],
                              topk_ids=ids, topk_weights=weights, shared=shared,
                              activation=moe.activation, activation_quant=activation_quant)
    return relative_error(moe(x), ref)
