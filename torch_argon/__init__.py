"""torch_argon: fast Mixture-of-Experts prefill ops for PyTorch (MPS, CUDA, CPU).

    plan = torch_argon.moe_plan(topk_ids, topk_weights, n_expert)
    xs = torch_argon.moe_gather(x, plan)
    ...
or the whole layer: torch_argon.moe_layer(x, router_weight, (w_gate_up, w_down), top_k).
Which implementation runs a layer's experts, and why: torch_argon.experts.explain(x, experts).
"""
import torch

from . import _C  # noqa: F401  (registers the ops of every compiled backend)
from . import experts, nn, quant, reference
from .ops import OpSet, argon_ops
from .plan import MoEPlan
from .layer import moe_experts, moe_layer
from .routing import route
from .quant import QuantizedExperts, QuantizedWeight
from .weights import DenseExperts

moe_plan = argon_ops.moe_plan
moe_gather = argon_ops.moe_gather
moe_combine = argon_ops.moe_combine
swiglu = argon_ops.swiglu
moe_mm = argon_ops.moe_mm
dequantize = argon_ops.dequantize
moe_qmm = argon_ops.moe_qmm

__all__ = ["MoEPlan", "OpSet", "DenseExperts", "QuantizedExperts", "QuantizedWeight", "moe_plan",
           "moe_gather", "moe_combine", "swiglu", "moe_mm", "moe_qmm", "moe_layer", "moe_experts",
           "route", "dequantize"]
__version__ = "0.1.0"
