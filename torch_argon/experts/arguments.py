"""The argument checks of the layer's entries (moe_layer, moe_experts, nn.MoE, the expert-parallel
layer, the transformers hooks): each raises a ValueError naming the caller's argument, runs once,
at the entry the caller used, before any work; nothing below an entry checks these again."""
import torch

from .. import activations
from ..quant.weights import check_activation_quant

ID_DTYPES = (torch.int32, torch.int64)


def check_x(x) -> None:
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [T, H], got shape {tuple(x.shape)}")


def check_routing(x, topk_ids, topk_weights) -> None:
    """topk_ids [T, K] int32 / int64 for x's T tokens, topk_weights of its shape."""
    T = x.shape[0]
    if topk_ids.dim() != 2 or topk_ids.shape[0] != T:
        raise ValueError(f"topk_ids must be [T={T}, K], got {tuple(topk_ids.shape)}")
    if topk_ids.dtype not in ID_DTYPES:
        raise ValueError(f"topk_ids must be int32 or int64, got {topk_ids.dtype}")
    if tuple(topk_weights.shape) != tuple(topk_ids.shape):
        raise ValueError(f"topk_weights must have topk_ids' shape {tuple(topk_ids.shape)}, got "
                         f"{tuple(topk_weights.shape)}")


def check_addends(x, shared, residual) -> None:
    """shared and residual, where given, [T, H] like x."""
    for name, t in (("shared", shared), ("residual", residual)):
        if t is not None and tuple(t.shape) != tuple(x.shape):
            raise ValueError(f"{name} must be [T, H] = {list(x.shape)} like x, got "
                             f"{tuple(t.shape)}")


def check_options(activation, activation_quant) -> None:
    activations.check(activation)
    check_activation_quant(activation_quant)


def check_experts_arguments(x, topk_ids, topk_weights, weights, *, shared=None, residual=None,
                            activation="silu", activation_quant="auto") -> None:
    """Everything moe_experts takes: x [T, H]; the routing; the expert-weights object, which
    must take x (its H, dtype and device); shared / residual; the options."""
    check_x(x)
    check_routing(x, topk_ids, topk_weights)
    weights.check_input(x)
    check_addends(x, shared, residual)
    check_options(activation, activation_quant)
