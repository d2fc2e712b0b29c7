"""The layer's experts as pluggable implementations (docs/experts.md).

A layer call's experts run in one flow (flow.py): prepare (the plan, the gather), the GEMMs of
one Experts implementation, finalize (the combine). The implementations, one file each, are
listed in registry.py in the order the layer tries them; each says whether it supports a call
and, if not, why. `explain` gives those reasons for a call (the main job prints them), `choose`
the implementation and tile_m the layer takes.
"""
from typing import NamedTuple, Optional

from ..ops import argon_ops
from ..quant.weights import ACTIVATION_QUANT
from ..weights import as_expert_weights
from . import flow, registry
from .arguments import check_experts_arguments, check_options, check_x
from .base import Experts, ExpertsCall
from .cpu_workspace import clear_cpu_workspace
from .cuda_quantized_dequant import clear_cuda_dequant_workspace
from .registry import IMPLEMENTATIONS, PATHS


class Choice(NamedTuple):
    """The layer's choice for a call: the implementation's name, its family ("triton" or
    "ops"), the plan's tile_m, ((name, reason), ...) of the implementations for these weights
    tried before it, and the activation_quant mode it runs ("none" or "q8")."""
    name: str
    path: str
    tile_m: int
    declined: tuple = ()
    activation_quant: str = "none"


def _call(x, experts, ops, tile_m, activation, activation_quant, n_entries):
    """The call of a layer on x with these experts and options, checked as the layer checks
    them (a ValueError naming the argument where the layer itself would raise)."""
    weights = as_expert_weights(experts)
    check_x(x)
    weights.check_input(x)
    check_options(activation, activation_quant)
    return ExpertsCall.of(x, weights, ops=ops, tile_m=tile_m, activation=activation,
                          activation_quant=activation_quant, n_entries=n_entries)


def explain(x, experts, *, ops=argon_ops, tile_m: Optional[int] = None, path="auto",
            activation="silu", activation_quant="auto", n_entries: Optional[int] = None):
    """[(implementation name, reason)] in the order the layer tries them, for a layer call on
    activations x [T, H] with `experts` (an expert-weights object or a (w_gate_up, w_down)
    pair) and the layer's options: reason "" where the implementation supports the call, else
    why it declines. The layer runs the first with an empty reason among those `path` allows.
    n_entries: the routed entries (T * K), as the layer knows them; some implementations decide
    by the rows per expert (without it they answer for an unknown count)."""
    return registry.explain(_call(x, experts, ops, tile_m, activation, activation_quant,
                                  n_entries), path)


def choose(x, experts, *, n_entries: int, ops=argon_ops, tile_m: Optional[int] = None,
           path="auto", activation="silu", activation_quant="auto") -> Choice:
    """The implementation and tile_m the layer takes for activations x [T, H], `experts` and
    n_entries = T * K routed entries (ValueError where none of `path`'s can run it)."""
    call = _call(x, experts, ops, tile_m, activation, activation_quant, n_entries)
    impl, declined = registry.choose_with_reasons(call, path)
    return Choice(impl.name, impl.path, impl.tile_m(call, n_entries), tuple(declined),
                  impl.resolved_activation_quant(call))


def run_implementation(name, x, topk_ids, topk_weights, experts, *, ops=argon_ops,
                       tile_m: Optional[int] = None, activation="silu", activation_quant="auto",
                       shared=None, residual=None, out_dtype=None):
    """The layer's experts flow (moe_experts) run by the implementation `name` as it is,
    without asking whether it supports the call; the arguments are checked as moe_experts
    checks them. For tests and benchmarks that drive one implementation (the Triton ones also
    on the CPU, through Triton's interpreter); the layer itself always asks (registry.choose)."""
    weights = as_expert_weights(experts)
    check_experts_arguments(x, topk_ids, topk_weights, weights, shared=shared, residual=residual,
                            activation=activation, activation_quant=activation_quant)
    call = ExpertsCall.of(x, weights, ops=ops, tile_m=tile_m, activation=activation,
                          activation_quant=activation_quant, n_entries=topk_ids.numel(),
                          routing=topk_weights)
    return flow.run(registry.BY_NAME[name], call, topk_ids, topk_weights, shared=shared,
                    residual=residual, out_dtype=out_dtype)


__all__ = ["ACTIVATION_QUANT", "Choice", "Experts", "ExpertsCall", "IMPLEMENTATIONS", "PATHS",
           "choose", "clear_cpu_workspace", "clear_cuda_dequant_workspace", "explain",
           "run_implementation"]
