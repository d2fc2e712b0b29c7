"""gpuq: the quantized expert GEMMs and the decode in CUDA C++ (torch_argon/csrc/gpuq) for every
GGUF block format, as argon ops; on CPU tensors their host emulation (test builds). See
docs/quantized-experts.md and bench/quant_gpuq_notes.md."""
from .ops import (FORMATS, dequantize, layer_tile_m, moe_qmm_out, qmm, quantize_q8, refusal,
                  scaled_tiles)
from .tiled import tiled_qmm

__all__ = ["FORMATS", "dequantize", "layer_tile_m", "moe_qmm_out", "qmm", "quantize_q8",
           "refusal", "scaled_tiles", "tiled_qmm"]
