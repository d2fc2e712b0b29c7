"""Triton kernels for the CUDA layer: the grouped GEMMs with the gather and SwiGLU fused in,
dense (moe_mm_kernel.py) and with GGUF-quantized weights dequantized in registers
(moe_qmm_kernel.py), and the quantized formats' dequantize kernel.

AVAILABLE says whether they can run here (Triton importable); REASON says why not. When
available, importing this package registers argon::moe_mm_triton,
argon::moe_gate_up_swiglu_triton, argon::moe_qmm_triton, argon::moe_gate_up_swiglu_qmm_triton
and argon::topk_triton (ops.py, quant_ops.py), and the CUDA kernels of the op table's
argon::dequantize_out and argon::moe_qmm_out where the extension defines those ops. On a machine
without Triton everything else in torch_argon works, and the layer takes the argon ops path.
"""
try:
    import triton  # noqa: F401
except ImportError as e:  # the CPU CI machine may not have it
    AVAILABLE, REASON = False, f"triton is not importable: {e}"
else:
    AVAILABLE, REASON = True, ""
    from .ops import (device_name, moe_gate_up_swiglu_triton, moe_mm_triton,  # noqa: F401
                      topk_triton)
    from .configs import layer_tile_m  # noqa: F401
    from .experts import moe_experts_triton  # noqa: F401
    from .quant_blocks import device_tables as quant_tables  # noqa: F401
    from .quant_configs import quant_layer_tile_m  # noqa: F401
    from .quant_ops import (dequantize_triton, moe_gate_up_swiglu_qmm_triton,  # noqa: F401
                            moe_qmm_triton, register_cuda_kernels)
    from .quant_experts import moe_experts_triton_quant  # noqa: F401

    register_cuda_kernels()
