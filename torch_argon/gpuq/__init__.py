"""gpuq: quantized expert GEMMs in CUDA C++ (torch_argon/csrc/gpuq) for every GGUF format,
with a host emulation of the same kernels for testing without a GPU. See docs/quantized-experts.md
and bench/quant_gpuq_notes.md."""
from .ops import FORMATS, layer_tile_m, moe_experts_gpuq, qmm, quantize_q8

__all__ = ["FORMATS", "layer_tile_m", "moe_experts_gpuq", "qmm", "quantize_q8"]
