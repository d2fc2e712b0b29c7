"""Block shapes and kernels for the Triton grouped GEMMs, and the tile_m the layer asks the plan
for: from a measured table where it has the point, else from the default rules below.

Chosen on the host from shapes, dtype and the device's name only (no run-time autotuning, no
host sync: the layer runs inside CUDA graphs and torch.compile). BLOCK_M is the plan's tile_m
capped at 128: a block never straddles two experts.

The table (tuned_configs.json beside this file, or the file named by ARGON_TRITON_CONFIGS) is
written by bench/h200_gemm_sweep.py; each entry is keyed by device name, dtype, GEMM kind and
the weight stack's shape, and holds the winners at the mean rows per expert it measured:
  "gemm":   "<device>|<dtype>|<kind>|E<E>|N<N_w>|K<Kd>" -> [{"rows_per_expert", "tile_m",
            "config": MMConfig fields}, ...]   kind: "gate_up" (gathered, SwiGLU) or "down"
            (row-ordered, plain); N_w is the stack's rows (2I for gate_up).
  "tile_m": "<device>|<dtype>|E<E>|H<H>|I<I>" -> [{"rows_per_expert", "tile_m"}, ...]
A lookup takes the entry nearest in log(rows per expert) among those of the same tile_m, if it
lies within a factor MAX_LOAD_RATIO of the load asked for (the sweep's loads are at most 4x
apart); fp16 falls back to the bf16 entries of the same point (same kernels, same shapes).
Everything else (other GPUs, shapes, loads far outside the measured ones, tile_m values the
sweep did not time) takes the default rules, the configs measured before the table existed.
"""
import functools
import json
import math
import os
from dataclasses import asdict, dataclass, fields
from typing import Optional

import torch

KERNELS = ("classic", "tma")


@dataclass(frozen=True)
class MMConfig:
    """block_n / block_k / num_warps / num_stages: the launch's block shape and pipeline.
    kernel: "classic" (moe_mm_kernel.py, any GPU) or "tma" (moe_mm_tma_kernel.py, sm_90+).
    The rest apply to "tma" only: skip_padding (half-height MMAs over padding rows; needs the
    plan's tokens), persistent (programs per SM of a persistent grid; 0 = one program per
    block; more than the SM can hold at once would run in waves: the sweep checks), tma_store
    (the result through a descriptor, where the output's strides allow)."""
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    kernel: str = "classic"
    skip_padding: bool = False
    persistent: int = 0
    tma_store: bool = False

    def __post_init__(self):
        if self.kernel not in KERNELS:
            raise ValueError(f"MMConfig.kernel must be one of {KERNELS}, got {self.kernel!r}")
        if self.kernel == "classic" and (self.skip_padding or self.persistent or self.tma_store):
            raise ValueError("skip_padding, persistent and tma_store need kernel='tma'")

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict) -> "MMConfig":
        names = {f.name for f in fields(MMConfig)}
        return MMConfig(**{k: v for k, v in d.items() if k in names})

    def label(self) -> str:
        extra = "".join((" skip" if self.skip_padding else "",
                         f" p{self.persistent}" if self.persistent else "",
                         " cstore" if self.tma_store else ""))
        return (f"{self.kernel} bn{self.block_n} bk{self.block_k} w{self.num_warps} "
                f"s{self.num_stages}{extra}")


MAX_BLOCK_M = 128

# ---- the default rules (the classic kernel; H200-measured before the table) -----------------

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
    """The default rule: the classic kernel's config for this block_m and load."""
    for bm, max_rows, cfg in GATE_UP_CONFIGS if swiglu else DOWN_CONFIGS:
        if bm == block_m and rows_per_expert <= max_rows:
            return cfg
    raise AssertionError(f"no config for block_m={block_m}")


# Largest mean rows per expert for which each tile_m is chosen; beyond, 64. Measured: T=512
# (10 rows): tm=16 777 us vs tm=32 789 (gate_up + down); T=2048 (40): tm=64 851 vs tm=32 1001;
# T=8192 (160): tm=64 1565 vs tm=128 1627.
TILE_M_LIMITS = {16: 10.0, 32: 20.0}


def tile_m_for_load(n_entries: int, n_expert: int, limits: dict, largest: int) -> int:
    """The smallest tile_m whose limit (in `limits`, ascending) holds the mean rows per expert
    T*K/E, else `largest`: the shape of the tile_m rule of each Triton GEMM."""
    rows = n_entries / max(n_expert, 1)
    for tm, limit in limits.items():
        if rows <= limit:
            return tm
    return largest


def default_tile_m(n_entries: int, n_expert: int) -> int:
    """The default rule: a tile that holds a typical expert's rows (T*K/E), so most experts own
    one tile and their weights are streamed once; 64 from 20 rows per expert up (several tiles
    per expert then run side by side and share the weight blocks in L2)."""
    return tile_m_for_load(n_entries, n_expert, TILE_M_LIMITS, 64)


# ---- the measured table ----------------------------------------------------------------------

TABLE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tuned_configs.json")
_table_override: Optional[dict] = None


@functools.lru_cache(maxsize=None)
def _load_table(path: str) -> dict:
    if not os.path.exists(path):
        return {"gemm": {}, "tile_m": {}}
    with open(path) as f:
        table = json.load(f)
    return {"gemm": table.get("gemm", {}), "tile_m": table.get("tile_m", {})}


def _table_path() -> str:
    return os.environ.get("ARGON_TRITON_CONFIGS") or TABLE_FILE


# The table as the process started with it: what a torch.compile'd layer reads, since dynamo
# cannot trace the file's stat and read (a graph break, an error under fullgraph=True).
_STARTUP_TABLE = _load_table(_table_path())


def table() -> dict:
    if _table_override is not None:
        return _table_override
    if torch.compiler.is_compiling():
        return _STARTUP_TABLE
    return _load_table(_table_path())


def set_table(new: Optional[dict]) -> None:
    """Use this table (the JSON's dict form) instead of the file, or the file again (None):
    for the sweep, which times its own candidates through the layer's lookup, and for tests."""
    global _table_override
    _table_override = None if new is None else {"gemm": new.get("gemm", {}),
                                                "tile_m": new.get("tile_m", {})}


DTYPE_NAMES = {"torch.bfloat16": "bfloat16", "torch.float16": "float16"}


def dtype_name(dtype) -> str:
    return DTYPE_NAMES.get(str(dtype), str(dtype).replace("torch.", ""))


def gemm_key(device_name: str, dtype, kind: str, n_expert: int, n_w: int, kd: int) -> str:
    return f"{device_name}|{dtype_name(dtype)}|{kind}|E{n_expert}|N{n_w}|K{kd}"


def tile_m_key(device_name: str, dtype, n_expert: int, hidden: int, inter: int) -> str:
    return f"{device_name}|{dtype_name(dtype)}|E{n_expert}|H{hidden}|I{inter}"


def _entries(section: str, key: str) -> list:
    """The table's entries for key; fp16 takes bf16's where it has none of its own."""
    found = table()[section].get(key)
    if found is None and "|float16|" in key:
        found = table()[section].get(key.replace("|float16|", "|bfloat16|"))
    return found or []


MAX_LOAD_RATIO = 4.0


def _nearest(entries: list, rows_per_expert: float):
    """The entry nearest in log(rows per expert), or None if none lies within MAX_LOAD_RATIO."""
    r = math.log(max(rows_per_expert, 1e-3))
    dist = lambda e: abs(math.log(max(e["rows_per_expert"], 1e-3)) - r)  # noqa: E731
    best = min(entries, key=dist, default=None)
    return best if best is not None and dist(best) <= math.log(MAX_LOAD_RATIO) + 1e-9 else None


def tuned_config(device_name: str, dtype, kind: str, n_expert: int, n_w: int, kd: int,
                 tile_m: int, rows_per_expert: float) -> Optional[MMConfig]:
    """The table's config for this GEMM at this tile_m, nearest in load; None if it has none."""
    entries = [e for e in _entries("gemm", gemm_key(device_name, dtype, kind, n_expert, n_w, kd))
               if e["tile_m"] == tile_m]
    found = _nearest(entries, rows_per_expert)
    return MMConfig.from_dict(found["config"]) if found else None


def layer_tile_m(n_entries: int, n_expert: int, *, hidden: Optional[int] = None,
                 inter: Optional[int] = None, dtype=None, device_name: Optional[str] = None) -> int:
    """tile_m for the layer's plan from the mean rows per expert (T*K/E, known from shapes):
    the table's choice for this device, dtype and expert shape where it has one, nearest in
    load; else the default rule (default_tile_m)."""
    if None not in (hidden, inter, dtype, device_name):
        found = _nearest(_entries("tile_m", tile_m_key(device_name, dtype, n_expert, hidden,
                                                        inter)), n_entries / max(n_expert, 1))
        if found:
            return int(found["tile_m"])
    return default_tile_m(n_entries, n_expert)
