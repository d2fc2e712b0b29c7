"""The GGUF dequant reference (torch_argon.quant) against the `gguf` package's numpy dequantize,
bit for bit: random blocks (fixed seeds, leading dims, one and several blocks per row), every
byte value at every block position, every fp16 bit pattern as a scale, inf/NaN/subnormal scales
planted in the scale fields; plus the format table, the input checks, the lookup tables and
the synthetic weights."""
import enum
import importlib.util
import os
import re
import types

import numpy as np
import pytest
import torch

from conftest import assert_bits_equal
from torch_argon.quant import (FORMATS, QFormat, check_quantized, dequantize_reference,
                               force_finite_scales, qformat, random_quantized, row_bytes)
from torch_argon.quant import reference, tables

try:
    import gguf
    from gguf import quants as gguf_quants
except ImportError:  # the oracle tests skip; the rest runs
    gguf = None

needs_gguf = pytest.mark.skipif(gguf is None, reason="the gguf package (the test oracle) is "
                                "not installed: pip install gguf")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = list(FORMATS)
QUANTIZED = [n for n in NAMES if not FORMATS[n].is_float]
TWO_SCALE = [n for n in NAMES if len(FORMATS[n].fp16_offsets) == 2]  # Q4_K, Q5_K, Q2_K

# fp16 bit patterns for the scale fields: zeros, subnormals, normals, extremes, inf, quiet and
# signalling NaNs with payloads, both signs.
SPECIAL_HALVES = (0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00, 0xC000, 0x7BFF,
                  0xFBFF, 0x7C00, 0xFC00, 0x7E00, 0x7C01, 0x7D55, 0xFE00, 0xFC01, 0xFFFF)


def gguf_dequantize(w_q, name):
    with np.errstate(all="ignore"):
        out = gguf_quants.dequantize(w_q.cpu().contiguous().numpy(),
                                     gguf.GGMLQuantizationType[name])
    return torch.from_numpy(np.ascontiguousarray(out))


def random_bytes(name, shape_rows, n_blocks, seed):
    fmt = FORMATS[name]
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (*shape_rows, n_blocks * fmt.block_bytes), dtype=torch.uint8,
                         generator=g)


def check_against_gguf(w_q, name, n_in, what):
    got = dequantize_reference(w_q, name, n_in)
    assert got.dtype == torch.float32 and got.shape == (*w_q.shape[:-1], n_in)
    assert_bits_equal(got, gguf_dequantize(w_q, name), f"{name} {what}")
    return got


def set_half(blocks, off, halves):
    blocks[:, off] = (halves & 0xFF).to(torch.uint8)
    blocks[:, off + 1] = (halves >> 8).to(torch.uint8)


# ---------------------------------------------------------------- the format table

@needs_gguf
@pytest.mark.parametrize("name", NAMES)
def test_format_matches_gguf(name):
    fmt = FORMATS[name]
    t = gguf.GGMLQuantizationType[name]
    assert fmt.type_id == int(t)
    assert (fmt.block_elems, fmt.block_bytes) == gguf.GGML_QUANT_SIZES[t]


@pytest.mark.parametrize("name", NAMES)
def test_fields_tile_the_block(name):
    fmt = FORMATS[name]
    offset = 0
    for f in fmt.fields:
        assert f.offset == offset, (name, f)
        offset += f.nbytes
    assert offset == fmt.block_bytes
    assert fmt.block_elems in ((1,) if fmt.is_float else (32, 256))


def test_qformat_accepts_names_enums_and_ids():
    q4k = FORMATS["Q4_K"]
    assert qformat("Q4_K") is q4k and qformat("q4_k") is q4k
    assert qformat(" iq4_xs ").name == "IQ4_XS" and isinstance(qformat("f16"), QFormat)
    assert qformat(12) is q4k and qformat(q4k) is q4k

    class OtherEnum(enum.IntEnum):  # any IntEnum-like: by name, and its value must agree
        Q4_K = 12
        WRONG = 99

    assert qformat(OtherEnum.Q4_K) is q4k
    assert qformat(types.SimpleNamespace(name="mxfp4")).name == "MXFP4"
    if gguf is not None:
        for name in NAMES:
            assert qformat(gguf.GGMLQuantizationType[name]) is FORMATS[name]


@pytest.mark.parametrize("bad", ["Q4_1", "nope", 3, 99, None, 2.0, True])
def test_qformat_unknown(bad):
    with pytest.raises(ValueError, match="reads F32, F16, BF16, Q8_0"):
        qformat(bad)


def test_qformat_enum_value_disagreeing_with_name():
    class Shifted(enum.IntEnum):
        Q4_K = 13

    with pytest.raises(ValueError, match="Q4_K has GGML type id 12, not 13"):
        qformat(Shifted.Q4_K)


def test_row_bytes():
    assert row_bytes("Q4_K", 2048) == 8 * 144
    assert row_bytes("Q8_0", 64) == 68
    assert row_bytes("F16", 7) == 14
    assert row_bytes("MXFP4", 0) == 0
    with pytest.raises(ValueError, match="Q4_K needs the input dim to be a multiple of 256, "
                                         "got n_in=300"):
        row_bytes("Q4_K", 300)


# ---------------------------------------------------------------- bad input

def test_check_quantized_errors():
    ok = torch.zeros(4, 144, dtype=torch.uint8)
    assert check_quantized(ok, "Q4_K", 256) is FORMATS["Q4_K"]
    cases = [
        (ok, "Q4_K", 300, ValueError,
         "w_gate: Q4_K needs the input dim to be a multiple of 256, got n_in=300"),
        (ok, "Q8_0", 48, ValueError, "w_gate: Q8_0 needs the input dim to be a multiple of 32"),
        (ok, "Q4_K", -256, ValueError, "w_gate: Q4_K needs the input dim"),
        (ok, "Q4_K", 256.0, ValueError, "w_gate: n_in must be an int"),
        (ok.to(torch.int8), "Q4_K", 256, ValueError, "w_gate must be uint8.*torch.int8"),
        (ok.float(), "Q4_K", 256, ValueError, "w_gate must be uint8"),
        (ok[0], "Q4_K", 256, ValueError, r"w_gate must have at least 2 dims.*\(144,\)"),
        (ok, "Q4_K", 512, ValueError, "w_gate has 144 bytes per row, but Q4_K rows of "
                                      "n_in=512 take 288"),
        (ok, "Q5_K", 256, ValueError, "w_gate has 144 bytes per row, but Q5_K"),
        (ok.numpy(), "Q4_K", 256, TypeError, "w_gate must be a torch.Tensor"),
        (ok, "Q9_K", 256, ValueError, "unknown quantized type 'Q9_K'"),
    ]
    for w, qtype, n_in, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            check_quantized(w, qtype, n_in, name="w_gate")
        with pytest.raises(exc, match=msg.replace("w_gate", "w_q")):
            dequantize_reference(w, qtype, n_in)


# ---------------------------------------------------------------- bit-exactness with gguf

@needs_gguf
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", NAMES)
def test_random_blocks_finite_scales(name, seed):
    """Random bytes with the fp16 scale fields forced finite, [E, N, row_bytes] with one block
    per row and with several."""
    fmt = FORMATS[name]
    several = 7 if fmt.is_float else (3 if fmt.block_elems == 256 else 5)
    for rows, n_blocks in (((3, 100), 1), ((2, 64), several)):
        w = force_finite_scales(random_bytes(name, rows, n_blocks, seed), name)
        got = check_against_gguf(w, name, n_blocks * fmt.block_elems, f"rows {rows}")
        if name != "MXFP4":  # e8m0 scale 2^127 times 12 overflows; fp16 scales never do
            assert torch.isfinite(got).all(), name


@needs_gguf
@pytest.mark.parametrize("name", NAMES)
def test_random_blocks_raw(name):
    """Unforced random bytes: about 1 in 32 fp16 scales is inf or NaN (payloads kept)."""
    fmt = FORMATS[name]
    w = random_bytes(name, (5, 80), 4, seed=10)
    got = check_against_gguf(w, name, 4 * fmt.block_elems, "raw")
    if fmt.fp16_offsets:
        assert torch.isnan(got).any(), "the test should meet NaN scales"


@needs_gguf
@pytest.mark.parametrize("name", NAMES)
def test_every_byte_value_at_every_position(name):
    """256 blocks; block k holds byte (k + 97*p) % 256 at position p, so every position sees
    every value (every nibble, bit pair, sign byte, grid index half, scale code, e8m0 byte)."""
    fmt = FORMATS[name]
    k = torch.arange(256)[:, None]
    p = torch.arange(fmt.block_bytes)[None, :]
    blocks = ((k + 97 * p) % 256).to(torch.uint8)
    for what, w in (("raw", blocks), ("finite", force_finite_scales(blocks, name))):
        check_against_gguf(w.reshape(16, 16 * fmt.block_bytes), name, 16 * fmt.block_elems, what)


@needs_gguf
@pytest.mark.parametrize("name", [n for n in QUANTIZED if FORMATS[n].fp16_offsets])
def test_special_scales(name):
    """inf, NaN (quiet and signalling, payloads, both signs), zeros, subnormals and extremes in
    the fp16 scale fields; Q4_K/Q5_K/Q2_K get every pair of d and dmin, so NaN - NaN with two
    payloads is met."""
    fmt = FORMATS[name]
    specials = torch.tensor(SPECIAL_HALVES, dtype=torch.int32)
    offsets = fmt.fp16_offsets
    if len(offsets) == 2:
        grid = torch.cartesian_prod(specials, specials)
    else:
        grid = specials[:, None]
    n = grid.shape[0]
    for seed in (3, 4):
        blocks = random_bytes(name, (n,), 1, seed)
        for col, off in enumerate(offsets):
            set_half(blocks, off, grid[:, col])
        check_against_gguf(blocks, name, fmt.block_elems, f"seed {seed}")


@needs_gguf
@pytest.mark.parametrize("name", ["F16", "BF16", "Q8_0", "Q4_0"])
def test_every_half_pattern(name):
    """All 65536 bit patterns as the F16/BF16 value or as the block's fp16 scale."""
    fmt = FORMATS[name]
    halves = torch.arange(65536, dtype=torch.int32)
    blocks = random_bytes(name, (65536,), 1, seed=5)
    set_half(blocks, 0, halves)
    check_against_gguf(blocks.reshape(256, 256 * fmt.block_bytes), name, 256 * fmt.block_elems,
                       "all halves")


@needs_gguf
def test_every_float32_class():
    """F32 passes bits through: zeros, subnormals, inf, quiet and signalling NaNs."""
    bits = torch.tensor([0, 0x80000000, 1, 0x807FFFFF, 0x3F800000, 0x7F7FFFFF, 0x7F800000,
                         0xFF800000, 0x7FC00000, 0x7F800001, 0xFFC12345, 0x7FBFFFFF],
                        dtype=torch.int64).to(torch.int32)
    w = bits.view(torch.uint8).reshape(3, 16)
    check_against_gguf(w, "F32", 4, "specials")


@needs_gguf
def test_mxfp4_every_exponent_and_code():
    """Each e8m0 byte 0..255 with all 16 codes: subnormal scales (e <= 2), 2^127 (e = 255)
    and its overflow to inf."""
    blocks = torch.zeros(256, 17, dtype=torch.uint8)
    blocks[:, 0] = torch.arange(256).to(torch.uint8)
    codes = torch.arange(16, dtype=torch.uint8)
    blocks[:, 1:17] = (codes | (codes.flip(0) << 4))[None, :]
    got = check_against_gguf(blocks.reshape(16, 16 * 17), "MXFP4", 16 * 32, "exponents")
    assert torch.isinf(got).any() and (got[0, :32] != 0).any()


# ---------------------------------------------------------------- layout of the input

@needs_gguf
@pytest.mark.parametrize("name", NAMES)
def test_strided_and_offset_input(name):
    """A view that is not contiguous and starts at an odd byte gives the same bits."""
    fmt = FORMATS[name]
    n_blocks = 2
    rb = n_blocks * fmt.block_bytes
    big = random_bytes(name, (12,), 3, seed=6)
    w = big[::2, 1:1 + rb]
    assert not w.is_contiguous() and w.storage_offset() % 2 == 1
    got = dequantize_reference(w, name, n_blocks * fmt.block_elems)
    assert_bits_equal(got, gguf_dequantize(w, name), name)


@pytest.mark.parametrize("name", ["Q4_K", "IQ2_XS", "Q8_0", "F16"])
def test_chunked_equals_whole(name, monkeypatch):
    fmt = FORMATS[name]
    w = random_bytes(name, (2, 40), 3, seed=7)
    whole = dequantize_reference(w, name, 3 * fmt.block_elems)
    monkeypatch.setattr(reference, "_CHUNK_VALUES", 3 * fmt.block_elems)  # 3 blocks a step
    assert_bits_equal(dequantize_reference(w, name, 3 * fmt.block_elems), whole, name)


@pytest.mark.parametrize("name", ["Q4_K", "MXFP4", "BF16"])
def test_empty(name):
    for shape, n_in in (((0, 5, row_bytes(name, 256)), 256), ((4, 0, row_bytes(name, 256)), 256),
                        ((3, 0), 0)):
        out = dequantize_reference(torch.empty(shape, dtype=torch.uint8), name, n_in)
        assert out.shape == (*shape[:-1], n_in) and out.dtype == torch.float32


GPU_DEVICES = [pytest.param("cuda", marks=pytest.mark.skipif(
                   not torch.cuda.is_available(), reason="no CUDA device")),
               pytest.param("mps", marks=pytest.mark.skipif(
                   not torch.backends.mps.is_available(), reason="no MPS device"))]


@pytest.mark.parametrize("device", GPU_DEVICES)
@pytest.mark.parametrize("name", NAMES)
def test_reference_on_device(name, device):
    """On a GPU every non-NaN value has the CPU's bits; NaN stays NaN (GPU arithmetic returns
    its canonical NaN, not the payload). Subnormal-flushing devices may differ on MXFP4's
    smallest exponents, so MXFP4 uses finite exponents >= 3 here."""
    fmt = FORMATS[name]
    w = random_bytes(name, (3, 50), 4, seed=8)
    if name == "MXFP4":
        w.view(-1, fmt.block_bytes)[:, 0].clamp_(min=3)
    cpu = dequantize_reference(w, name, 4 * fmt.block_elems)
    dev = dequantize_reference(w.to(device), name, 4 * fmt.block_elems).cpu()
    assert torch.equal(torch.isnan(dev), torch.isnan(cpu))
    keep = ~torch.isnan(cpu)
    assert_bits_equal(dev[keep], cpu[keep], f"{name} on {device}")


# ---------------------------------------------------------------- the lookup tables

def _generator_module():
    path = os.path.join(ROOT, "tools", "gen_quant_tables.py")
    spec = importlib.util.spec_from_file_location("gen_quant_tables", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@needs_gguf
def test_tables_equal_gguf():
    expected = _generator_module().read_tables()
    assert set(expected) == {"IQ4_NL_VALUES", "MXFP4_VALUES_X2", "IQ2XS_SIGNS", "IQ2XS_GRID",
                             "IQ3S_GRID"}
    for name, (_, values, _) in expected.items():
        assert getattr(tables, name) == values, f"{name}: run tools/gen_quant_tables.py"
    # Independent of the generator: the raw data as gguf holds it.
    assert tables.IQ4_NL_VALUES == tuple(gguf_quants.IQ4_NL.kvalues)
    assert tables.MXFP4_VALUES_X2 == tuple(gguf_quants.MXFP4.kvalues)
    assert bytes(tables.IQ2XS_SIGNS) == gguf_quants.IQ2_XXS.ksigns
    for cls, packed, cols in ((gguf_quants.IQ2_XS, tables.IQ2XS_GRID, 8),
                              (gguf_quants.IQ3_S, tables.IQ3S_GRID, 4)):
        cls.init_grid()
        rows = torch.tensor([[(v >> (8 * k)) & 0xFF for k in range(cols)] for v in packed])
        assert torch.equal(rows.float(), torch.from_numpy(cls.grid.reshape(-1, cols)))


def test_table_shapes():
    assert len(tables.IQ4_NL_VALUES) == 16 and len(tables.MXFP4_VALUES_X2) == 16
    assert len(tables.IQ2XS_SIGNS) == 128 and len(tables.IQ2XS_GRID) == 512
    assert len(tables.IQ3S_GRID) == 512
    # The sign byte's bit 7 gives each sign pattern an even number of set bits.
    assert all(bin(s).count("1") % 2 == 0 and s & 0x7F == i
               for i, s in enumerate(tables.IQ2XS_SIGNS))


# ---------------------------------------------------------------- synthetic weights

@pytest.mark.parametrize("name", NAMES)
def test_random_quantized_statistics(name):
    fmt = FORMATS[name]
    for seed, std in ((0, 0.02), (1, 1.0)):
        g = torch.Generator().manual_seed(seed)
        w = random_quantized(name, 256, 2048, std=std, generator=g)
        assert w.dtype == torch.uint8 and w.shape == (256, row_bytes(name, 2048))
        x = dequantize_reference(w, name, 2048)
        assert torch.isfinite(x).all(), name
        ratio = x.std().item() / std
        assert 0.95 < ratio < 1.05, f"{name}: std {x.std().item():.4g} for {std} ({ratio:.3f}x)"
        assert abs(x.mean().item()) < 0.15 * std, name
        if not fmt.is_float:
            # The block scales spread: a kernel reading another block's scale is caught.
            per_block = x.reshape(-1, fmt.block_elems).square().mean(dim=1).sqrt()
            assert per_block.max() > 2.0 * per_block.min(), name


def test_random_quantized_shape_device_and_seed():
    g = torch.Generator().manual_seed(3)
    a = random_quantized("Q4_K", 24, 512, leading=(3,), generator=g)
    b = random_quantized("Q4_K", 24, 512, leading=(3,), generator=torch.Generator().manual_seed(3))
    assert a.shape == (3, 24, 288) and torch.equal(a, b)
    assert random_quantized("IQ2_XS", 4, 256, leading=(2, 2), device="cpu").shape == (2, 2, 4, 74)
    assert random_quantized("Q8_0", 0, 64).shape == (0, 68)
    with pytest.raises(ValueError, match="Q4_K needs the input dim to be a multiple of 256"):
        random_quantized("Q4_K", 4, 100)
    with pytest.raises(ValueError, match="std=1e-09 is out of range for Q4_K"):
        random_quantized("Q4_K", 4, 256, std=1e-9)
    with pytest.raises(ValueError, match="std=1000000.0 is out of range for Q8_0"):
        random_quantized("Q8_0", 4, 32, std=1e6)


@pytest.mark.parametrize("name", NAMES)
def test_force_finite_scales(name):
    fmt = FORMATS[name]
    raw = random_bytes(name, (64,), 4, seed=9)
    fixed = force_finite_scales(raw, name)
    assert fixed.shape == raw.shape and fixed.dtype == torch.uint8
    x = dequantize_reference(fixed, name, 4 * fmt.block_elems)
    if name != "MXFP4":
        assert torch.isfinite(x).all(), name
    # Only bit 6 of a float field's top byte may change, and only where it was inf/NaN.
    changed = (raw ^ fixed).reshape(-1, fmt.block_bytes)
    assert ((changed == 0) | (changed == 0x40)).all()
    before = dequantize_reference(raw, name, 4 * fmt.block_elems)
    same = torch.isfinite(before.reshape(-1, fmt.block_elems)).all(dim=1)
    assert (changed[same] == 0).all()


# ---------------------------------------------------------------- the doc's formulas

def _f32(x):
    return np.float32(x)


def _half(b, off):
    return _f32(np.frombuffer(bytes(b[off:off + 2]), dtype=np.float16)[0])


def _table_byte(row, k):
    return (row >> (8 * k)) & 0xFF


def scalar_dequant(b, name):
    """One block, value by value, from docs/quantized-formats.md's formulas (numpy float32
    scalars, one rounding per operation): a second, independent statement of the layouts."""
    K, M = tables.IQ4_NL_VALUES, tables.MXFP4_VALUES_X2

    def q4(i, base):
        return (b[base + i % 16] >> 4 * (i // 16)) & 15

    def k6(s, off):  # Q4_K / Q5_K scale and min of sub-block s
        x = b[off:off + 12]
        if s < 4:
            return x[s] & 63, x[s + 4] & 63
        return (x[s + 4] & 15) | (x[s - 4] >> 6) << 4, (x[s + 4] >> 4) | (x[s] >> 6) << 4

    out = []
    n = FORMATS[name].block_elems
    for i in range(n):
        s, h, k, j = i // 32, i // 128, (i % 128) // 32, i % 32
        with np.errstate(all="ignore"):
            if name == "Q8_0":
                x = _f32(np.int8(b[2 + i] - 256 if b[2 + i] > 127 else b[2 + i])) * _half(b, 0)
            elif name == "Q4_0":
                x = _half(b, 0) * _f32(q4(i, 2) - 8)
            elif name == "Q5_0":
                qh = int.from_bytes(bytes(b[2:6]), "little")
                x = _half(b, 0) * _f32((q4(i, 6) | ((qh >> i) & 1) << 4) - 16)
            elif name == "IQ4_NL":
                x = _half(b, 0) * _f32(K[q4(i, 2)])
            elif name == "MXFP4":
                e = b[0]
                bits = (e - 1) << 23 if e >= 2 else 0x00200000 << e
                x = np.uint32(bits).view(np.float32) * _f32(M[q4(i, 1)])
            elif name == "IQ4_XS":
                sh = b[2] | b[3] << 8
                ls = ((b[4 + s // 2] >> 4 * (s % 2)) & 15) | ((sh >> 2 * s) & 3) << 4
                q = (b[8 + 16 * s + j % 16] >> 4 * (j // 16)) & 15
                x = (_half(b, 0) * _f32(ls - 32)) * _f32(K[q])
            elif name in ("Q4_K", "Q5_K"):
                sc, m = k6(s, 4)
                base = 16 if name == "Q4_K" else 48
                q = (b[base + 32 * (i // 64) + j] >> 4 * (s % 2)) & 15
                if name == "Q5_K":
                    q |= ((b[16 + j] >> s) & 1) << 4
                x = (_half(b, 0) * _f32(sc)) * _f32(q) - (_half(b, 2) * _f32(m))
            elif name == "Q6_K":
                q = ((b[64 * h + 32 * (k % 2) + j] >> 4 * (k // 2)) & 15) \
                    | ((b[128 + 32 * h + j] >> 2 * k) & 3) << 4
                sc = b[192 + i // 16]
                sc = sc - 256 if sc > 127 else sc
                x = (_half(b, 208) * _f32(sc)) * _f32(q - 32)
            elif name == "Q3_K":
                t = i // 16
                u = ((b[96 + t % 8] >> 4 * (t // 8)) & 15) \
                    | ((b[104 + t % 4] >> 2 * (t // 4)) & 3) << 4
                q = ((b[32 + 32 * h + j] >> 2 * k) & 3) - (0 if (b[j] >> (i // 32)) & 1 else 4)
                x = (_half(b, 108) * _f32(u - 32)) * _f32(q)
            elif name == "Q2_K":
                q = (b[16 + 32 * h + j] >> 2 * k) & 3
                sb = b[i // 16]
                x = (_half(b, 80) * _f32(sb & 15)) * _f32(q) - (_half(b, 82) * _f32(sb >> 4))
            elif name == "IQ2_XS":
                g, kk = i // 8, i % 8
                w = b[2 + 2 * g] | b[3 + 2 * g] << 8
                G = _table_byte(tables.IQ2XS_GRID[w & 511], kk)
                sign = _f32(-1.0 if (tables.IQ2XS_SIGNS[w >> 9] >> kk) & 1 else 1.0)
                ls = (b[66 + g // 4] >> 4 * ((g // 2) % 2)) & 15
                x = ((_half(b, 0) * _f32(ls + 0.5)) * _f32(0.25) * _f32(G)) * sign
            elif name == "IQ3_S":
                g = i // 4
                idx = b[2 + g] | ((b[66 + g // 8] >> (g % 8)) & 1) << 8
                G = _table_byte(tables.IQ3S_GRID[idx], i % 4)
                sign = _f32(-1.0 if (b[74 + i // 8] >> (i % 8)) & 1 else 1.0)
                ls = (b[106 + i // 64] >> 4 * (s % 2)) & 15
                x = ((_half(b, 0) * _f32(1 + 2 * ls)) * _f32(G)) * sign
        out.append(x)
    return torch.from_numpy(np.array(out, dtype=np.float32))


@pytest.mark.parametrize("name", QUANTIZED)
def test_doc_formulas(name):
    """docs/quantized-formats.md's per-value formulas, run as scalar code, give the reference's
    bits on random blocks with finite scales."""
    fmt = FORMATS[name]
    w = force_finite_scales(random_bytes(name, (3,), 1, seed=11), name)
    got = dequantize_reference(w, name, fmt.block_elems)
    for r in range(3):
        assert_bits_equal(scalar_dequant(w[r].tolist(), name), got[r], f"{name} block {r}")


def test_a_format_not_read_is_named_alike_everywhere(tmp_path):
    """Q4_1 through the name, its id, the public dequantize, the main job's --quant and a GGUF
    file: the same words (formats.not_read), never "unknown" (issue 42 item 9)."""
    import subprocess
    import sys

    import torch_argon
    from torch_argon.quant.formats import not_read
    words = not_read("Q4_1")
    assert words.startswith("Q4_1, which torch_argon does not read (GGML type 3; it reads F32")
    for qtype in ("Q4_1", "q4_1", 3):
        with pytest.raises(ValueError, match=re.escape(words)):
            qformat(qtype)
    with pytest.raises(ValueError, match=re.escape(words)):
        torch_argon.dequantize(torch.zeros(2, 20, dtype=torch.uint8), "Q4_1", 32)
    got = subprocess.run([sys.executable, "-m", "torch_argon", "--quant", "Q4_1"],
                         capture_output=True, text=True, timeout=300)
    assert got.returncode == 2 and words in got.stderr and "unknown" not in got.stderr
    gguf_files = pytest.importorskip("gguf_files", reason="the GGUF files need the gguf package")
    path = tmp_path / "q4_1.gguf"
    gguf_files.write_moe_file(path, n_blocks=1, formats=("Q4_1", "Q4_1", "Q6_K"))
    import torch_argon.gguf as ag
    with pytest.raises(ag.GGUFError, match=re.escape("is stored as " + words)):
        ag.load_moe_layers(str(path))
