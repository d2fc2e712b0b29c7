"""Block shapes for the quantized Triton grouped GEMM (moe_qmm_kernel.py), and the tile_m the
quantized layer asks the plan for. Chosen once from shapes and the format on the host (no
run-time autotuning: the layer runs inside CUDA graphs and torch.compile).

Not measured yet: the first H200 run (bench/h200_quant.sh, its `sweep` step) gives the numbers
to set them by. The reasoning behind the first choice:
- Small T (BLOCK_M 16-32, about one tile per expert): the layer reads every expert's weights
  once, so it is bound by the weight reads and by the dequant's ALU work (a few integer and
  float ops per weight, for every weight). Many small programs (64-128 weight rows) keep enough
  loads in flight; 2 stages, since the dequant holds registers.
- Large T (BLOCK_M 64-128): matrix bound; each weight is dequantized once per BLOCK_M rows, so a
  larger BLOCK_M takes the dequant off the critical path (quant_layer_tile_m picks 128 from 96
  rows per expert up), with 3 stages to overlap the loads with tl.dot.
"""
from dataclasses import dataclass

from .configs import INF, MAX_BLOCK_M


@dataclass(frozen=True)
class QMMConfig:
    block_n: int      # output columns per program (the SwiGLU kernel: h columns; 2x weight rows)
    step_blocks: int  # 32-value-block formats: blocks per K-loop iteration (256-value: 1)
    num_warps: int
    num_stages: int


# (BLOCK_M, up to this many mean rows per expert) -> config, first match wins.
QGATE_UP_CONFIGS = [
    (16, INF, QMMConfig(block_n=64, step_blocks=4, num_warps=4, num_stages=2)),
    (32, INF, QMMConfig(block_n=64, step_blocks=4, num_warps=4, num_stages=2)),
    (64, INF, QMMConfig(block_n=64, step_blocks=4, num_warps=4, num_stages=3)),
    (128, INF, QMMConfig(block_n=128, step_blocks=2, num_warps=8, num_stages=3)),
]
QDOWN_CONFIGS = [
    (16, INF, QMMConfig(block_n=128, step_blocks=4, num_warps=4, num_stages=2)),
    (32, INF, QMMConfig(block_n=128, step_blocks=4, num_warps=4, num_stages=2)),
    (64, INF, QMMConfig(block_n=128, step_blocks=4, num_warps=4, num_stages=3)),
    (128, INF, QMMConfig(block_n=128, step_blocks=2, num_warps=8, num_stages=3)),
]


def qmm_block_m(tile_m: int) -> int:
    """BLOCK_M for a plan's tile_m (any power of two >= 1): the tile, capped at 128; at least
    16 (tl.dot's smallest M: a program then takes one tile's tile_m rows and masks the rest)."""
    if tile_m < 1 or tile_m & (tile_m - 1):
        raise ValueError(f"tile_m must be a power of two, got {tile_m}")
    return max(16, min(tile_m, MAX_BLOCK_M))


def qmm_config(fmt, swiglu: bool, block_m: int, rows_per_expert: float) -> QMMConfig:
    """The config for a format (a QFormat; all formats share the table for now)."""
    del fmt  # per-format entries go here once measured
    for bm, max_rows, cfg in QGATE_UP_CONFIGS if swiglu else QDOWN_CONFIGS:
        if bm == block_m and rows_per_expert <= max_rows:
            return cfg
    raise AssertionError(f"no quantized GEMM config for block_m={block_m}")


# Largest mean rows per expert (T*K/E) for which each tile_m is chosen; beyond, 128. The dense
# limits (configs.TILE_M_LIMITS) up to 64; 128 from 96 rows on, where dequantizing each weight
# once per 128 rows instead of 64 saves more than the extra padding costs (to be measured).
QUANT_TILE_M_LIMITS = {16: 10.0, 32: 20.0, 64: 96.0}


def quant_layer_tile_m(n_entries: int, n_expert: int) -> int:
    """tile_m for the quantized layer's plan, from the mean rows per expert (shapes only)."""
    rows = n_entries / max(n_expert, 1)
    for tm, limit in QUANT_TILE_M_LIMITS.items():
        if rows <= limit:
            return tm
    return 128
