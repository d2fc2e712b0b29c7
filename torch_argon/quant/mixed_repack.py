"""GGUF weight stacks repacked for a mixed-input GEMM: unsigned codes (4 or 8 bits) that a Hopper
kernel loads by TMA and converts in registers, with one bf16 scale and one bf16 zero per
32-value group, so that no decoded bf16 weight is ever written (bench/quant_mixed_notes.md: the
design and its measurements).

Every format whose values are affine in an integer code within groups of 32 takes this one form,

    w = s_j * u + z_j   for the values of group j, u an unsigned code,

with s_j and z_j computed in float32 exactly as the reference does (torch_argon.quant.reference:
an fp16 times a small integer) and rounded to bf16 once:

    format    bits  u                       s_j               z_j
    Q4_K      4     q (0..15)               d * sc_j          -(dmin * m_j)
    Q4_0      4     q (0..15)               d                 -8 d
    Q5_K      8     q (0..31)               d * sc_j          -(dmin * m_j)
    Q5_0      8     q (0..31)               d                 -16 d
    Q8_0      8     q + 128 (q int8)        d                 -128 d
    IQ4_NL    8     T[q] + 128              d                 -128 d
    IQ4_XS    8     T[q] + 128              d * (ls_j - 32)   -128 d * (ls_j - 32)

(T the IQ4_NL table, -127..113.) The formats of 16-value groups (Q6_K, Q3_K, Q2_K) and the grid
formats (IQ2_XS, IQ3_S) have no such form at 32 values a group: FORMATS does not list them.

The kernel's weight, per value (csrc/hopper/hopper_mixed_convert.cuh), s and z the stored bf16:

- 4-bit codes: w = bf16_rn(u * s + z), ONE rounding of the exact value: the kernel converts in
  bf16x2 (u as bf16 by bit ops, exact) with a bf16 fused multiply-add;
- 8-bit codes: w = bf16(float32_rn(u * s + z)): u * s is exact in float32 (at most 8 x 8
  significant bits), so the float32 fma rounds once, in the add, then once more to bf16.

mixed_dequantize computes exactly these bits (the 4-bit rounding in float64 and integer ops:
bf16_of_sum; never through torch's double -> bf16 cast, which rounds twice via float32). It
differs from dequantize_reference by the bf16 roundings of s, z and w (at most 2^-8 of
max(u) |s| + |z| + |w| per value; where z is a power-of-two multiple of s, its rounding is s's,
and the value is bf16(bf16(s) * (u - c))).

The layout (what the CUTLASS sm90 mixed-input mainloop reads with the problem transposed,
D^T = W @ X^T, the weight as its narrow K-major A operand; bench/quant_mixed_notes.md):

- codes  uint8 [..., K/16, N/16, 32 * bits]: one 16 x 16 (n, k) block of codes per last-dim row,
  the blocks ordered by K block (k // 16), then N block (n // 16), so that the N blocks of one
  K block are contiguous. Within a block, value (n, k) has value offset (tile_offset)

      off(n, k) = 32 (n % 8) + 8 ((k % 8) // 2) + 4 (k % 2) + 2 ((k % 16) // 8) + (n % 16) // 8

  8 bits: byte off holds it; 4 bits: byte off // 2, the low nibble for even off (how
  cutlass::uint4b_t packs: element 0 in bits 0..3). This is CUTLASS's memory reordering atom
  for a bf16 register-sourced wgmma with the value shuffle [0, 2, 4, 6, 1, 3, 5, 7]: lane
  l = 4 (n % 8) + (k % 8) // 2 of a warp owns the 8 values 8 l .. 8 l + 7 of a block, at position
  4 (k % 2) + 2 ((k % 16) // 8) + (n % 16) // 8, so a thread loads its 8 codes of a K block
  with ONE 32-bit (4-bit codes) or 64-bit (8-bit) shared-memory load instead of one byte at a
  time (csrc/hopper/hopper_mixed_convert.cuh says how the kernel reads them). to_tiles /
  from_tiles hold the permutation.
- scales bf16 [..., K/64, N, 2] and zeros likewise: [.., t, n, h] is group 2t + h of row n. N is
  the fastest dimension because CUTLASS's scale tensor is MN-major (one TMA box per K tile of a
  tile's rows), and the two groups of a 64-wide K tile sit together as one 32-bit element
  because the mainloop loads one scale element per row and K tile: the kernel picks the half
  by the K block it converts (csrc/hopper/hopper_mixed_convert.cuh says why).

Limits: K a multiple of 64 (the kernel's K tile of two groups), N a multiple of 16 (the codes'
16-row blocks; 16-byte TMA rows of the kernel's output and of the scales follow). Non-finite
fp16 scales are carried as they are (inf * 0 is NaN, as in any product); real files have none.
"""
from typing import NamedTuple

import torch

from . import reference as ref
from .formats import check_quantized, qformat

GROUP = 32      # values per affine group
K_TILE = 64     # the kernel's K tile: one (scale, zero) pair of groups per row and K tile
N_ALIGN = 16    # rows: the codes' 16 x 16 blocks (module doc: the layout)
BLOCK = 16      # the codes' blocks: 16 rows (n) by 16 values (k)


class MixedWeights(NamedTuple):
    """A stack repacked (module doc: the layout). n_in is K; bits the codes' width (4 or 8);
    qtype the GGUF format it came from."""
    codes: torch.Tensor   # uint8 [..., K/16, N/16, 32 * bits]
    scales: torch.Tensor  # bf16 [..., K/64, N, 2]
    zeros: torch.Tensor   # bf16 [..., K/64, N, 2]
    n_in: int
    bits: int
    qtype: str

    @property
    def n_out(self):
        return self.codes.shape[-2] * BLOCK

    @property
    def leading(self):
        return tuple(self.codes.shape[:-3])


# ---- the codes' blocks (module doc: the layout) ---------------------------------------------

def tile_offset(n, k):
    """The value offset (0..255) of value (n, k) within its 16 x 16 block of codes."""
    return (32 * (n % 8) + 8 * ((k % 8) // 2) + 4 * (k % 2) + 2 * ((k % 16) // 8)
            + (n % 16) // 8)


def to_tiles(u):
    """[..., N, K] values (any dtype) -> [..., K/16, N/16, 256]: the 16 x 16 blocks in the
    kernel's order, value (n, k) at tile_offset(n, k) of block [k // 16, n // 16]."""
    *lead, n, k = u.shape
    d = len(lead)
    # (nb, m1 = (n % 16) // 8, m0 = n % 8, kb, k2 = (k % 16) // 8, k1 = (k % 8) // 2, k0 = k % 2)
    v = u.reshape(*lead, n // 16, 2, 8, k // 16, 2, 4, 2)
    kb, nb, m0, k1, k0, k2, m1 = (d + i for i in (3, 0, 2, 5, 6, 4, 1))
    v = v.permute(*range(d), kb, nb, m0, k1, k0, k2, m1)
    return v.reshape(*lead, k // 16, n // 16, 256)


def from_tiles(t):
    """to_tiles' inverse: [..., K/16, N/16, 256] -> [..., N, K] values in value order."""
    *lead, kbs, nbs, _ = t.shape
    d = len(lead)
    v = t.reshape(*lead, kbs, nbs, 8, 4, 2, 2, 2)  # (kb, nb, m0, k1, k0, k2, m1)
    kb, nb, m0, k1, k0, k2, m1 = (d + i for i in range(7))
    v = v.permute(*range(d), nb, m1, m0, kb, k2, k1, k0)
    return v.reshape(*lead, nbs * 16, kbs * 16)


def _pack(values, bits):
    """uint8 codes of values (in the order they are stored): one a byte (8 bits), or two a
    byte, the first in the low nibble (4 bits)."""
    if bits == 8:
        return values.to(torch.uint8)
    return (values[..., 0::2] | (values[..., 1::2] << 4)).to(torch.uint8)


def _unpack(codes, bits):
    """_pack's inverse: uint8 values."""
    if bits == 8:
        return codes
    return torch.stack([codes & 15, codes >> 4], dim=-1).reshape(*codes.shape[:-1], -1)


# ---- each format's groups: uint8 blocks [B, block_bytes] -> (u int32 [B, G, 32],
# s float32 [B, G], z float32 [B, G]) with the reference's value = s * u + z per group -----------

def _k_quant_params(b):
    """Q4_K / Q5_K: (d * sc_j, -(dmin * m_j)) [B, 8], as the reference computes them."""
    d, dmin = ref._f16(b, 0), ref._f16(b, 2)
    sc, m = ref._k_scales_mins(ref._field(b, 4, 12))
    return d * sc.to(torch.float32), -(dmin * m.to(torch.float32))


def _q4_k(b):
    s, z = _k_quant_params(b)
    u = ref._unpack(ref._field(b, 16, 128).reshape(-1, 4, 32), 4, dim=2).reshape(-1, 8, 32)
    return u, s, z


def _q5_k(b):
    s, z = _k_quant_params(b)
    high = ref._unpack(ref._field(b, 16, 32), 1, dim=1)  # [B, 8, 32]: bit j of byte i
    low = ref._unpack(ref._field(b, 48, 128).reshape(-1, 4, 32), 4, dim=2).reshape(-1, 8, 32)
    return low | (high << 4), s, z


def _centered(u, d, center):
    """A one-group block of value d * (u - center): (u [B, 1, 32], s = d, z = -center * d)."""
    return u[:, None, :], d, -center * d


def _q4_0(b):
    return _centered(ref._low_high_nibbles(b, 2), ref._f16(b, 0), 8)


def _q5_0(b):
    high = ref._unpack(ref._field(b, 2, 4), 1, dim=2).reshape(-1, 32)
    return _centered(ref._low_high_nibbles(b, 6) | (high << 4), ref._f16(b, 0), 16)


def _q8_0(b):
    q = b[:, 2:34].view(torch.int8).to(torch.int32)
    return _centered(q + 128, ref._f16(b, 0), 128)


def _iq4_codes(idx, device):
    """IQ4_NL table values + 128 (1..241) for 4-bit indices."""
    return ref._table("IQ4_NL_VALUES", device).to(torch.int32)[idx] + 128


def _iq4_nl(b):
    return _centered(_iq4_codes(ref._low_high_nibbles(b, 2), b.device), ref._f16(b, 0), 128)


def _iq4_xs(b):
    d = ref._f16(b, 0)
    high = (ref._u16(b, 2)[:, None] >> torch.arange(0, 16, 2, device=b.device)) & 3
    low = ref._unpack(ref._field(b, 4, 4), 4, dim=2).reshape(-1, 8)
    s = d * ((low | (high << 4)) - 32).to(torch.float32)
    idx = ref._unpack(ref._field(b, 8, 128).reshape(-1, 8, 16), 4, dim=2).reshape(-1, 8, 32)
    return _iq4_codes(idx, b.device), s, -128 * s


# format -> (code bits, groups function)
FORMATS = {
    "Q4_K": (4, _q4_k),
    "Q4_0": (4, _q4_0),
    "Q5_K": (8, _q5_k),
    "Q5_0": (8, _q5_0),
    "Q8_0": (8, _q8_0),
    "IQ4_NL": (8, _iq4_nl),
    "IQ4_XS": (8, _iq4_xs),
}


def code_bits(qtype) -> int:
    """The codes' width of format `qtype` in the repack, 0 where the mixed-input GEMM cannot
    take it (not a format of 32-value affine groups)."""
    return FORMATS.get(qtype, (0, None))[0]


def groups(w_q, qtype, n_in):
    """(u int32 [..., N, K], s float32 [..., N, K/32], z float32 [..., N, K/32]): the exact
    affine form of blocks w_q, s * u + z being dequantize_reference's value."""
    fmt = qformat(qtype)
    lead, n_out = tuple(w_q.shape[:-2]), w_q.shape[-2]
    u, s, z = FORMATS[fmt.name][1](w_q.reshape(-1, fmt.block_bytes))
    return (u.reshape(*lead, n_out, n_in), s.reshape(*lead, n_out, n_in // GROUP),
            z.reshape(*lead, n_out, n_in // GROUP))


def _check(w_q, qtype, n_in):
    name = qformat(qtype).name
    if name not in FORMATS:
        raise ValueError(f"qtype: the mixed-input GEMM takes {', '.join(FORMATS)} (formats of "
                         f"32-value affine groups), got {name}")
    check_quantized(w_q, name, n_in)
    n_out = w_q.shape[-2]
    if n_out % N_ALIGN:
        raise ValueError(f"w_q: the mixed-input GEMM needs N (the output rows, dim -2) to be a "
                         f"multiple of {N_ALIGN} (the codes' 16-row blocks), got N={n_out}")
    if n_in == 0 or n_in % K_TILE:
        raise ValueError(f"n_in: the mixed-input GEMM needs K to be a positive multiple of "
                         f"{K_TILE} (its K tile of two groups), got {n_in}")
    return name


# values converted per step of repack: bounds its temporaries (the reference's int32 / float32
# unpacking, ~40 bytes a value at its peak) to ~160 MB whatever the stack's size, so a layer's
# first call does not need several times its weights' memory beside them
CHUNK_VALUES = 1 << 22


def repack(w_q, qtype, n_in):
    """MixedWeights from blocks w_q (uint8 [..., N, row bytes]) of format `qtype`, on w_q's
    device. One pass over the weights, meant once per stack at load time, about CHUNK_VALUES
    values at a time (whole 16-row blocks of one leading index a step)."""
    name = _check(w_q, qtype, n_in)
    bits = FORMATS[name][0]
    lead, n_out = tuple(w_q.shape[:-2]), w_q.shape[-2]
    if torch.compiler.is_compiling():
        # traced (torch.compile), one step: the loops would be unrolled into the graph
        u, s, z = groups(w_q, name, n_in)
        codes, s_rows, z_rows = _pack(to_tiles(u), bits), s.to(torch.bfloat16), z.to(
            torch.bfloat16)
    else:
        mats = w_q.reshape(-1, n_out, w_q.shape[-1])
        dev = w_q.device
        codes = torch.empty(mats.shape[0], n_in // BLOCK, n_out // BLOCK, 32 * bits,
                            dtype=torch.uint8, device=dev)
        s_rows = torch.empty(mats.shape[0], n_out, n_in // GROUP, dtype=torch.bfloat16,
                             device=dev)
        z_rows = torch.empty_like(s_rows)
        step = max(BLOCK, CHUNK_VALUES // n_in // BLOCK * BLOCK)  # rows: whole blocks
        for i in range(mats.shape[0]):
            for r in range(0, n_out, step):
                u, s, z = groups(mats[i, r:r + step], name, n_in)
                codes[i, :, r // BLOCK:(r + step) // BLOCK] = _pack(to_tiles(u), bits)
                s_rows[i, r:r + step], z_rows[i, r:r + step] = s, z  # rounded to bf16 once

    def by_k_tile(v):  # [..., N, K/32] -> [..., K/64, N, 2]
        g = v.reshape(*lead, n_out, n_in // K_TILE, 2)
        return g.movedim(-2, -3).contiguous()

    return MixedWeights(codes.reshape(*lead, *codes.shape[-3:]), by_k_tile(s_rows),
                        by_k_tile(z_rows), int(n_in), bits, name)


def unpack_codes(m):
    """uint8 [..., N, K]: the codes of a MixedWeights in value order."""
    return from_tiles(_unpack(m.codes, m.bits))


def group_params(m):
    """(scales, zeros) as float32 [..., N, K/32] (group order along K) from a MixedWeights."""
    def by_row(v):
        return v.movedim(-3, -2).reshape(*m.leading, m.n_out, m.n_in // GROUP).float()
    return by_row(m.scales), by_row(m.zeros)


_LOW = (1 << 45) - 1  # the float64 mantissa bits below bf16's 7


def bf16_of_sum(a, b):
    """bf16 [same shape]: the exact sum a + b of float64 tensors rounded to bf16 ONCE (to
    nearest, ties to even; overflow to inf, bf16 subnormals kept), what a bf16 fused
    multiply-add gives for a = u * s, b = z (module doc). Torch's float64 -> bf16 cast would
    round twice (via float32). The float64 sum hi is exact for the repack's values; where it is
    not, its error (two-sum) decides a tie of hi. Non-finite sums are kept as they are."""
    hi = a + b
    finite = torch.isfinite(hi)
    av, bv = torch.where(finite, a, 0.0), torch.where(finite, b, 0.0)
    hf = av + bv
    bb = hf - av
    err = (av - (hf - bb)) + (bv - bb)  # hf + err == av + bv exactly
    bits = hf.view(torch.int64)
    # normal: round the magnitude's bits (sign-magnitude: the same addition for either sign)
    tie = (bits & _LOW) == (1 << 44)
    toward = torch.where((err > 0) == (hf > 0), 1, -1)
    bits = bits + torch.where(tie & (err != 0), toward, 0)  # off the tie, toward the exact sum
    bits = (bits + (_LOW >> 1) + ((bits >> 45) & 1)) & ~_LOW
    normal = bits.view(torch.float64)
    # subnormal (|sum| < 2^-126): a multiple of 2^-133, ties to even, err deciding a tie
    v = hf * 2.0 ** 133
    half = (v - torch.floor(v)) == 0.5
    q = torch.where(half & (err != 0), torch.floor(v) + (err > 0).to(v.dtype), torch.round(v))
    sub = q * 2.0 ** -133
    w = torch.where(hf.abs() < 2.0 ** -126, sub, normal)
    w = torch.where(finite, w, hi)
    return w.to(torch.float32).to(torch.bfloat16)  # exact: a bf16 value (or inf, NaN)


def mixed_dequantize(m, dtype=torch.bfloat16):
    """[..., N, K] the weights the mixed-input kernel multiplies (module doc), cast to `dtype`
    (exact for float32): 4-bit codes bf16_rn(u * s + z), one rounding; 8-bit codes
    bf16(float32(u * s + z))."""
    s, z = group_params(m)
    shape = (*m.leading, m.n_out, m.n_in // GROUP, GROUP)
    u = unpack_codes(m).reshape(shape)
    if m.bits == 4:  # u * s exact in float64 (4 x 8 significant bits)
        w = bf16_of_sum(u.double() * s.double()[..., None], z.double()[..., None])
    else:  # u * s exact in float32: one rounding, in the add, then to bf16
        w = (u.float() * s[..., None] + z[..., None]).to(torch.bfloat16)
    return w.reshape(*m.leading, m.n_out, m.n_in).to(dtype)


def concat_n(first, second):
    """One MixedWeights of first's rows then second's (the same leading dims, K and code width):
    gate and up held as two stacks become the gate/up GEMM's [.., 2I, H]."""
    if (first.leading, first.n_in, first.bits) != (second.leading, second.n_in, second.bits):
        raise ValueError(f"concat_n needs the same leading dims, K and code width, got "
                         f"{first.leading} K={first.n_in} {first.bits}-bit and {second.leading} "
                         f"K={second.n_in} {second.bits}-bit")
    qtype = first.qtype if first.qtype == second.qtype else f"{first.qtype}+{second.qtype}"
    # the codes: along their N-block dim (within a K block the N blocks are contiguous, so the
    # blocks of first then second are the blocks of the concatenated rows)
    return MixedWeights(torch.cat([first.codes, second.codes], dim=-2),
                        torch.cat([first.scales, second.scales], dim=-2),
                        torch.cat([first.zeros, second.zeros], dim=-2), first.n_in, first.bits,
                        qtype)


def repacked_bytes(m):
    """Bytes a GEMM reads of the repacked weights (codes, scales, zeros): bits + 1 per value
    (2 x 16 bits of scale and zero per 32 values), against bf16's 16 (Q4_K's GGUF 4.5)."""
    return sum(t.numel() * t.element_size() for t in (m.codes, m.scales, m.zeros))
