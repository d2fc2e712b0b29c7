"""Triton kernels for the CUDA layer: the grouped GEMMs with the gather and SwiGLU fused in.

AVAILABLE says whether they can run here (Triton importable); REASON says why not. When
available, importing this package registers argon::moe_mm_triton and
argon::moe_gate_up_swiglu_triton (see ops.py). On a machine without Triton everything else in
torch_argon works, and the layer takes the argon ops path.
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
