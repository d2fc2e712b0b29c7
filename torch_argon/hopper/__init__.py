"""The Hopper GEMMs from Python: CUTLASS 3's warp-specialized ptr-array grouped GEMM
(csrc/hopper/hopper_grouped_gemm.cuh; ops.py) and the padded-plan GEMM with one tensor map per
operand (csrc/hopper/hopper_padded_gemm.cuh; padded_ops.py; with the activation in the gate/up
GEMM's epilogue: padded_act_mm), the mixed-input GEMM on GGUF
weights over the padded plan (csrc/hopper/hopper_mixed_gemm.cuh; mixed_ops.py), their wrappers
and fakes, and their configurations with the tuned tables (configs.py)."""
from . import configs
from .ops import grouped_mm, refusal
from .mixed_ops import mixed_mm
from .padded_ops import interleave_gate_up, padded_act_mm, padded_mm

__all__ = ["configs", "grouped_mm", "interleave_gate_up", "mixed_mm", "padded_act_mm", "padded_mm",
           "refusal"]
