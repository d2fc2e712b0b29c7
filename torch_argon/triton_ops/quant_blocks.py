"""Dequantization of the GGUF block formats in Triton: `dequant_chunk` turns 32 consecutive
values of BN weight rows into a float32 [BN, 32] tile, for every format of torch_argon.quant.
The grouped GEMM (moe_qmm_kernel.py) calls it inside its K loop and feeds the tile, rounded to
the activations' dtype, to tl.dot; the dequantize kernel (dequantize_kernel.py) stores it.
Layouts and formulas: docs/quantized-formats.md.

A chunk is 32 values along a row: element i = 32*s + j of block `blk` (j = 0..31 runs along the
tile's second axis; s = 0..7 is the 32-value sub-block of a 256-value block, a compile-time
constant, 0 for the 32-value formats). Every weight row of the tile is one row of it
(`row_off`: the byte offset of each row, [BN, 1] int64). The plain float types (F32, F16,
BF16) are read as "blocks" of 32 values (32 * size bytes), masked past n_in when MASK_K.

Exactness: every value is computed with the float32 operations of the reference, in its order
(torch_argon/quant/reference.py), so the dequantize kernel, compiled with fp fusion off, is
bit-exact; the GEMM may fuse (it is compared with a tolerance). Small integers become floats
by the exponent trick (bits 0x4B000000 | u are 2^23 + u, exactly), an OR and a subtract
instead of an int-to-float conversion, which runs at a quarter of the FP32 rate on NVIDIA GPUs;
the subtract also removes the format's offset (q - 8 of Q4_0...), still exactly. fp16 fields
are read as two bytes (blocks are not aligned) and widened exactly, inf/NaN payloads included.

Lookup tables (IQ4_NL levels, MXFP4 values, the IQ2_XS and IQ3_S grids and IQ2_XS signs) are
one float32 device tensor (`device_tables`), read through the L1 cache.

Loads: the quant bytes of a chunk are 16 or 32 consecutive bytes per row, so Triton vectorizes
them as far as the block alignment allows (16-byte loads for Q4_K / Q5_K, whose blocks are 144
and 176 bytes; 2 bytes for the formats with 18-, 22-, 34- or 210-byte blocks). Where blocks
are a multiple of 4 bytes (WORDS: Q4_K, Q5_K, Q2_K, IQ4_XS) they are read as int32 words and
cut by shifts. Scale fields are [BN, 1] loads, once per chunk.
"""
import torch
import triton
from torch._subclasses.fake_tensor import is_fake
import triton.language as tl

from ..quant import tables
from ..quant.formats import FORMATS

# GGML type ids (torch_argon/quant/formats.py), as constexprs the kernels compare QTYPE to.
F32 = tl.constexpr(FORMATS["F32"].type_id)
F16 = tl.constexpr(FORMATS["F16"].type_id)
BF16 = tl.constexpr(FORMATS["BF16"].type_id)
Q8_0 = tl.constexpr(FORMATS["Q8_0"].type_id)
Q4_0 = tl.constexpr(FORMATS["Q4_0"].type_id)
Q5_0 = tl.constexpr(FORMATS["Q5_0"].type_id)
IQ4_NL = tl.constexpr(FORMATS["IQ4_NL"].type_id)
MXFP4 = tl.constexpr(FORMATS["MXFP4"].type_id)
IQ4_XS = tl.constexpr(FORMATS["IQ4_XS"].type_id)
Q4_K = tl.constexpr(FORMATS["Q4_K"].type_id)
Q5_K = tl.constexpr(FORMATS["Q5_K"].type_id)
Q6_K = tl.constexpr(FORMATS["Q6_K"].type_id)
Q3_K = tl.constexpr(FORMATS["Q3_K"].type_id)
Q2_K = tl.constexpr(FORMATS["Q2_K"].type_id)
IQ2_XS = tl.constexpr(FORMATS["IQ2_XS"].type_id)
IQ3_S = tl.constexpr(FORMATS["IQ3_S"].type_id)

# Offsets of the lookup tables in the one float32 table tensor.
TAB_IQ4NL = tl.constexpr(0)             # 16 levels
TAB_MXFP4 = tl.constexpr(16)            # 16 e2m1 values, doubled
TAB_IQ2XS_GRID = tl.constexpr(32)       # 512 rows x 8 magnitudes
TAB_IQ2XS_SIGNS = tl.constexpr(4128)    # 128 rows x 8 signs (+1.0 / -1.0)
TAB_IQ3S_GRID = tl.constexpr(5152)      # 512 rows x 4 magnitudes
TABLE_SIZE = 7200

# Formats whose quant-byte runs sit at 4-byte aligned offsets in 4-byte aligned blocks (the
# records' word_aligned trait).
WORD_FORMATS = tuple(f.name for f in FORMATS.values() if f.word_aligned)


def words_ok(fmt, *tensors_and_strides) -> bool:
    """Whether dequant_chunk may read fmt's quant bytes as int32 words: a WORD_FORMATS format,
    every byte stride given and every tensor's address a multiple of 4. A fake tensor (a
    torch.compile trace) has no address: its storage offset stands in, the storage itself
    being aligned as the caching allocator's are."""
    if fmt.name not in WORD_FORMATS:
        return False
    for x in tensors_and_strides:
        if isinstance(x, torch.Tensor):
            traced = is_fake(x) or x.device.type == "meta"
            address = x.storage_offset() * x.element_size() if traced else x.data_ptr()
        else:
            address = int(x)
        if address % 4:
            return False
    return True


def _table_values():
    def grid(rows, cols):
        return [float((row >> (8 * k)) & 0xFF) for row in rows for k in range(cols)]
    values = ([float(v) for v in tables.IQ4_NL_VALUES] + [float(v) for v in tables.MXFP4_VALUES_X2]
              + grid(tables.IQ2XS_GRID, 8)
              + [-1.0 if (bits >> k) & 1 else 1.0 for bits in tables.IQ2XS_SIGNS for k in range(8)]
              + grid(tables.IQ3S_GRID, 4))
    offsets = (TAB_IQ4NL.value, TAB_MXFP4.value, TAB_IQ2XS_GRID.value, TAB_IQ2XS_SIGNS.value,
               TAB_IQ3S_GRID.value)
    assert len(values) == TABLE_SIZE and offsets == (0, 16, 32, 4128, 5152)
    return torch.tensor(values, dtype=torch.float32)


TABLES_CPU = _table_values()
_device_tables = {}


def device_tables(device) -> torch.Tensor:
    """The lookup tables on `device` (made on the first call for that device, then cached).
    The first call copies them from the host, so make it before a CUDA graph capture (any
    eager call does); under torch.compile the cached tensor is a guarded global."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    key = str(device)
    t = _device_tables.get(key)
    if t is None:  # two threads may both copy; one copy stays
        t = _device_tables.setdefault(key, TABLES_CPU.to(device))
    return t


# ---- field helpers -----------------------------------------------------------------------

@triton.jit
def _u8(ptr):
    return tl.load(ptr).to(tl.int32)


@triton.jit
def _half_bits_to_f32(h):
    """float32 from fp16 bits h (int32 0..65535), exactly: inf and NaN keep sign and payload."""
    finite = h.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    special = (((h & 0x3FF) << 13) | 0x7F800000 | ((h & 0x8000) << 16)).to(tl.float32,
                                                                          bitcast=True)
    return tl.where((h & 0x7C00) == 0x7C00, special, finite)


@triton.jit
def _f16(ptr):
    """The little-endian fp16 field at ptr, as float32 (two byte loads: fields are unaligned)."""
    return _half_bits_to_f32(_u8(ptr) | (_u8(ptr + 1) << 8))


@triton.jit
def _int_f32(u, offset: tl.constexpr):
    """float32(u - offset) for ints 0 <= u < 2^23, exactly: 2^23 + u from its bits, less
    2^23 + offset (both exact, their difference a small integer)."""
    return (u | 0x4B000000).to(tl.float32, bitcast=True) - (8388608.0 + offset)


@triton.jit
def _fields32(ptr, j, shift: tl.constexpr, mask: tl.constexpr, WORDS: tl.constexpr):
    """[BN, 32]: (byte j >> shift) & mask of the 32 bytes at ptr ([BN, 1] pointers). WORDS: ptr
    is 4-byte aligned, so the bytes are read as 8 int32 words and each word's 4 fields are cut
    out by shifts (no per-byte extraction: fewer instructions per value on the GPU)."""
    if WORDS:
        words = tl.load(ptr.to(tl.pointer_type(tl.int32)) + tl.arange(0, 8)[None, :])
        fields = (words[:, :, None] >> (8 * tl.arange(0, 4)[None, None, :] + shift)) & mask
        return tl.reshape(fields, (words.shape[0], 32))
    return (_u8(ptr + j) >> shift) & mask


@triton.jit
def _nibbles32(ptr, j, WORDS: tl.constexpr):
    """[BN, 32]: the 32 4-bit values of the 16 bytes at ptr: value j is the low nibble of byte j
    (j < 16), the high nibble of byte j - 16 after (q4 of docs/quantized-formats.md)."""
    if WORDS:
        words = tl.load(ptr.to(tl.pointer_type(tl.int32)) + tl.arange(0, 4)[None, :])
        shifts = 4 * tl.arange(0, 2)[:, None, None] + 8 * tl.arange(0, 4)[None, None, :]
        fields = (words[:, None, :, None] >> shifts[None, :, :, :]) & 15  # [BN, half, word, byte]
        return tl.reshape(fields, (words.shape[0], 32))
    return (_u8(ptr + (j % 16)) >> ((j // 16) * 4)) & 15


@triton.jit
def _k_scale_min(p, s: tl.constexpr):
    """Q4_K / Q5_K: the 6-bit scale and min of sub-block s from the 12 bytes at p + 4."""
    if s < 4:
        sc = _u8(p + 4 + s) & 63
        m = _u8(p + 8 + s) & 63
    else:
        top = _u8(p + 8 + s)
        sc = (top & 15) | ((_u8(p + s) >> 6) << 4)
        m = (top >> 4) | ((_u8(p + 4 + s) >> 6) << 4)
    return sc, m


@triton.jit
def _q3k_scale(p, t: tl.constexpr):
    """Q3_K: the 6-bit scale of 16-value group t from the 12 bytes at p + 96."""
    low = (_u8(p + 96 + t % 8) >> (4 * (t // 8))) & 15
    high = (_u8(p + 104 + t % 4) >> (2 * (t // 4))) & 3
    return low | (high << 4)


@triton.jit
def _float_bytes(ptr, ok, MASK_K: tl.constexpr):
    if MASK_K:
        return tl.load(ptr, mask=ok, other=0).to(tl.int32)
    return tl.load(ptr).to(tl.int32)


# ---- one 32-value chunk --------------------------------------------------------------------

@triton.jit
def dequant_chunk(w_ptr, row_off, blk, s: tl.constexpr, n_in, tab_ptr,
                  QTYPE: tl.constexpr, BLOCK_BYTES: tl.constexpr, MASK_K: tl.constexpr,
                  WORDS: tl.constexpr):
    """float32 [BN, 32]: values 32*s .. 32*s + 31 of block `blk` of the rows at
    w_ptr + row_off ([BN, 1] byte offsets). The float types: values 32*blk .. 32*blk + 31,
    zero at n_in and past when MASK_K. WORDS: the rows and blocks are 4-byte aligned (only for
    the formats whose blocks are a multiple of 4 bytes: words_ok), so runs of quant bytes are
    read as int32 words."""
    j = tl.arange(0, 32)[None, :]
    p = w_ptr + row_off + blk.to(tl.int64) * BLOCK_BYTES  # [BN, 1]: this block of each row
    if QTYPE == F32:
        ok = blk * 32 + j < n_in
        bits = (_float_bytes(p + 4 * j, ok, MASK_K)
                | (_float_bytes(p + 4 * j + 1, ok, MASK_K) << 8)
                | (_float_bytes(p + 4 * j + 2, ok, MASK_K) << 16)
                | (_float_bytes(p + 4 * j + 3, ok, MASK_K) << 24))
        v = bits.to(tl.float32, bitcast=True)
    elif QTYPE == F16:
        ok = blk * 32 + j < n_in
        v = _half_bits_to_f32(_float_bytes(p + 2 * j, ok, MASK_K)
                              | (_float_bytes(p + 2 * j + 1, ok, MASK_K) << 8))
    elif QTYPE == BF16:
        ok = blk * 32 + j < n_in
        bits = (_float_bytes(p + 2 * j, ok, MASK_K)
                | (_float_bytes(p + 2 * j + 1, ok, MASK_K) << 8)) << 16
        v = bits.to(tl.float32, bitcast=True)
    elif QTYPE == Q8_0:
        v = _int_f32(_u8(p + 2 + j) ^ 128, 128) * _f16(p)  # qs as int8: (b ^ 128) - 128
    elif QTYPE == Q4_0:
        v = _f16(p) * _int_f32(_nibbles32(p + 2, j, WORDS), 8)
    elif QTYPE == Q5_0:
        high = (_u8(p + 2 + j // 8) >> (j % 8)) & 1  # bit j of the u32 qh
        v = _f16(p) * _int_f32(_nibbles32(p + 6, j, WORDS) | (high << 4), 16)
    elif QTYPE == IQ4_NL:
        v = _f16(p) * tl.load(tab_ptr + TAB_IQ4NL + _nibbles32(p + 2, j, WORDS))
    elif QTYPE == MXFP4:
        e = _u8(p)
        # 2^(e-128) as float32 bits: subnormal 0x00200000 << e for e = 0, 1
        bits = tl.where(e < 2, 0x00200000 << tl.minimum(e, 1), (e - 1) << 23)
        v = bits.to(tl.float32, bitcast=True) * tl.load(tab_ptr + TAB_MXFP4
                                                        + _nibbles32(p + 1, j, WORDS))
    elif QTYPE == IQ4_XS:
        high = (_u8(p + 2 + s // 4) >> (2 * (s % 4))) & 3   # bits 2s, 2s+1 of the u16 scales_h
        low = (_u8(p + 4 + s // 2) >> (4 * (s % 2))) & 15
        dl = _f16(p) * _int_f32(low | (high << 4), 32)
        v = dl * tl.load(tab_ptr + TAB_IQ4NL + _nibbles32(p + 8 + 16 * s, j, WORDS))
    elif QTYPE == Q4_K:
        sc, m = _k_scale_min(p, s)
        dl = _f16(p) * _int_f32(sc, 0)
        ml = _f16(p + 2) * _int_f32(m, 0)
        q = _fields32(p + 16 + 32 * (s // 2), j, 4 * (s % 2), 15, WORDS)
        v = dl * _int_f32(q, 0) - ml
    elif QTYPE == Q5_K:
        sc, m = _k_scale_min(p, s)
        dl = _f16(p) * _int_f32(sc, 0)
        ml = _f16(p + 2) * _int_f32(m, 0)
        q = _fields32(p + 48 + 32 * (s // 2), j, 4 * (s % 2), 15, WORDS) | (
            _fields32(p + 16, j, s, 1, WORDS) << 4)
        v = dl * _int_f32(q, 0) - ml
    elif QTYPE == Q6_K:
        # h = s // 4 (128-value half), k = s % 4 (32-value quarter of it)
        low = (_u8(p + 64 * (s // 4) + 32 * (s % 4 % 2) + j) >> (4 * (s % 4 // 2))) & 15
        high = (_u8(p + 128 + 32 * (s // 4) + j) >> (2 * (s % 4))) & 3
        d = _f16(p + 208)
        dl = tl.where(j < 16, d * _int_f32(_u8(p + 192 + 2 * s) ^ 128, 128),
                      d * _int_f32(_u8(p + 193 + 2 * s) ^ 128, 128))  # int8 scales
        v = dl * _int_f32(low | (high << 4), 32)
    elif QTYPE == Q3_K:
        q2 = (_u8(p + 32 + 32 * (s // 4) + j) >> (2 * (s % 4))) & 3
        hbit = (_u8(p + j) >> s) & 1   # set: no -4
        d = _f16(p + 108)
        dl = tl.where(j < 16, d * _int_f32(_q3k_scale(p, 2 * s), 32),
                      d * _int_f32(_q3k_scale(p, 2 * s + 1), 32))
        v = dl * _int_f32(q2 + 4 * hbit, 4)
    elif QTYPE == Q2_K:
        q = _fields32(p + 16 + 32 * (s // 4), j, 2 * (s % 4), 3, WORDS)
        sb0 = _u8(p + 2 * s)
        sb1 = _u8(p + 2 * s + 1)
        d = _f16(p + 80)
        dmin = _f16(p + 82)
        dl = tl.where(j < 16, d * _int_f32(sb0 & 15, 0), d * _int_f32(sb1 & 15, 0))
        ml = tl.where(j < 16, dmin * _int_f32(sb0 >> 4, 0), dmin * _int_f32(sb1 >> 4, 0))
        v = dl * _int_f32(q, 0) - ml
    elif QTYPE == IQ2_XS:
        g = 4 * s + j // 8                      # the group of 8 (one u16 each)
        word = _u8(p + 2 + 2 * g) | (_u8(p + 3 + 2 * g) << 8)
        grid = tl.load(tab_ptr + TAB_IQ2XS_GRID + (word & 511) * 8 + j % 8)
        sign = tl.load(tab_ptr + TAB_IQ2XS_SIGNS + (word >> 9) * 8 + j % 8)
        ls = _u8(p + 66 + s)                    # low nibble: values 0..15, high: 16..31
        d = _f16(p)
        db = tl.where(j < 16, (d * (_int_f32(ls & 15, 0) + 0.5)) * 0.25,
                      (d * (_int_f32(ls >> 4, 0) + 0.5)) * 0.25)
        v = (db * grid) * sign
    elif QTYPE == IQ3_S:
        high = (_u8(p + 66 + s) >> (j // 4)) & 1    # bit 8 of group (8s + j/4)'s grid index
        idx = _u8(p + 2 + 8 * s + j // 4) | (high << 8)
        grid = tl.load(tab_ptr + TAB_IQ3S_GRID + idx * 4 + j % 4)
        sign = tl.where(((_u8(p + 74 + 4 * s + j // 8) >> (j % 8)) & 1) != 0, -1.0, 1.0)
        ls = (_u8(p + 106 + s // 2) >> (4 * (s % 2))) & 15
        db = _f16(p) * _int_f32(1 + 2 * ls, 0)
        v = (db * grid) * sign
    else:
        tl.static_assert(False, "unknown QTYPE")
    return v
