"""argon::hopper_padded_mm(_out) and argon::hopper_padded_act_mm(_out) (torch_argon/csrc/
hopper/hopper_padded_ops.cpp has their schemas and contract) from Python: the wrappers, the
gate/up stack's interleaved order the second one reads (interleave_gate_up) and the fakes
(torch.compile, opcheck).

The padded GEMM runs where the grouped one does (the same units' build, compute capability
9.0), so `ops.refusal` says why it does not. It reads the plan's tile_expert and used-tile count
(meta) on the device: no host sync, CUDA graphs capture it.

hopper_padded_act_mm is the gate/up GEMM with the activation in its epilogue (csrc/hopper/
hopper_padded_act_epilogue.cuh): h = swiglu(gate, up) is written from the accumulators, bit for
bit hopper_padded_mm followed by the swiglu op, so gu [R, 2I] never exists. Its weight stack has
gate and up rows interleaved in blocks of 8 (interleave_gate_up): one thread of the epilogue
then holds the gate and the up accumulator of the same h columns.
"""
import torch

from .. import activations
from .._kernels import has_kernel as _has_kernel
from . import configs
from .ops import call, check_operands, check_out, refusal

INTERLEAVE = 8  # gate / up rows per block of the interleaved stack (the wgmma fragment's 8 columns)


def padded_mm(a, w, tile_expert, meta, config, *, out=None):
    """out [R, N]: for every used tile m of a plan made with tile_m 128 (m < meta[1]), rows
    128 m .. 128 m + 127 of a [R, K] times w[tile_expert[m]]^T (w [E, N, K], a's dtype fp16 /
    bf16); the other rows zero, or as they were in `out` where given. config: a name of
    configs.PADDED_CONFIGS."""
    return call(refusal, a.device, torch.ops.argon.hopper_padded_mm,
                torch.ops.argon.hopper_padded_mm_out,
                (a, w, tile_expert, meta, configs.padded_index(config)), out)


def act_refusal(device) -> str:
    """"" where the gate/up GEMM with the activation runs on `device`, else why not."""
    why = refusal(device)
    if why:
        return why
    if not _has_kernel("argon::hopper_padded_act_mm_out", "CUDA"):
        return ("this build of torch_argon._C has no padded gate/up GEMM with the activation "
                "(older build)")
    return ""


def padded_act_mm(a, w_interleaved, tile_expert, meta, config, activation="silu", *, out=None):
    """h [R, I]: for every used tile m of a plan made with tile_m 128 (m < meta[1]), rows
    128 m .. 128 m + 127 of swiglu(a @ W_gate^T, a @ W_up^T) with the activation
    ("silu", "gelu", "gelu_tanh"), where W = w[tile_expert[m]] and w_interleaved =
    interleave_gate_up(w) ([E, 2I, K], I a multiple of 8); bit for bit
    swiglu(padded_mm(a, w, ...), activation=...). The other rows zero, or as they were in `out`
    where given. config: a name of configs.PADDED_CONFIGS."""
    return call(act_refusal, a.device, torch.ops.argon.hopper_padded_act_mm,
                torch.ops.argon.hopper_padded_act_mm_out,
                (a, w_interleaved, tile_expert, meta, configs.padded_index(config), activation),
                out)


def interleave_gate_up(w):
    """The gate/up stack [E, 2I, H] (each expert's I gate rows, then its I up rows) with gate and
    up rows interleaved in blocks of 8, as hopper_padded_act_mm reads it: rows 16 j .. 16 j + 7
    are gate rows 8 j .. 8 j + 7, rows 16 j + 8 .. 16 j + 15 up rows 8 j .. 8 j + 7. An exact
    permutation (a new contiguous tensor); I must be a multiple of 8."""
    E, two_i, H = w.shape
    if two_i % (2 * INTERLEAVE):
        raise ValueError(f"w_gate_up must be [E, 2I, H] with I a multiple of {INTERLEAVE} to "
                         f"interleave gate and up rows, got {tuple(w.shape)}")
    blocks = two_i // (2 * INTERLEAVE)
    out = w.new_empty((E, two_i, H))  # always a copy: a cache of it must not keep w alive
    out.view(E, blocks, 2, INTERLEAVE, H).copy_(
        w.reshape(E, 2, blocks, INTERLEAVE, H).transpose(1, 2))
    return out


def deinterleave_columns(gu):
    """The columns of a product with the interleaved stack ([R, 2I], interleave_gate_up's row
    order) put back in the stack's order (gate columns, then up columns): a new tensor."""
    R, two_i = gu.shape
    if two_i % (2 * INTERLEAVE):
        raise ValueError(f"gu must be [R, 2I] with I a multiple of {INTERLEAVE}, got "
                         f"{tuple(gu.shape)}")
    blocks = two_i // (2 * INTERLEAVE)
    out = gu.new_empty((R, two_i))
    out.view(R, 2, blocks, INTERLEAVE).copy_(gu.reshape(R, blocks, 2, INTERLEAVE).transpose(1, 2))
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


def _check_act_shapes(a, w, tile_expert, meta, config, activation):
    _check_shapes(a, w, tile_expert, meta, config)
    if w.shape[1] % (2 * INTERLEAVE):
        raise ValueError(f"w must be the interleaved gate/up stack [E, 2I, K] with I a multiple "
                         f"of {INTERLEAVE} (gate and up rows in blocks of {INTERLEAVE}), got "
                         f"{w.shape[1]} rows")
    activations.check(activation)


@torch.library.register_fake("argon::hopper_padded_act_mm")
def _padded_act_mm_fake(a, w, tile_expert, meta, config, activation="silu"):
    _check_act_shapes(a, w, tile_expert, meta, config, activation)
    return a.new_empty((a.shape[0], w.shape[1] // 2))


@torch.library.register_fake("argon::hopper_padded_act_mm_out")
def _padded_act_mm_out_fake(a, w, tile_expert, meta, config, activation, out):
    _check_act_shapes(a, w, tile_expert, meta, config, activation)
    if tuple(out.shape) != (a.shape[0], w.shape[1] // 2) or out.dtype != a.dtype:
        raise ValueError(f"out must be {a.dtype} of shape {(a.shape[0], w.shape[1] // 2)}, got "
                         f"{out.dtype} of shape {tuple(out.shape)}")
