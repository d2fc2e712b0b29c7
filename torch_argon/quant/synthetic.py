"""Random quantized weights for tests, benchmarks and the main job, and random blocks with their
float fields forced finite for the bit-exactness tests.

random_quantized draws the quant bits uniformly at random (every byte of a block except its
scale fields) and sets the scale fields so that the dequantized weight has mean about 0 and
standard deviation about `std`. Every scale varies: each block's scale is `std`'s scale times
2^u with u uniform in [-1, 1] (MXFP4: a random power of two), and each sub-block scale is drawn
from the upper half of its field's range, so a kernel that reads the wrong block's or sub-block's
scale is caught. The K-quants' mins are set to centre each sub-block (Q4_K: dmin*m = 7.5*d*sc);
the formats with a fixed offset keep it (Q4_0 values are d*(q-8): mean -0.5*d).

How close it gets: the scales are solved from the exact moments of the value distributions, so
the sample std differs from `std` only by sampling noise and the rounding of the scales to fp16.
Measured over 256 x 4096 values, seeds 0-3, std 0.02 and 1.0: sample std / std within
[0.99, 1.01] for F32/F16/BF16/Q8_0/Q4_0/Q5_0/IQ4_NL/MXFP4/Q4_K/Q2_K and within [0.986, 1.018]
for IQ4_XS/Q5_K/Q6_K/Q3_K/IQ2_XS/IQ3_S (their sub-block scales spread more); the test allows
[0.95, 1.05] at 256 x 2048. Small tensors are noisier: one block may be off by up to 2x, that is
the spread. Mean / std is about 0 except where the format fixes an offset: Q4_0 -0.10,
IQ4_NL -0.08, Q5_0 -0.05. Values are always finite. At std 0.02 the fp16 scales of IQ4_XS, Q3_K
and Q6_K are subnormal, as in real files of those types.
"""
import math

import torch

from . import tables
from .formats import qformat, row_bytes

# Each block's scale is the base scale times 2^u, u ~ U(-1, 1): E[r] and E[r^2] of r = 2^u.
_R_MEAN = (2.0 - 0.5) / (2.0 * math.log(2.0))
_R_SQ_MEAN = (4.0 - 0.25) / (2.0 * math.log(4.0))

_HIGH_6BIT_SIGNED = tuple(range(16, 32)) + tuple(range(-31, -15))  # field value - 32
_HIGH_INT8 = tuple(range(64, 128)) + tuple(range(-127, -63))


def _grid_magnitudes(name):
    cols = 8 if name == "IQ2XS_GRID" else 4
    return tuple((row >> (8 * k)) & 0xFF for row in getattr(tables, name) for k in range(cols))


def _moments(values):
    n = len(values)
    return sum(values) / n, sum(v * v for v in values) / n


# Per format: (sub-block scale multipliers s, element values v), each equally likely, such that
# a value is about d * s * v (d the block scale). Signed grid values carry a random sign: mean 0.
def _distributions(name):
    nib = tuple(range(16))
    if name == "Q8_0":
        return (1,), tuple(range(-128, 128))
    if name == "Q4_0":
        return (1,), tuple(range(-8, 8))
    if name == "Q5_0":
        return (1,), tuple(range(-16, 16))
    if name == "IQ4_NL":
        return (1,), tables.IQ4_NL_VALUES
    if name == "MXFP4":
        return (1,), tables.MXFP4_VALUES_X2
    if name == "IQ4_XS":
        return _HIGH_6BIT_SIGNED, tables.IQ4_NL_VALUES
    if name == "Q4_K":
        return tuple(range(32, 64)), tuple(q - 7.5 for q in nib)
    if name == "Q5_K":
        return tuple(range(32, 64)), tuple(q - 15.5 for q in range(32))
    if name == "Q6_K":
        return _HIGH_INT8, tuple(range(-32, 32))
    if name == "Q3_K":
        return _HIGH_6BIT_SIGNED, tuple(range(-4, 4))
    if name == "Q2_K":
        return tuple(range(8, 16)), (-1.5, -0.5, 0.5, 1.5)
    if name == "IQ2_XS":
        magnitudes = _grid_magnitudes("IQ2XS_GRID")
        signed = magnitudes + tuple(-m for m in magnitudes)
        return tuple((ls + 0.5) * 0.25 for ls in range(8, 16)), signed
    if name == "IQ3_S":
        magnitudes = _grid_magnitudes("IQ3S_GRID")
        signed = magnitudes + tuple(-m for m in magnitudes)
        return tuple(1 + 2 * ls for ls in range(8, 16)), signed
    raise AssertionError(name)


def _base_scale(name, std):
    """The block scale d0 with Var(d0 * r * s * v) = std^2 over the format's distributions."""
    s_mean, s_sq = _moments(_distributions(name)[0])
    v_mean, v_sq = _moments(_distributions(name)[1])
    var_unit = _R_SQ_MEAN * s_sq * v_sq - (_R_MEAN * s_mean * v_mean) ** 2
    return std / math.sqrt(var_unit)


def _pick(values, shape, generator):
    idx = torch.randint(0, len(values), shape, generator=generator)
    return torch.tensor(values, dtype=torch.int32)[idx]


def _put_f16(blocks, off, d):
    blocks[:, off:off + 2] = d.to(torch.float16)[:, None].view(torch.uint8)


def _put_k_scales(blocks, off, sc, m):
    """Q4_K/Q5_K: pack 8 six-bit scales and mins into 12 bytes."""
    lo, hi = sc[:, :4], sc[:, 4:]
    mlo, mhi = m[:, :4], m[:, 4:]
    packed = torch.cat([(lo & 63) | ((hi >> 4) << 6), (mlo & 63) | ((mhi >> 4) << 6),
                        (hi & 15) | ((mhi & 15) << 4)], dim=1)
    blocks[:, off:off + 12] = packed.to(torch.uint8)


def _put_nibbles(blocks, off, x):
    """Pack x [B, 2n] (values 0..15) into n bytes: element 2j low nibble, 2j+1 high."""
    blocks[:, off:off + x.shape[1] // 2] = (x[:, 0::2] | (x[:, 1::2] << 4)).to(torch.uint8)


def _write_scales(name, blocks, d, generator):
    """Set the scale fields of `blocks` (uint8 [B, block_bytes]) for block scales d [B]."""
    B = blocks.shape[0]
    s_values = _distributions(name)[0]
    if name in ("Q8_0", "Q4_0", "Q5_0", "IQ4_NL", "IQ4_XS", "IQ2_XS", "IQ3_S"):
        _put_f16(blocks, 0, d)
    if name == "IQ4_XS":
        u = _pick(s_values, (B, 8), generator) + 32               # 6-bit fields
        high = ((u >> 4) << torch.arange(0, 16, 2, dtype=torch.int32)).sum(dim=1)
        blocks[:, 2] = (high & 0xFF).to(torch.uint8)
        blocks[:, 3] = (high >> 8).to(torch.uint8)
        _put_nibbles(blocks, 4, u & 15)
    elif name in ("Q4_K", "Q5_K"):
        sc = _pick(s_values, (B, 8), generator)
        centre = 7.5 if name == "Q4_K" else 15.5
        _put_f16(blocks, 0, d)
        _put_f16(blocks, 2, d * centre)
        _put_k_scales(blocks, 4, sc, sc)
    elif name == "Q6_K":
        blocks[:, 192:208] = _pick(s_values, (B, 16), generator).to(torch.int8).view(torch.uint8)
        _put_f16(blocks, 208, d)
    elif name == "Q3_K":
        u = _pick(s_values, (B, 16), generator) + 32
        low = (u[:, :8] & 15) | ((u[:, 8:] & 15) << 4)
        high = sum(((u[:, 4 * k:4 * k + 4] >> 4) & 3) << (2 * k) for k in range(4))
        blocks[:, 96:104] = low.to(torch.uint8)
        blocks[:, 104:108] = high.to(torch.uint8)
        _put_f16(blocks, 108, d)
    elif name == "Q2_K":
        sc = _pick(s_values, (B, 16), generator)
        blocks[:, 0:16] = (sc | (sc << 4)).to(torch.uint8)
        _put_f16(blocks, 80, d)
        _put_f16(blocks, 82, d * 1.5)
    elif name == "IQ2_XS":
        _put_nibbles(blocks, 66, torch.randint(8, 16, (B, 16), generator=generator))
    elif name == "IQ3_S":
        _put_nibbles(blocks, 106, torch.randint(8, 16, (B, 8), generator=generator))


def _mxfp4_exponents(d0, n_blocks, generator):
    """e8m0 bytes whose scales 2^(e-128) have mean square d0^2 * _R_SQ_MEAN (as the fp16
    formats' 2^u spread): e = e0 + (1 with probability p) + k, k uniform in {-1, 0, 1}."""
    target = d0 * d0 * _R_SQ_MEAN / ((0.25 + 1.0 + 4.0) / 3.0)   # E[4^k] = 1.75
    e0 = math.floor(math.log2(target) / 2.0)
    p = (target / 4.0 ** e0 - 1.0) / 3.0
    e = e0 + 128 + (torch.rand(n_blocks, generator=generator) < p).to(torch.int32)
    e = e + torch.randint(-1, 2, (n_blocks,), generator=generator, dtype=torch.int32)
    if e.numel() and (e.min() < 1 or e.max() > 254):
        raise ValueError("std out of range for MXFP4's exponent byte")
    return e.to(torch.uint8)


def random_quantized(qtype, n_out, n_in, *, leading=(), std=0.02, generator=None, device=None):
    """uint8 [*leading, n_out, row_bytes] blocks of `qtype` whose dequantized values are finite,
    with mean about 0 and standard deviation about `std` (module doc: how close, per format).

    Drawn on the CPU with `generator` (reproducible), then moved to `device`."""
    fmt = qformat(qtype)
    rb = row_bytes(fmt, n_in)
    leading = tuple(int(x) for x in leading)
    shape = (*leading, n_out, rb)
    if fmt.is_float:
        values = torch.randn(*leading, n_out, n_in, generator=generator) * std
        dtype = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}[fmt.name]
        return _to(values.to(dtype).view(torch.uint8).reshape(shape), device)
    n_blocks = math.prod(shape) // fmt.block_bytes
    blocks = torch.randint(0, 256, (n_blocks, fmt.block_bytes), dtype=torch.uint8,
                           generator=generator)
    d0 = _base_scale(fmt.name, std)
    if fmt.name == "MXFP4":
        blocks[:, 0] = _mxfp4_exponents(d0, n_blocks, generator)
    else:
        _check_fp16_range(fmt.name, std, d0)
        spread = torch.rand(n_blocks, generator=generator) * 2.0 - 1.0
        _write_scales(fmt.name, blocks, d0 * torch.exp2(spread), generator)
    return _to(blocks.reshape(shape), device)


def _to(t, device):
    return t if device is None else t.to(device)


def _check_fp16_range(name, std, d0):
    # Block scales run from d0/2 to 2*d0 and the K-quant mins up to 15.5 times that. The largest
    # must be a finite fp16; the smallest may be subnormal (real IQ4_XS, Q3_K and Q6_K files
    # at std 0.02 have such scales) but keep at least 5 significant bits (>= 2^-20). Both
    # bounds scale with std, so say which stds work.
    smallest, largest = d0 / 2.0, d0 * 2.0 * 15.5
    low, high = 2.0 ** -20, 65504.0
    if smallest < low or largest > high:
        raise ValueError(f"std={std} is out of range for {name}: its fp16 scales would "
                         f"underflow or overflow; std from {std * low / smallest:.3g} to "
                         f"{std * high / largest:.3g} works")


def force_finite_scales(w_q, qtype):
    """A copy of blocks `w_q` with every inf/NaN float field made finite: each fp16 (and bf16,
    f32) field whose exponent is all ones gets its top exponent bit cleared (so random bytes
    keep random finite scales). MXFP4's exponent byte is always finite as ggml decodes it."""
    fmt = qformat(qtype)
    blocks = w_q.reshape(-1, fmt.block_bytes).clone()
    for field in fmt.fields:
        width = {"f16": 2, "bf16": 2, "f32": 4}.get(field.kind)
        if width is None:
            continue
        for off in range(field.offset, field.offset + field.nbytes, width):
            hi, lo = blocks[:, off + width - 1], blocks[:, off + width - 2]
            if field.kind == "f16":
                all_ones = (hi & 0x7C) == 0x7C
            else:
                all_ones = ((hi & 0x7F) == 0x7F) & ((lo & 0x80) == 0x80)
            blocks[:, off + width - 1] = torch.where(all_ones, hi & 0xBF, hi)
    return blocks.reshape(w_q.shape)
