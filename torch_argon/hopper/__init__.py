"""The Hopper grouped GEMM (CUTLASS 3's warp-specialized ptr-array kernel, csrc/hopper) from
Python: its ops' wrappers and fakes (ops.py) and its configurations with the tuned table
(configs.py)."""
from . import configs
from .ops import grouped_mm, refusal

__all__ = ["configs", "grouped_mm", "refusal"]
