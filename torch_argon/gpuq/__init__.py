"""gpuq: quantized expert GEMMs in CUDA C++ (torch_argon/csrc/gpuq) for every GGUF format,
with a host emulation of the same kernels for testing without a GPU. See docs/quantized-experts.md
and bench/quant_gpuq_notes.md."""
from .ops import (FORMATS, gpuq_qmm_op, gpuq_quantize_q8_op, layer_tile_m, moe_experts_gpuq,
                  qmm, quantize_q8)

__all__ = ["FORMATS", "gpuq_qmm_op", "gpuq_quantize_q8_op", "layer_tile_m", "moe_experts_gpuq",
           "qmm", "quantize_q8"]
