"""Pure-torch dequantization of the GGUF block formats: the oracle every quantized kernel is
tested against.

dequantize_reference(w_q, qtype, n_in) turns uint8 blocks [..., N, row_bytes] into float32
[..., N, n_in], with the same bits as the `gguf` package's numpy dequantize (its test:
tests/test_quant_reference.py). Bit-exactness comes from doing each float32 operation that
gguf does, in its order:

- An fp16 scale widens to float32 exactly. Non-finite halves are rebuilt from their bits
  (sign, all-ones exponent, payload << 13, a signalling NaN left signalling) because torch's own
  half->float gives a canonical NaN on some CPU paths.
- Products and differences are separate float32 operations: Q4_K is (d*sc)*q - (dmin*m), never
  a fused multiply-add (one rounding instead of two gives other bits). Kernels must not contract
  them either (no -ffast-math / fp-contract for these lines).
- A sign is a multiplication by +-1.0: a multiply leaves a NaN's sign alone, a negation flips it.
- a - b with both NaN gives a's NaN, as numpy's float32 subtract does (x86 and ARM return the
  first NaN operand); torch's CPU sub was measured returning b's, so the reference selects a's.

Every value is computed on the input's device (CPU, CUDA, MPS). On the CPU the result equals
gguf bit for bit, NaN payloads included. GPUs return their own canonical NaN from arithmetic,
so there NaNs agree as NaNs only; and a device that flushes subnormals (Metal may) differs on
MXFP4 blocks with exponent byte 0..2, whose scale 2^-128..2^-126 is subnormal.
"""
import functools

import torch

from . import tables
from .formats import check_quantized

# Values dequantized per step: bounds the memory of the int32 copies of the bytes and of the
# temporaries whatever the tensor's size (a whole expert stack can be hundreds of millions).
_CHUNK_VALUES = 1 << 21
_INT32_SIGN = -(1 << 31)


def dequantize_reference(w_q, qtype, n_in):
    """float32 [..., N, n_in] from `qtype` blocks `w_q` (uint8 [..., N, row_bytes]); qtype is a
    GGUF type name ("Q4_K"), a gguf.GGMLQuantizationType or its int value."""
    fmt = check_quantized(w_q, qtype, n_in)
    n_blocks = w_q.numel() // fmt.block_bytes
    blocks = w_q.reshape(n_blocks, fmt.block_bytes)
    dequant = _DEQUANT[fmt.name]
    step = max(1, _CHUNK_VALUES // fmt.block_elems)
    if n_blocks <= step:
        out = dequant(blocks)
    else:
        out = torch.empty(n_blocks, fmt.block_elems, dtype=torch.float32, device=w_q.device)
        for start in range(0, n_blocks, step):
            out[start:start + step] = dequant(blocks[start:start + step])
    return out.reshape(*w_q.shape[:-1], n_in)


# Byte-field helpers. `b` is always one chunk of blocks, uint8 [B, block_bytes]; fields are
# widened to int32 before any arithmetic (portable across devices, and contiguous, so fast).

def _field(b, off, n):
    """Bytes off..off+n of each block as int32 [B, n]."""
    return b[:, off:off + n].to(torch.int32)


def _unpack(x, width, dim):
    """The `width`-bit fields of the bytes in x, least significant first, stacked at `dim`."""
    mask = (1 << width) - 1
    return torch.stack([(x >> shift) & mask for shift in range(0, 8, width)], dim=dim)


def _int8_as_float(b, off, n):
    return b[:, off:off + n].view(torch.int8).to(torch.float32)


def _u16(b, off):
    return b[:, off].to(torch.int32) | (b[:, off + 1].to(torch.int32) << 8)


def _half_bits_to_float(h):
    """float32 from IEEE half bits h (int32 0..65535), exactly as numpy widens a half."""
    value = torch.where(h >= 0x8000, h - 0x10000, h).to(torch.int16).view(torch.float16).float()
    nonfinite = ((h & 0x3FF) << 13) | 0x7F800000
    nonfinite = torch.where(h >= 0x8000, nonfinite | _INT32_SIGN, nonfinite)
    is_nonfinite = (h & 0x7C00) == 0x7C00
    return torch.where(is_nonfinite, nonfinite, value.view(torch.int32)).view(torch.float32)


def _f16(b, off):
    """The fp16 field at byte `off` of each block as float32 [B, 1]."""
    return _half_bits_to_float(_u16(b, off))[:, None]


def _sub(a, b):
    """a - b in float32, returning a's NaN where a is NaN (numpy's order; see the module doc)."""
    return torch.where(torch.isnan(a), a, a - b)


def _sign(bits):
    """+1.0 where a sign bit is 0, -1.0 where it is 1."""
    return 1.0 - 2.0 * bits.to(torch.float32)


@functools.lru_cache(maxsize=None)
def _cpu_table(name):
    if name in ("IQ2XS_GRID", "IQ3S_GRID"):
        # One int per grid row, element k in byte k: unpack into [rows, cols] float32.
        cols = 8 if name == "IQ2XS_GRID" else 4
        packed = torch.tensor(getattr(tables, name), dtype=torch.int64)[:, None]
        shifts = torch.arange(0, 8 * cols, 8, dtype=torch.int64)
        return ((packed >> shifts) & 0xFF).to(torch.float32)
    values = torch.tensor(getattr(tables, name), dtype=torch.int64)
    return values if name == "IQ2XS_SIGNS" else values.to(torch.float32)


_device_tables = {}


def _table(name, device):
    key = (name, str(device))
    t = _device_tables.get(key)
    if t is None:
        t = _device_tables[key] = _cpu_table(name).to(device)
    return t


# One function per format: uint8 [B, block_bytes] -> float32 [B, block_elems]. Layouts:
# torch_argon/quant/formats.py and docs/quantized-formats.md.

def _f32(b):
    x = _field(b, 0, 4)
    top = torch.where(x[:, 3] >= 128, x[:, 3] - 256, x[:, 3])
    bits = (top * (1 << 24)) | (x[:, 2] << 16) | (x[:, 1] << 8) | x[:, 0]
    return bits.view(torch.float32)[:, None]


def _f16_values(b):
    return _f16(b, 0)


def _bf16(b):
    h = _u16(b, 0)
    return (torch.where(h >= 0x8000, h - 0x10000, h) * 0x10000).view(torch.float32)[:, None]


def _q8_0(b):
    d = _f16(b, 0)
    return _int8_as_float(b, 2, 32) * d


def _low_high_nibbles(b, off):
    """[B, 32]: the low nibbles of bytes off..off+15, then their high nibbles."""
    return _unpack(_field(b, off, 16), 4, dim=1).reshape(-1, 32)


def _q4_0(b):
    d = _f16(b, 0)
    return d * (_low_high_nibbles(b, 2) - 8).to(torch.float32)


def _q5_0(b):
    d = _f16(b, 0)
    high = _unpack(_field(b, 2, 4), 1, dim=2).reshape(-1, 32)  # bit i of the u32: value i
    q = _low_high_nibbles(b, 6) | (high << 4)
    return d * (q - 16).to(torch.float32)


def _iq4_nl(b):
    d = _f16(b, 0)
    return d * _table("IQ4_NL_VALUES", b.device)[_low_high_nibbles(b, 2)]


def _mxfp4(b):
    e = _field(b, 0, 1)
    # 2^(e-128) as float32 bits: subnormal 0x00200000 / 0x00400000 for e = 0 / 1.
    d = torch.where(e < 2, 0x00200000 * (e + 1), (e - 1) << 23).view(torch.float32)
    return d * _table("MXFP4_VALUES_X2", b.device)[_low_high_nibbles(b, 1)]


def _iq4_xs(b):
    d = _f16(b, 0)
    high = (_u16(b, 2)[:, None] >> torch.arange(0, 16, 2, device=b.device)) & 3
    low = _unpack(_field(b, 4, 4), 4, dim=2).reshape(-1, 8)
    dl = (d * ((low | (high << 4)) - 32).to(torch.float32))[:, :, None]
    idx = _unpack(_field(b, 8, 128).reshape(-1, 8, 16), 4, dim=2).reshape(-1, 8, 32)
    return (dl * _table("IQ4_NL_VALUES", b.device)[idx]).reshape(-1, 256)


def _k_scales_mins(s):
    """Q4_K/Q5_K: the 12 packed bytes -> 6-bit scales [B, 8] and mins [B, 8]."""
    lo, mid, top = s[:, 0:4], s[:, 4:8], s[:, 8:12]
    scales = torch.cat([lo & 63, (top & 15) | ((lo >> 2) & 0x30)], dim=1)
    mins = torch.cat([mid & 63, (top >> 4) | ((mid >> 2) & 0x30)], dim=1)
    return scales, mins


def _q4_k(b):
    d, dmin = _f16(b, 0), _f16(b, 2)
    scales, mins = _k_scales_mins(_field(b, 4, 12))
    dl = (d * scales.to(torch.float32))[:, :, None]
    ml = (dmin * mins.to(torch.float32))[:, :, None]
    q = _unpack(_field(b, 16, 128).reshape(-1, 4, 32), 4, dim=2).reshape(-1, 8, 32)
    return _sub(dl * q.to(torch.float32), ml).reshape(-1, 256)


def _q5_k(b):
    d, dmin = _f16(b, 0), _f16(b, 2)
    scales, mins = _k_scales_mins(_field(b, 4, 12))
    dl = (d * scales.to(torch.float32))[:, :, None]
    ml = (dmin * mins.to(torch.float32))[:, :, None]
    high = _unpack(_field(b, 16, 32), 1, dim=1)           # [B, 8, 32]: bit s of byte j
    low = _unpack(_field(b, 48, 128).reshape(-1, 4, 32), 4, dim=2).reshape(-1, 8, 32)
    q = (low | (high << 4)).to(torch.float32)
    return _sub(dl * q, ml).reshape(-1, 256)


def _q6_k(b):
    low = _unpack(_field(b, 0, 128).reshape(-1, 2, 64), 4, dim=2).reshape(-1, 256)
    high = _unpack(_field(b, 128, 64).reshape(-1, 2, 32), 2, dim=2).reshape(-1, 256)
    scales = _int8_as_float(b, 192, 16)
    d = _f16(b, 208)
    dl = (d * scales)[:, :, None]
    q = ((low | (high << 4)) - 32).to(torch.float32).reshape(-1, 16, 16)
    return (dl * q).reshape(-1, 256)


def _q3_k(b):
    d = _f16(b, 108)
    s = _field(b, 96, 12)
    low = _unpack(s[:, 0:8], 4, dim=1).reshape(-1, 16)   # scale i: nibble i/8 of byte i%8
    high = _unpack(s[:, 8:12], 2, dim=1).reshape(-1, 16)  # scale i: bits 2(i/4) of byte 8+i%4
    dl = (d * ((low | (high << 4)) - 32).to(torch.float32))[:, :, None]
    q2 = _unpack(_field(b, 32, 64).reshape(-1, 2, 32), 2, dim=2).reshape(-1, 16, 16)
    hbit = _unpack(_field(b, 0, 32), 1, dim=1).reshape(-1, 16, 16)
    q = (q2 - ((hbit ^ 1) << 2)).to(torch.float32)
    return (dl * q).reshape(-1, 256)


def _q2_k(b):
    s = _field(b, 0, 16)
    d, dmin = _f16(b, 80), _f16(b, 82)
    dl = (d * (s & 15).to(torch.float32))[:, :, None]
    ml = (dmin * (s >> 4).to(torch.float32))[:, :, None]
    q = _unpack(_field(b, 16, 64).reshape(-1, 2, 32), 2, dim=2).reshape(-1, 16, 16)
    return _sub(dl * q.to(torch.float32), ml).reshape(-1, 256)


def _iq2_xs(b):
    d = _f16(b, 0)
    words = _field(b, 2, 64).reshape(-1, 32, 2)
    words = words[:, :, 0] | (words[:, :, 1] << 8)       # [B, 32], one per group of 8
    ls = _unpack(_field(b, 66, 8), 4, dim=2).reshape(-1, 16).to(torch.float32)
    db = (d * (ls + 0.5) * 0.25)[:, :, None, None]        # [B, 16, 1, 1]
    grid = _table("IQ2XS_GRID", b.device)[words & 511].reshape(-1, 16, 2, 8)
    sign_bytes = _table("IQ2XS_SIGNS", b.device)[words >> 9]
    signs = _sign(_unpack(sign_bytes, 1, dim=2)).reshape(-1, 16, 2, 8)
    return (db * grid * signs).reshape(-1, 256)


def _iq3_s(b):
    d = _f16(b, 0)
    idx = _field(b, 2, 64) | (_unpack(_field(b, 66, 8), 1, dim=2).reshape(-1, 64) << 8)
    grid = _table("IQ3S_GRID", b.device)[idx].reshape(-1, 8, 32)
    signs = _sign(_unpack(_field(b, 74, 32), 1, dim=2)).reshape(-1, 8, 32)
    ls = _unpack(_field(b, 106, 4), 4, dim=2).reshape(-1, 8)
    db = (d * (1 + 2 * ls).to(torch.float32))[:, :, None]
    return (db * grid * signs).reshape(-1, 256)


_DEQUANT = {
    "F32": _f32, "F16": _f16_values, "BF16": _bf16,
    "Q8_0": _q8_0, "Q4_0": _q4_0, "Q5_0": _q5_0, "IQ4_NL": _iq4_nl, "MXFP4": _mxfp4,
    "IQ4_XS": _iq4_xs, "Q4_K": _q4_k, "Q5_K": _q5_k, "Q6_K": _q6_k, "IQ2_XS": _iq2_xs,
    "Q3_K": _q3_k, "IQ3_S": _iq3_s, "Q2_K": _q2_k,
}
