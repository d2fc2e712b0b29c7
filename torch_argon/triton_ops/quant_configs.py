"""Block shapes for the quantized Triton grouped GEMM (moe_qmm_kernel.py), and the tile_m the
quantized layer asks the plan for. Chosen once from shapes and the format on the host (no
run-time autotuning: the layer runs inside CUDA graphs and torch.compile).

Not timed yet (no GPU here): the first H200 run (bench/h200_quant.sh, with --sweep) gives the
numbers to set them by. What they rest on now: compiles for sm_90 without a GPU
(tools/triton_sass_check.py: registers, spills, SASS instructions per dequantized value) and
the reasoning below.
- swap_ab: the weight tile is tl.dot's first operand (its rows are the MMA's M), the tokens its
  N. That takes wgmma (M = 64 per warpgroup) at BLOCK_M = 16 and keeps the dequantized tile in
  registers as the A operand; Q4_K at BLOCK_M 16: 10.5 SASS instructions per value against
  11.0 the other way, 115-128 registers against 168.
- 32 weight rows per warp (block_n = 16 * num_warps for the SwiGLU kernel, whose weight tile
  is 2 * block_n rows; 32 * num_warps for the plain one): fewer rows leave the dequant
  replicated across threads (Q4_K: 36-64 instructions per value instead of 10-14).
- BLOCK_M at most 64: at 128 the fp32 accumulator and the dequant do not fit in registers
  (every config tried spills 150-1500 bytes), so quant_layer_tile_m stops at 64. At 64 the
  SwiGLU kernel fits (Q4_K: 255 registers, no spill) but the down kernel spills 190-740 bytes
  (2 stages spill least); the sweep times BLOCK_M 32 against 64 there.
- 2 stages at BLOCK_M 16-32 (weight-read bound: the dequant holds registers), 3 for the SwiGLU
  kernel at 64.
"""
from dataclasses import dataclass, replace

from .configs import INF, TILE_M_LIMITS, tile_m_for_load


@dataclass(frozen=True)
class QMMConfig:
    block_n: int      # output columns per program (the SwiGLU kernel: h columns; 2x weight rows)
    step_blocks: int  # 32-value-block formats: blocks per K-loop iteration (256-value: 1)
    num_warps: int
    num_stages: int
    swap_ab: bool = True  # the weight tile as tl.dot's first operand (moe_qmm_kernel.py)


# (BLOCK_M, up to this many mean rows per expert) -> config, first match wins.
QGATE_UP_CONFIGS = [
    (16, INF, QMMConfig(block_n=64, step_blocks=4, num_warps=4, num_stages=2)),
    (32, INF, QMMConfig(block_n=64, step_blocks=4, num_warps=4, num_stages=2)),
    (64, INF, QMMConfig(block_n=64, step_blocks=4, num_warps=4, num_stages=3)),
]
QDOWN_CONFIGS = [
    (16, INF, QMMConfig(block_n=128, step_blocks=4, num_warps=4, num_stages=2)),
    (32, INF, QMMConfig(block_n=128, step_blocks=4, num_warps=4, num_stages=2)),
    (64, INF, QMMConfig(block_n=128, step_blocks=4, num_warps=4, num_stages=2)),
]
QMAX_BLOCK_M = 64


def qmm_block_m(tile_m: int) -> int:
    """BLOCK_M for a plan's tile_m (any power of two >= 1): the tile, capped at 64 (a larger
    tile_m runs as several row blocks); at least 16 (tl.dot's smallest M: a program then takes
    one tile's tile_m rows and masks the rest)."""
    if tile_m < 1 or tile_m & (tile_m - 1):
        raise ValueError(f"tile_m must be a power of two, got {tile_m}")
    return max(16, min(tile_m, QMAX_BLOCK_M))


# Formats whose dequant gathers from a large grid table (IQ2_XS: 512 entries of 8 values):
# the pipeliner stages each gathered value through shared memory with cp.async, which at
# 2 stages takes 272-528 KiB (over the H200's 227 KiB: the launch fails). One stage keeps
# the gather in registers.
SINGLE_STAGE_FORMATS = frozenset({"IQ2_XS"})


def qmm_config(fmt, swiglu: bool, block_m: int, rows_per_expert: float) -> QMMConfig:
    """The config for a format (a QFormat): the shared table, one stage for the grid formats."""
    for bm, max_rows, cfg in QGATE_UP_CONFIGS if swiglu else QDOWN_CONFIGS:
        if bm == block_m and rows_per_expert <= max_rows:
            if getattr(fmt, "name", fmt) in SINGLE_STAGE_FORMATS:
                return replace(cfg, num_stages=1)
            return cfg
    raise AssertionError(f"no quantized GEMM config for block_m={block_m}")


# Largest mean rows per expert (T*K/E) for which each tile_m is chosen; beyond, 64 (the largest
# BLOCK_M). The dense kernel's default limits (configs.TILE_M_LIMITS) until this kernel's are
# measured (bench/bench_quant.py times the layer with this rule).
QUANT_TILE_M_LIMITS = dict(TILE_M_LIMITS)


def quant_layer_tile_m(n_entries: int, n_expert: int) -> int:
    """tile_m for the quantized layer's plan (the triton_quantized implementation's rule), from
    the mean rows per expert (shapes only)."""
    return tile_m_for_load(n_entries, n_expert, QUANT_TILE_M_LIMITS, QMAX_BLOCK_M)
