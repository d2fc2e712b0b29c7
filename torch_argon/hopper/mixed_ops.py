"""argon::hopper_mixed_mm(_out) (torch_argon/csrc/hopper/hopper_mixed_ops.cpp has their
schemas and contract) from Python: the wrapper and the fakes (torch.compile, opcheck).

The mixed-input GEMM multiplies the padded plan's rows by GGUF weights repacked once
(torch_argon/quant/mixed_repack.py: 4- or 8-bit codes, a bf16 scale and zero per 32 values)
without decoding them to memory: CUTLASS's sm90 mixed-input mainloop converts the codes in
registers (csrc/hopper/hopper_mixed_gemm.cuh). It runs where the other Hopper GEMMs do (the same
units' build, compute capability 9.0; bench/quant_mixed_notes.md).
"""
import torch

from .._kernels import has_kernel as _has_kernel
from .padded_ops import check_padded_plan
from .ops import call, refusal as _hopper_refusal

INT32_MAX = 2 ** 31 - 1  # the kernel's shapes and row indices are int32

# The plans' tile_m the kernel runs (its token tile: csrc/hopper/hopper_mixed_gemm.h's tile_rows)
TOKEN_TILES = (128, 64)


def refusal(device) -> str:
    """"" where the mixed-input GEMM runs on `device`, else why not."""
    why = _hopper_refusal(device)
    if why:
        return why
    if not _has_kernel("argon::hopper_mixed_mm_out", "CUDA"):
        return "this build of torch_argon._C has no mixed-input Hopper GEMM (older build)"
    return ""


def mixed_mm(x, m, tile_expert, meta, *, out=None):
    """out [R, N] bf16: for every used tile t of a plan made with tile_m 128 or 64 (t <
    meta[1]), the tile's rows of x [R, K] (bf16) times W[tile_expert[t]]^T, W the bf16 weights
    of the MixedWeights `m` (mixed_repack.mixed_dequantize's, never materialized); the other
    rows zero, or as they were in `out` where given."""
    return call(refusal, x.device, torch.ops.argon.hopper_mixed_mm,
                torch.ops.argon.hopper_mixed_mm_out,
                (x, m.codes, m.scales, m.zeros, tile_expert, meta), out)


# ---- fakes: output shapes from the arguments' shapes alone ------------------------------------

def _check_shapes(x, codes, scales, zeros, tile_expert, meta):
    """The checks of hopper_mixed_ops.cpp's check_mixed_inputs, the same words; returns N."""
    if x.dim() != 2 or x.dtype != torch.bfloat16:
        raise ValueError(f"x must be bfloat16 [R, K], got {x.dtype} of shape {tuple(x.shape)}")
    k = x.shape[1]
    if k <= 0 or k % 64 or k > INT32_MAX:
        raise ValueError(f"K (x's columns) must be a positive multiple of 64 (the GEMM's K "
                         f"tile), got {k}")
    if (codes.dim() != 4 or codes.dtype != torch.uint8 or codes.shape[1] != k // 16
            or codes.shape[3] not in (128, 256)):
        raise ValueError(f"codes must be uint8 [E, K / 16, N / 16, 128] (4-bit) or "
                         f"[E, K / 16, N / 16, 256] (8-bit) with K = x's columns ({k}), got "
                         f"{codes.dtype} of shape {tuple(codes.shape)}")
    e, n = codes.shape[0], 16 * codes.shape[2]
    if e <= 0 or e > INT32_MAX:
        raise ValueError(f"codes must hold between 1 and 2^31 - 1 experts, got {e}")
    if n <= 0 or n > INT32_MAX:
        raise ValueError(f"N (16 * codes.size(2), its blocks of 16 rows) must be between 1 and "
                         f"2^31 - 1, got {n}")
    for name, t in (("scales", scales), ("zeros", zeros)):
        if t.dtype != torch.bfloat16 or tuple(t.shape) != (e, k // 64, n, 2):
            raise ValueError(f"{name} must be bfloat16 [E, K / 64, N, 2] = "
                             f"{[e, k // 64, n, 2]} (mixed_repack's), got {t.dtype} of shape "
                             f"{tuple(t.shape)}")
    check_padded_plan("x", x, tile_expert, meta, tiles=TOKEN_TILES)
    if x.shape[0] > INT32_MAX:
        raise ValueError(f"x's rows must fit in int32, got {x.shape[0]}")
    return n


@torch.library.register_fake("argon::hopper_mixed_mm")
def _mixed_mm_fake(x, codes, scales, zeros, tile_expert, meta):
    n = _check_shapes(x, codes, scales, zeros, tile_expert, meta)
    return x.new_empty((x.shape[0], n))


@torch.library.register_fake("argon::hopper_mixed_mm_out")
def _mixed_mm_out_fake(x, codes, scales, zeros, tile_expert, meta, out):
    n = _check_shapes(x, codes, scales, zeros, tile_expert, meta)
    if tuple(out.shape) != (x.shape[0], n) or out.dtype != x.dtype:
        raise ValueError(f"out must be {x.dtype} of shape {(x.shape[0], n)}, got {out.dtype} "
                         f"of shape {tuple(out.shape)}")
