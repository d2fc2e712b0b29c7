"""Block shapes for the Triton grouped GEMM, and the tile_m the layer asks the plan for.

Chosen once from shapes on the host (no run-time autotuning: the layer runs inside CUDA graphs
and torch.compile). BLOCK_M is the plan's tile_m (capped at 128): one program row block per
plan tile, so each expert's weights are streamed once per tile.
Measured on the H200 with bench/sweep_triton_mm.py (numbers beside the tables below).
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class MMConfig:
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int


MAX_BLOCK_M = 128

# (BLOCK_M, up to this many mean rows per expert) -> config, first match wins. gate_up: the fused
# gate/up + SwiGLU kernel (block_n counts h columns; a program's weight tile is 2 * block_n
# rows); down: the plain kernel. H200, bf16, E=512, H=2048, I=512 (bench/sweep_triton_mm.py,
# 2026-11-29): gate_up / down us and weight TB/s at the chosen configs:
#   T=128  tm=16: 462 (4.28) / 248 (3.98)      T=512  tm=16: 504 (4.26) / 274 (3.91)
#   T=2048 tm=64: 549 (3.91) / 302 (3.55)      T=8192 tm=64: 951 (2.26) / 615 (1.75),
# the last near the tensor-core bound (413 + 206 GFLOP over the 98,496 padded rows).
INF = float("inf")
GATE_UP_CONFIGS = [
    (16, INF, MMConfig(block_n=128, block_k=128, num_warps=4, num_stages=3)),
    (32, INF, MMConfig(block_n=128, block_k=128, num_warps=4, num_stages=3)),
    (64, 64, MMConfig(block_n=64, block_k=64, num_warps=4, num_stages=4)),
    (64, INF, MMConfig(block_n=128, block_k=64, num_warps=8, num_stages=4)),
    (128, INF, MMConfig(block_n=128, block_k=64, num_warps=8, num_stages=4)),
]
DOWN_CONFIGS = [
    (16, INF, MMConfig(block_n=128, block_k=128, num_warps=4, num_stages=4)),
    (32, INF, MMConfig(block_n=128, block_k=64, num_warps=4, num_stages=5)),
    (64, 64, MMConfig(block_n=128, block_k=64, num_warps=4, num_stages=4)),
    (64, INF, MMConfig(block_n=128, block_k=64, num_warps=4, num_stages=3)),
    (128, INF, MMConfig(block_n=256, block_k=64, num_warps=8, num_stages=3)),
]


def block_m_for(tile_m: int) -> int:
    if tile_m < 16 or tile_m & (tile_m - 1):
        raise ValueError(f"the Triton grouped GEMM needs a power-of-two tile_m >= 16, got {tile_m}")
    return min(tile_m, MAX_BLOCK_M)


def mean_rows_per_expert(rows: int, n_expert: int, tile_m: int) -> float:
    """T*K/E recovered from a plan's row count R_max = round_up(T*K + min(E, T*K)*(tm-1), tm)
    (exact up to the rounding; assumes T*K >= E, else it over-estimates, harmlessly)."""
    return max(0.0, rows / max(n_expert, 1) - (tile_m - 1))


def config_for(swiglu: bool, block_m: int, rows_per_expert: float) -> MMConfig:
    for bm, max_rows, cfg in GATE_UP_CONFIGS if swiglu else DOWN_CONFIGS:
        if bm == block_m and rows_per_expert <= max_rows:
            return cfg
    raise AssertionError(f"no config for block_m={block_m}")


# Largest mean rows per expert for which each tile_m is chosen; beyond, 64. Measured: T=512
# (10 rows): tm=16 777 us vs tm=32 789 (gate_up + down); T=2048 (40): tm=64 851 vs tm=32 1001;
# T=8192 (160): tm=64 1565 vs tm=128 1627.
TILE_M_LIMITS = {16: 10.0, 32: 20.0}


def layer_tile_m(n_entries: int, n_expert: int) -> int:
    """tile_m for the layer's plan from the mean rows per expert (T*K/E, known from shapes): a
    tile that holds a typical expert's rows, so most experts own one tile and their weights
    are streamed once; 64 from 20 rows per expert up (several tiles per expert then run side
    by side and share the weight blocks in L2)."""
    rows = n_entries / max(n_expert, 1)
    for tm, limit in TILE_M_LIMITS.items():
        if rows <= limit:
            return tm
    return 64
