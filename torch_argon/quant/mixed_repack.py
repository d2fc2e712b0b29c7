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

The kernel computes, per value, bf16(float(u) * s + z): u * s is exact in float32 (at most 8 x 8
significant bits), so a fused multiply-add and a multiply followed by an add round alike, once
in float32 and once to bf16. mixed_dequantize does exactly that, so it is the kernel's weight bit
for bit; it differs from dequantize_reference by the bf16 roundings of s, z and w (at most 2^-8
of max(u) |s| + |z| + |w| per value; where z is a power-of-two multiple of s, its rounding is
s's, and the value is bf16(bf16(s) * (u - c))).

The layout (what the CUTLASS sm90 mixed-input mainloop reads with the problem transposed,
D^T = W @ X^T, the weight as its narrow K-major A operand; bench/quant_mixed_notes.md):

- codes  uint8 [..., N, K * bits / 8]: 8 bits, value k in byte k; 4 bits, value k in byte k // 2,
  the low nibble for even k (how cutlass::uint4b_t packs: element 0 in bits 0..3).
- scales bf16 [..., K/64, N, 2] and zeros likewise: [.., t, n, h] is group 2t + h of row n. N is
  the fastest dimension because CUTLASS's scale tensor is MN-major (one TMA box per K tile of a
  tile's rows), and the two groups of a 64-wide K tile sit together as one 32-bit element
  because the mainloop loads one scale element per row and K tile: the kernel picks the half
  by the K block it converts (csrc/hopper/hopper_mixed_convert.cuh says why).

Limits: K a multiple of 64 (the kernel's K tile of two groups), N a multiple of 8 (16-byte TMA
rows of the kernel's output and 16-byte rows of the scales). Non-finite fp16 scales are carried
as they are (inf * 0 is NaN, as in any product); real files have none.
"""
from typing import NamedTuple

import torch

from . import reference as ref
from .formats import check_quantized, qformat

GROUP = 32      # values per affine group
K_TILE = 64     # the kernel's K tile: one (scale, zero) pair of groups per row and K tile
N_ALIGN = 8     # rows: 16-byte TMA rows of bf16 outputs, 4-byte scale pairs


class MixedWeights(NamedTuple):
    """A stack repacked (module doc: the layout). n_in is K; bits the codes' width (4 or 8);
    qtype the GGUF format it came from."""
    codes: torch.Tensor   # uint8 [..., N, K * bits / 8]
    scales: torch.Tensor  # bf16 [..., K/64, N, 2]
    zeros: torch.Tensor   # bf16 [..., K/64, N, 2]
    n_in: int
    bits: int
    qtype: str

    @property
    def n_out(self):
        return self.codes.shape[-2]

    @property
    def leading(self):
        return tuple(self.codes.shape[:-2])


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
                         f"multiple of {N_ALIGN} (16-byte TMA rows), got N={n_out}")
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
    device. One pass over the weights, meant once per stack at load time, CHUNK_VALUES values
    at a time."""
    name = _check(w_q, qtype, n_in)
    bits = FORMATS[name][0]
    lead, n_out = tuple(w_q.shape[:-2]), w_q.shape[-2]
    rows = w_q.reshape(-1, w_q.shape[-1])
    codes = torch.empty(rows.shape[0], n_in * bits // 8, dtype=torch.uint8, device=w_q.device)
    s_rows = torch.empty(rows.shape[0], n_in // GROUP, dtype=torch.bfloat16, device=w_q.device)
    z_rows = torch.empty_like(s_rows)
    # traced (torch.compile), one step: the loop would be unrolled into the graph
    step = rows.shape[0] if torch.compiler.is_compiling() else max(1, CHUNK_VALUES // n_in)
    for r in range(0, rows.shape[0], step):
        u, s, z = groups(rows[r:r + step], name, n_in)
        codes[r:r + step] = u if bits == 8 else u[:, 0::2] | (u[:, 1::2] << 4)
        s_rows[r:r + step], z_rows[r:r + step] = s, z  # rounded to bf16 once

    def by_k_tile(v):  # [rows, K/32] -> [..., K/64, N, 2]
        g = v.reshape(*lead, n_out, n_in // K_TILE, 2)
        return g.movedim(-2, -3).contiguous()

    return MixedWeights(codes.reshape(*lead, n_out, -1), by_k_tile(s_rows), by_k_tile(z_rows),
                        int(n_in), bits, name)


def unpack_codes(m):
    """uint8 [..., N, K]: the codes of a MixedWeights in value order."""
    c = m.codes
    if m.bits == 8:
        return c
    return torch.stack([c & 15, c >> 4], dim=-1).reshape(*c.shape[:-1], m.n_in)


def group_params(m):
    """(scales, zeros) as float32 [..., N, K/32] (group order along K) from a MixedWeights."""
    def by_row(v):
        return v.movedim(-3, -2).reshape(*m.leading, m.n_out, m.n_in // GROUP).float()
    return by_row(m.scales), by_row(m.zeros)


def mixed_dequantize(m, dtype=torch.bfloat16):
    """[..., N, K] the weights the mixed-input kernel multiplies: bf16(float(u) * s + z) per
    value (module doc), cast to `dtype` (exact for float32)."""
    s, z = group_params(m)
    u = unpack_codes(m).to(torch.float32)
    shape = (*m.leading, m.n_out, m.n_in // GROUP, GROUP)
    w = u.reshape(shape) * s[..., None] + z[..., None]   # u * s exact: one rounding, in the add
    return w.to(torch.bfloat16).reshape(*m.leading, m.n_out, m.n_in).to(dtype)


def concat_n(first, second):
    """One MixedWeights of first's rows then second's (the same leading dims, K and code width):
    gate and up held as two stacks become the gate/up GEMM's [.., 2I, H]."""
    if (first.leading, first.n_in, first.bits) != (second.leading, second.n_in, second.bits):
        raise ValueError(f"concat_n needs the same leading dims, K and code width, got "
                         f"{first.leading} K={first.n_in} {first.bits}-bit and {second.leading} "
                         f"K={second.n_in} {second.bits}-bit")
    qtype = first.qtype if first.qtype == second.qtype else f"{first.qtype}+{second.qtype}"
    return MixedWeights(torch.cat([first.codes, second.codes], dim=-2),
                        torch.cat([first.scales, second.scales], dim=-2),
                        torch.cat([first.zeros, second.zeros], dim=-2), first.n_in, first.bits,
                        qtype)


def repacked_bytes(m):
    """Bytes a GEMM reads of the repacked weights (codes, scales, zeros): bits + 1 per value
    (2 x 16 bits of scale and zero per 32 values), against bf16's 16 (Q4_K's GGUF 4.5)."""
    return sum(t.numel() * t.element_size() for t in (m.codes, m.scales, m.zeros))
