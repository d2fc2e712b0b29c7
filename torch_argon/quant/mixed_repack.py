"""Q4_K weight stacks repacked for a mixed-input GEMM: 4-bit codes that a Hopper kernel loads by
TMA and converts in registers, with one bf16 scale and one bf16 zero per 32-value group, so that
no decoded bf16 weight is ever written (bench/quant_mixed_notes.md: the design and its status).

Q4_K (torch_argon.quant.formats) stores each row in 256-value super-blocks: fp16 d, fp16 dmin,
8 six-bit sub-block scales sc_j and mins m_j, and 4-bit codes q; a value is
(d * sc_j) * q - (dmin * m_j). Within one 32-value group j that is affine in q:

    w = s_j * q + z_j,   s_j = d * sc_j,   z_j = -(dmin * m_j)

repack_q4k computes s_j and z_j in float32 (exact: an fp16 times a 6-bit integer) and rounds
each to bf16 once. The kernel then computes, per value, bf16(float(q) * s + z): q * s is exact
in float32 (8 x 4 significant bits), so a fused multiply-add and a multiply followed by an add
round alike, once in float32 and once to bf16. mixed_dequantize does exactly that, so it is the
kernel's weight bit for bit; it differs from dequantize_reference by the bf16 roundings of s, z
and w (at most 2^-8 of 15 |s| + |z| + |w| per value; a GEMM over them stays well inside the
scaled-path tolerance of tests/gpuq_cases.py).

The layout (what the CUTLASS sm90 mixed-input mainloop reads with the problem transposed,
D^T = W @ X^T, the weight as its narrow K-major A operand; bench/quant_mixed_notes.md):

- codes  uint8 [..., N, K/2]: value k of a row in byte k // 2, the low nibble for even k (how
  cutlass::uint4b_t packs: element 0 in bits 0..3). Q4_K's own order is different (each 32-byte
  chunk holds values 64c + l in its low nibbles and 64c + 32 + l in its high ones).
- scales bf16 [..., K/64, N, 2] and zeros likewise: [.., t, n, h] is group 2t + h of row n. N is
  the fastest dimension because CUTLASS's scale tensor is MN-major (one TMA box per K tile of a
  tile's rows), and the two groups of a 64-wide K tile sit together as one 32-bit element
  because the mainloop loads one scale element per row and K tile: the kernel picks the half
  by the K block it converts (hopper_mixed_q4k_gemm.cuh says why).

Limits: K a multiple of 256 (Q4_K's block), N a multiple of 8 (16-byte TMA rows of the kernel's
output and 16-byte rows of the scales). Non-finite d / dmin are carried as they are (inf * 0 is
NaN, as in any product); real files have none.
"""
from typing import NamedTuple

import torch

from .formats import check_quantized

GROUP = 32      # values per affine group (a Q4_K sub-block)
K_TILE = 64     # the kernel's K tile: one (scale, zero) pair of groups per row and K tile
N_ALIGN = 8     # rows: 16-byte TMA rows of bf16 outputs, 4-byte scale pairs


class MixedQ4K(NamedTuple):
    """A Q4_K stack repacked (module doc: the layout). n_in is K."""
    codes: torch.Tensor   # uint8 [..., N, K/2]
    scales: torch.Tensor  # bf16 [..., K/64, N, 2]
    zeros: torch.Tensor   # bf16 [..., K/64, N, 2]
    n_in: int

    @property
    def n_out(self):
        return self.codes.shape[-2]

    @property
    def leading(self):
        return tuple(self.codes.shape[:-2])


def _check_shape(w_q, n_in):
    check_quantized(w_q, "Q4_K", n_in)
    n_out = w_q.shape[-2]
    if n_out % N_ALIGN:
        raise ValueError(f"w_q: the mixed-input GEMM needs N (the output rows, dim -2) to be a "
                         f"multiple of {N_ALIGN} (16-byte TMA rows), got N={n_out}")
    if n_in == 0:
        raise ValueError("w_q: the mixed-input GEMM needs n_in > 0")


def _scales_mins(s):
    """[B, 12] packed bytes (int32) -> 6-bit scales [B, 8] and mins [B, 8], as Q4_K packs them:
    groups 0..3 in the low 6 bits of bytes 0..3 (scales) and 4..7 (mins), groups 4..7 in the
    nibbles of bytes 8..11 with their top two bits in the top bits of bytes 0..7."""
    lo, mid, top = s[:, 0:4], s[:, 4:8], s[:, 8:12]
    scales = torch.cat([lo & 63, (top & 15) | ((lo >> 2) & 0x30)], dim=1)
    mins = torch.cat([mid & 63, (top >> 4) | ((mid >> 2) & 0x30)], dim=1)
    return scales, mins


def _half(b, off):
    """The fp16 at byte `off` of each block, as float32 [B, 1] (bits reinterpreted, so inf and
    NaN stay what they are)."""
    bits = b[:, off].to(torch.int32) | (b[:, off + 1].to(torch.int32) << 8)
    bits = torch.where(bits >= 0x8000, bits - 0x10000, bits).to(torch.int16)
    return bits.view(torch.float16).to(torch.float32)[:, None]


def repack_q4k(w_q, n_in):
    """MixedQ4K from Q4_K blocks w_q (uint8 [..., N, n_in / 256 * 144]), on w_q's device.
    One pass over the weights, meant once per stack at load time."""
    _check_shape(w_q, n_in)
    lead, n_out = tuple(w_q.shape[:-2]), w_q.shape[-2]
    blocks = w_q.reshape(-1, 144)
    d, dmin = _half(blocks, 0), _half(blocks, 2)
    sc, m = _scales_mins(blocks[:, 4:16].to(torch.int32))
    s = (d * sc.to(torch.float32)).to(torch.bfloat16)        # [B, 8]
    z = (-(dmin * m.to(torch.float32))).to(torch.bfloat16)   # [B, 8]
    # Q4_K codes: chunk c (32 bytes) holds group 2c in its low nibbles, 2c + 1 in its high ones
    qs = blocks[:, 16:144].reshape(-1, 4, 32)
    q = torch.stack([qs & 15, qs >> 4], dim=2).reshape(-1, 256)   # value order
    codes = (q[:, 0::2] | (q[:, 1::2] << 4)).reshape(*lead, n_out, n_in // 2)

    def by_k_tile(v):  # [B, 8] -> [..., K/64, N, 2]
        g = v.reshape(*lead, n_out, n_in // K_TILE, 2)
        return g.movedim(-2, -3).contiguous()

    return MixedQ4K(codes.contiguous(), by_k_tile(s), by_k_tile(z), int(n_in))


def unpack_codes(m):
    """uint8 [..., N, K]: the codes 0..15 of a MixedQ4K in value order."""
    c = m.codes
    return torch.stack([c & 15, c >> 4], dim=-1).reshape(*c.shape[:-1], m.n_in)


def group_params(m):
    """(scales, zeros) as float32 [..., N, K/32] (group order along K) from a MixedQ4K."""
    def by_row(v):
        return v.movedim(-3, -2).reshape(*m.leading, m.n_out, m.n_in // GROUP).float()
    return by_row(m.scales), by_row(m.zeros)


def mixed_dequantize(m, dtype=torch.bfloat16):
    """[..., N, K] the weights the mixed-input kernel multiplies: bf16(float(q) * s + z) per
    value (module doc), cast to `dtype` (exact for float32)."""
    s, z = group_params(m)
    q = unpack_codes(m).to(torch.float32)
    shape = (*m.leading, m.n_out, m.n_in // GROUP, GROUP)
    w = q.reshape(shape) * s[..., None] + z[..., None]   # q * s exact: one rounding, in the add
    return w.to(torch.bfloat16).reshape(*m.leading, m.n_out, m.n_in).to(dtype)


def concat_n(first, second):
    """One MixedQ4K of first's rows then second's (the same leading dims and K): gate and up
    held as two stacks become the gate/up GEMM's [.., 2I, H]."""
    if first.leading != second.leading or first.n_in != second.n_in:
        raise ValueError(f"concat_n needs the same leading dims and K, got {first.leading} K="
                         f"{first.n_in} and {second.leading} K={second.n_in}")
    return MixedQ4K(torch.cat([first.codes, second.codes], dim=-2),
                    torch.cat([first.scales, second.scales], dim=-2),
                    torch.cat([first.zeros, second.zeros], dim=-2), first.n_in)


def repacked_bytes(m):
    """Bytes a GEMM reads of the repacked weights (codes, scales, zeros): 5 bits per value (4
    of code, 2 x 16 per 32 values of scale and zero), against Q4_K's 4.5 and bf16's 16."""
    return sum(t.numel() * t.element_size() for t in (m.codes, m.scales, m.zeros))

