"""The Hopper GEMMs from Python: CUTLASS 3's warp-specialized ptr-array grouped GEMM
(csrc/hopper/hopper_grouped_gemm.cuh; ops.py) and the padded-plan GEMM with one tensor map per
operand (csrc/hopper/hopper_padded_gemm.cuh; padded_ops.py), the mixed-input GEMM on GGUF
weights over the padded plan (csrc/hopper/hopper_mixed_gemm.cuh; mixed_ops.py), their wrappers
and fakes, and their configurations with the tuned tables (configs.py)."""
from . import configs
from .ops import grouped_mm, refusal
from .mixed_ops import mixed_mm
from .padded_ops import padded_mm

__all__ = ["configs", "grouped_mm", "mixed_mm", "padded_mm", "refusal"]
