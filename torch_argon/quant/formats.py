"""The GGUF weight formats torch_argon reads: one frozen record per format, and the checks on a
quantized weight tensor.

A quantized weight is `uint8 [..., N, row_bytes]`: each row is one output feature, cut along the
input dim into blocks of `block_elems` values stored in `block_bytes` bytes each (GGUF/ggml's
row-major block layout, so a GGUF tensor's bytes are used as they are). The `fields` of a format
give each part of a block with its byte offset; docs/quantized-formats.md gives the bit layout and
the dequant formula of every format, and reference.py computes it.

All multi-byte fields are little-endian. "f16" fields are IEEE half scales; "e8m0" is a biased
power-of-two exponent byte.
"""
from dataclasses import dataclass

import torch

QK = 32     # elements per block of the simple formats
QK_K = 256  # elements per super-block of the K-quants and the 256-element i-quants


@dataclass(frozen=True)
class Field:
    """One part of a block: `nbytes` bytes at byte `offset`, of element type `kind`."""
    name: str
    offset: int
    nbytes: int
    kind: str   # "f16", "bf16", "f32", "e8m0", "u8", "i8", "u16", "u32"
    what: str


@dataclass(frozen=True)
class QFormat:
    """A GGUF tensor type: its name, ggml type id, block shape and block layout."""
    name: str          # GGUF/ggml name, e.g. "Q4_K"
    type_id: int       # gguf.GGMLQuantizationType value
    block_elems: int   # values per block (1 for the plain float types)
    block_bytes: int   # bytes per block
    fields: tuple      # of Field, in byte order, tiling the block
    formula: str       # the dequant of one value, in words (docs/quantized-formats.md has it all)
    tables: tuple = ()  # the lookup tables of quant/tables.py its dequant reads

    # Kernel traits the C++/Metal rows (csrc/shared/quant_params.h, written by
    # tools/gen_quant_tables.py) and the Triton constants (triton_ops/quant_blocks.py) come from;
    # tests/test_format_records.py checks them against these records.

    @property
    def is_float(self):
        """A plain float type (F32, F16, BF16): one value per "block", no scales."""
        return self.block_elems == 1

    @property
    def bits_per_weight(self):
        return 8.0 * self.block_bytes / self.block_elems

    @property
    def word_aligned(self):
        """Blocks a multiple of 4 bytes whose byte fields start 4-byte aligned: a kernel may
        read the quant bytes as 32-bit words wherever the row starts aligned."""
        return (not self.is_float and self.block_bytes % 4 == 0
                and all(f.offset % 4 == 0 for f in self.fields if f.kind == "u8"))

    @property
    def fp16_offsets(self):
        """Byte offsets of the fp16 fields of one block (scales; every element for F16)."""
        return tuple(f.offset + 2 * i for f in self.fields if f.kind == "f16"
                     for i in range(f.nbytes // 2))

    def __repr__(self):
        return f"QFormat({self.name}, id {self.type_id}, {self.block_elems}/{self.block_bytes} B)"


def _fmt(name, type_id, block_elems, formula, *fields, tables=()):
    offset, laid = 0, []
    for fname, nbytes, kind, what in fields:
        laid.append(Field(fname, offset, nbytes, kind, what))
        offset += nbytes
    return QFormat(name, type_id, block_elems, offset, tuple(laid), formula, tuple(tables))


_LIST = (
    _fmt("F32", 0, 1, "x = the float32", ("x", 4, "f32", "the value")),
    _fmt("F16", 1, 1, "x = float(the half)", ("x", 2, "f16", "the value")),
    _fmt("BF16", 30, 1, "x = the bfloat16's bits << 16", ("x", 2, "bf16", "the value")),
    _fmt("Q8_0", 8, QK, "x[i] = qs[i] * d",
         ("d", 2, "f16", "block scale"),
         ("qs", 32, "i8", "x[i] quant")),
    _fmt("Q4_0", 2, QK, "x[i] = d * (q[i] - 8)",
         ("d", 2, "f16", "block scale"),
         ("qs", 16, "u8", "q[j] low nibble of byte j, q[j+16] high nibble")),
    _fmt("Q5_0", 6, QK, "x[i] = d * (q[i] - 16), q[i] = nibble | bit i of qh << 4",
         ("d", 2, "f16", "block scale"),
         ("qh", 4, "u32", "bit i: bit 4 of q[i]"),
         ("qs", 16, "u8", "low 4 bits: q[j] low nibble of byte j, q[j+16] high nibble")),
    _fmt("IQ4_NL", 20, QK, "x[i] = d * IQ4_NL_VALUES[q[i]]",
         ("d", 2, "f16", "block scale"),
         ("qs", 16, "u8", "q[j] low nibble of byte j, q[j+16] high nibble"),
         tables=("IQ4_NL_VALUES",)),
    _fmt("MXFP4", 39, QK, "x[i] = 2^(e-128) * MXFP4_VALUES_X2[q[i]]",
         ("e", 1, "e8m0", "block exponent (2^(e-128) as ggml decodes it; e=255 is 2^127)"),
         ("qs", 16, "u8", "e2m1 codes: q[j] low nibble of byte j, q[j+16] high nibble"),
         tables=("MXFP4_VALUES_X2",)),
    _fmt("IQ4_XS", 23, QK_K,
         "x[32s+k] = d * (ls[s] - 32) * IQ4_NL_VALUES[q], 6-bit ls[s] from scales_l/scales_h",
         ("d", 2, "f16", "super-block scale"),
         ("scales_h", 2, "u16", "bits 2s..2s+1: high 2 bits of sub-block scale s"),
         ("scales_l", 4, "u8", "low 4 bits of scale s: nibble s%2 of byte s/2"),
         ("qs", 128, "u8", "16 bytes per sub-block s: low nibbles x[32s+j], high x[32s+16+j]"),
         tables=("IQ4_NL_VALUES",)),
    _fmt("Q4_K", 12, QK_K, "x = (d * sc[s]) * q - (dmin * m[s]), 8 sub-blocks of 32",
         ("d", 2, "f16", "super-block scale of the sub-block scales"),
         ("dmin", 2, "f16", "super-block scale of the sub-block mins"),
         ("scales", 12, "u8", "8 x (6-bit sc, 6-bit m), packed (docs/quantized-formats.md)"),
         ("qs", 128, "u8", "4-bit q: byte 32c+j holds x[64c+j] (low), x[64c+32+j] (high)")),
    _fmt("Q5_K", 13, QK_K, "x = (d * sc[s]) * q - (dmin * m[s]), q 5-bit, 8 sub-blocks of 32",
         ("d", 2, "f16", "super-block scale of the sub-block scales"),
         ("dmin", 2, "f16", "super-block scale of the sub-block mins"),
         ("scales", 12, "u8", "8 x (6-bit sc, 6-bit m), packed as Q4_K"),
         ("qh", 32, "u8", "bit b of byte j: bit 4 of q[32b+j]"),
         ("qs", 128, "u8", "low 4 bits of q, as Q4_K's qs")),
    _fmt("Q6_K", 14, QK_K, "x = (d * sc[i/16]) * (q - 32), q 6-bit",
         ("ql", 128, "u8", "low 4 bits of q (see the doc for the order)"),
         ("qh", 64, "u8", "high 2 bits of q"),
         ("scales", 16, "i8", "sub-block scale of 16 values"),
         ("d", 2, "f16", "super-block scale")),
    _fmt("IQ2_XS", 17, QK_K,
         "x[8g+k] = (d * (0.5 + ls[g/2]) * 0.25 * GRID[idx][k]) * sign_k, 32 groups of 8",
         ("d", 2, "f16", "super-block scale"),
         ("qs", 64, "u16", "per group: 9-bit grid index | 7-bit sign index << 9"),
         ("scales", 8, "u8", "4-bit scale per 16 values: nibble i%2 of byte i/2"),
         tables=("IQ2XS_GRID", "IQ2XS_SIGNS")),
    _fmt("Q3_K", 11, QK_K, "x = (d * (sc[i/16] - 32)) * (q2 - (hbit ? 0 : 4))",
         ("hmask", 32, "u8", "bit b of byte j: high bit of x[32b+j] (set = no -4)"),
         ("qs", 64, "u8", "2-bit q: byte 32h+j, bits 2k.. hold x[128h+32k+j]"),
         ("scales", 12, "u8", "16 x 6-bit scales, packed (docs/quantized-formats.md)"),
         ("d", 2, "f16", "super-block scale")),
    _fmt("IQ3_S", 21, QK_K,
         "x[i] = (d * (1 + 2*ls[i/32]) * GRID[idx][i%4]) * sign_i, 64 groups of 4",
         ("d", 2, "f16", "super-block scale"),
         ("qs", 64, "u8", "low 8 bits of the 9-bit grid index of group g"),
         ("qh", 8, "u8", "bit g%8 of byte g/8: bit 8 of group g's index"),
         ("signs", 32, "u8", "bit i%8 of byte i/8: x[i] negative"),
         ("scales", 4, "u8", "4-bit scale per 32 values: nibble s%2 of byte s/2"),
         tables=("IQ3S_GRID",)),
    _fmt("Q2_K", 10, QK_K, "x = (d * (sc & 15)) * q - (dmin * (sc >> 4)), sc per 16 values",
         ("scales", 16, "u8", "per 16 values: scale low nibble, min high nibble"),
         ("qs", 64, "u8", "2-bit q: byte 32h+j, bits 2k.. hold x[128h+32k+j]"),
         ("d", 2, "f16", "super-block scale of the scales"),
         ("dmin", 2, "f16", "super-block scale of the mins")),
)

FORMATS = {f.name: f for f in _LIST}
_BY_ID = {f.type_id: f for f in _LIST}

# The GGUF tensor types torch_argon does not read (gguf.GGMLQuantizationType, 0.19), by name and
# id: asked for one, every entry point says so in the same words (not_read), not "unknown".
NOT_READ = {"Q4_1": 3, "Q5_1": 7, "Q8_1": 9, "Q8_K": 15, "IQ2_XXS": 16, "IQ3_XXS": 18,
            "IQ1_S": 19, "IQ2_S": 22, "I8": 24, "I16": 25, "I32": 26, "I64": 27, "F64": 28,
            "IQ1_M": 29, "TQ1_0": 34, "TQ2_0": 35, "NVFP4": 40, "Q1_0": 41}
_NOT_READ_BY_ID = {v: k for k, v in NOT_READ.items()}


def supported_names():
    return ", ".join(FORMATS)


def not_read(name):
    """How every entry point names a GGUF type torch_argon does not read (a NOT_READ name):
    "Q4_1, which torch_argon does not read (GGML type 3; it reads F32, ...)"."""
    return (f"{name}, which torch_argon does not read (GGML type {NOT_READ[name]}; it reads "
            f"{supported_names()})")


def _unknown(qtype):
    name = getattr(qtype, "name", qtype if isinstance(qtype, str) else None)
    if isinstance(name, str) and name.strip().upper() in NOT_READ:
        return ValueError("quantized type " + not_read(name.strip().upper()))
    if isinstance(qtype, int) and not isinstance(qtype, bool) and int(qtype) in _NOT_READ_BY_ID:
        return ValueError("quantized type " + not_read(_NOT_READ_BY_ID[int(qtype)]))
    return ValueError(f"unknown quantized type {qtype!r}; torch_argon reads {supported_names()}")


def qformat(qtype):
    """The QFormat for a GGUF type: a name ("Q4_K", any case), a gguf.GGMLQuantizationType (or
    any enum with a `.name`), its int value, or a QFormat. ValueError for an unknown type."""
    if isinstance(qtype, QFormat):
        return qtype
    if isinstance(qtype, str):
        fmt = FORMATS.get(qtype.strip().upper())
        if fmt is None:
            raise _unknown(qtype)
        return fmt
    name = getattr(qtype, "name", None)
    if isinstance(name, str) and name.upper() in FORMATS:
        fmt = FORMATS[name.upper()]
        # An int enum whose value disagrees with its name is some other enum: refuse it.
        if isinstance(qtype, int) and int(qtype) != fmt.type_id:
            raise ValueError(f"quantized type {qtype!r}: {name} has GGML type id {fmt.type_id}, "
                             f"not {int(qtype)}")
        return fmt
    if isinstance(qtype, int) and not isinstance(qtype, bool):
        fmt = _BY_ID.get(int(qtype))
        if fmt is not None:
            return fmt
    raise _unknown(qtype)


def row_bytes(qtype, n_in):
    """Bytes of one row of n_in values (n_in a multiple of the format's block)."""
    fmt = qformat(qtype)
    _check_n_in(fmt, n_in)
    return n_in // fmt.block_elems * fmt.block_bytes


def _check_n_in(fmt, n_in):
    if isinstance(n_in, bool) or not isinstance(n_in, int):
        raise ValueError(f"n_in must be an int, got {type(n_in).__name__}")
    if n_in < 0 or n_in % fmt.block_elems:
        raise ValueError(f"{fmt.name} needs the input dim to be a multiple of "
                         f"{fmt.block_elems}, got n_in={n_in}")


def check_quantized(w_q, qtype, n_in, *, name="w_q"):
    """Check that `w_q` holds `qtype` blocks for rows of n_in values: a uint8 tensor
    [..., N, row_bytes] (at least 2 dims). Returns the QFormat; ValueError (TypeError for a
    non-tensor) naming `name` otherwise."""
    fmt = qformat(qtype)
    if not isinstance(w_q, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of {fmt.name} blocks, "
                        f"got {type(w_q).__name__}")
    try:
        _check_n_in(fmt, n_in)
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None
    if w_q.dtype != torch.uint8:
        raise ValueError(f"{name} must be uint8 (raw {fmt.name} blocks), got {w_q.dtype}")
    if w_q.dim() < 2:
        raise ValueError(f"{name} must have at least 2 dims [..., N, row_bytes], "
                         f"got shape {tuple(w_q.shape)}")
    expected = n_in // fmt.block_elems * fmt.block_bytes
    if w_q.shape[-1] != expected:
        raise ValueError(
            f"{name} has {w_q.shape[-1]} bytes per row, but {fmt.name} rows of n_in={n_in} "
            f"take {expected} ({n_in // fmt.block_elems} blocks of {fmt.block_bytes} bytes); "
            f"shape {tuple(w_q.shape)}")
    return fmt
