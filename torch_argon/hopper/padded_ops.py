"""argon::hopper_padded_mm(_out) (torch_argon/csrc/hopper/hopper_padded_ops.cpp has their
schemas and contract) from Python: the wrapper and the fakes (torch.compile, opcheck).

The padded GEMM runs where the grouped one does (the same units' build, compute capability
9.0), so `ops.refusal` says why it does not. It reads the plan's tile_expert and used-tile count
(meta) on the device: no host sync, CUDA graphs capture it.
"""
import torch

from . import configs
from .ops import check_operands, check_out, refusal


def padded_mm(a, w, tile_expert, meta, config, *, out=None):
    """out [R, N]: for every used tile m of a plan made with tile_m 128 (m < meta[1]), rows
    128 m .. 128 m + 127 of a [R, K] times w[tile_expert[m]]^T (w [E, N, K], a's dtype fp16 /
    bf16); the other rows zero, or as they were in `out` where given. config: a name of
    configs.PADDED_CONFIGS."""
    if not torch.compiler.is_compiling():
        why = refusal(a.device)
        if why:
            raise NotImplementedError(why)
    index = configs.padded_index(config)
    if out is None:
        return torch.ops.argon.hopper_padded_mm(a, w, tile_expert, meta, index)
    torch.ops.argon.hopper_padded_mm_out(a, w, tile_expert, meta, index, out)
    return out


# ---- fakes: output shapes from the arguments' shapes alone ------------------------------------

def check_padded_plan(name, a, tile_expert, meta, tiles=(configs.PADDED_TILE_M,)):
    """The plan arguments of a GEMM over the padded plan (this op's and the mixed-input GEMM's):
    tile_expert int32 [R / t], `name` (a) with t rows per tile for a t in `tiles` (the plan's
    tile_m; 128 for this op), meta int32 [4]. Returns t (the first of `tiles` where there are no
    tiles)."""
    if tile_expert.dim() != 1 or tile_expert.dtype != torch.int32:
        per = tiles[0] if len(tiles) == 1 else "tile_m"
        raise ValueError(f"tile_expert must be the plan's int32 [R / {per}], got "
                         f"{tile_expert.dtype} of shape {tuple(tile_expert.shape)}")
    n_tiles, rows = tile_expert.shape[0], a.shape[0]
    tile = tiles[0] if n_tiles == 0 else rows // n_tiles
    if tile not in tiles or rows != tile * n_tiles:
        allowed = " or ".join(str(t) for t in tiles)
        raise ValueError(f"{name} must have {allowed} rows per tile of tile_expert (a plan made "
                         f"with tile_m = {allowed}), got {rows} rows and {n_tiles} tiles")
    if tuple(meta.shape) != (4,) or meta.dtype != torch.int32:
        raise ValueError(f"meta must be int32 of shape [4] (the plan's), got {meta.dtype} of "
                         f"shape {tuple(meta.shape)}")
    return tile


def _check_shapes(a, w, tile_expert, meta, config):
    check_operands(a, w)
    check_padded_plan("a", a, tile_expert, meta)
    if not 0 <= config < len(configs.PADDED_CONFIGS):
        raise ValueError(f"config must be in [0, {len(configs.PADDED_CONFIGS)}), got {config}")


@torch.library.register_fake("argon::hopper_padded_mm")
def _padded_mm_fake(a, w, tile_expert, meta, config):
    _check_shapes(a, w, tile_expert, meta, config)
    return a.new_empty((a.shape[0], w.shape[1]))


@torch.library.register_fake("argon::hopper_padded_mm_out")
def _padded_mm_out_fake(a, w, tile_expert, meta, config, out):
    _check_shapes(a, w, tile_expert, meta, config)
    check_out(a, w, out)
