"""Output sizes of the plan: functions of (T, K, E, tile_m) only, never of the data.

Works on ints and on torch.SymInt, so the fake (meta) impls trace under torch.compile.
Mirrors argon::plan_dims in csrc/checks.cpp.
"""
import torch

META_SIZE = 4  # n_rows, n_tiles, n_valid_entries, n_bad_ids (csrc/shared/plan_params.h)
META_N_ROWS, META_N_TILES, META_N_VALID, META_N_BAD_IDS = range(META_SIZE)


def round_up(x, m):
    return (x + m - 1) // m * m


def plan_rows(T, K, E, tile_m):
    """R_max: an upper bound on padded rows, round_up(T*K + min(E, T*K)*(tile_m-1), tile_m)."""
    n = T * K
    return round_up(n + torch.sym_min(E, n) * (tile_m - 1), tile_m)
