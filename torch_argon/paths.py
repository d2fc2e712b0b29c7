"""Which kernels run a layer's experts, and with what tile_m: decided here, once, for the layer
(layer.py), the Triton experts (triton_ops/experts.py) and the main job (__main__.py).

Paths:
  "triton"  CUDA, fp16/bf16 activations, dense experts of their dtype or quantized experts: the
            Triton grouped GEMMs with the gather and the SwiGLU fused in (two GEMM launches),
            tile_m from the mean rows per expert.
  "ops"     any device: the argon ops one per stage (plan, gather, moe_mm, swiglu, moe_mm,
            combine); tile_m 16 on GPUs (the grouped GEMMs' M tile) and 1 on the CPU, where the
            GEMMs take each expert's rows in blocks of their own (csrc/cpu/moe_mm_cpu.cpp) and
            padding would be wasted work.
The choice depends on shapes, dtypes and devices only, never on data (no host sync).
"""
from dataclasses import dataclass

import torch

from . import triton_ops

PATHS = ("auto", "triton", "ops")


@dataclass(frozen=True)
class ExpertsPath:
    name: str  # "triton" or "ops"
    tile_m: int
    why_not_triton: str = ""  # why the Triton GEMMs do not run this call ("" when they do)


def triton_refusal(x, experts, ops, tile_m=None) -> str:
    """Why the Triton GEMMs cannot run this call ("" when they can): they need CUDA tensors in
    fp16 / bf16, dense experts of x's dtype, Triton, the argon op library (another OpSet means
    the caller wants its own ops), and a tile_m that is None or a power of two >= 16."""
    if not triton_ops.AVAILABLE:
        return triton_ops.REASON
    if not x.is_cuda:
        return "the Triton GEMMs run on CUDA tensors only"
    if experts.kind == "quantized":
        if not hasattr(triton_ops, "moe_experts_triton_quant"):
            return "this build's Triton kernels have no quantized GEMMs"
        if x.dtype not in (torch.float16, torch.bfloat16):
            return "the quantized Triton GEMMs need fp16 / bf16 activations"
    elif x.dtype not in (torch.float16, torch.bfloat16) or not (
            experts.gate_up.dtype == experts.down.dtype == x.dtype):
        return "the Triton GEMMs need x and both weight stacks in the same fp16 / bf16 dtype"
    if getattr(ops, "ns", None) is not torch.ops.argon:
        return "an OpSet other than the argon library was passed"
    if tile_m is not None and (tile_m < 16 or tile_m & (tile_m - 1)):
        return f"tile_m={tile_m}: the Triton GEMMs need a power of two >= 16"
    return ""


def ops_tile_m(device) -> int:
    """tile_m of the "ops" path: 1 on the CPU, 16 on GPUs."""
    return 1 if torch.device(device).type == "cpu" else 16


def choose_experts_path(x, experts, ops, *, n_entries, tile_m=None, path="auto") -> ExpertsPath:
    """The path and tile_m for the experts of one layer call.

    x: [T, H] activations; experts: an expert-weights object (weights.py); ops: the OpSet the
    caller runs on; n_entries: T * K (routed entries, from shapes); tile_m: the caller's, or
    None to choose; path: "auto" (triton where it can run, else ops), "triton" (an error where
    it cannot) or "ops".
    """
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    refusal = triton_refusal(x, experts, ops, tile_m) if path != "ops" else "path='ops' was asked for"
    if path == "triton" and refusal:
        raise ValueError(f"path='triton' cannot run here: {refusal}")
    if not refusal:
        if tile_m is None:  # dense stacks: the measured table's choice for this GPU, else the rule
            tuned = (dict(hidden=experts.hidden, inter=experts.inter, dtype=x.dtype,
                          device_name=triton_ops.device_name(x.device))
                     if experts.kind == "dense" else {})
            tile_m = triton_ops.layer_tile_m(n_entries, experts.n_experts, **tuned)
        return ExpertsPath("triton", tile_m)
    return ExpertsPath("ops", ops_tile_m(x.device) if tile_m is None else tile_m, refusal)
