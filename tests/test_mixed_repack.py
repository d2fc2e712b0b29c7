"""GGUF stacks repacked for the mixed-input GEMM (torch_argon.quant.mixed_repack), on the CPU, for
every format it takes: the codes and groups carried exactly (the exact affine form rebuilt from
the repack equals the dequant reference bit for bit), the kernel's weights (mixed_dequantize)
within the bf16 rounding bound of the reference per value and within the scaled-path tolerance
per GEMM on random and realistic blocks, the layout the kernel reads (both code widths), and the
argument errors."""
import pytest
import torch

from gpuq_cases import SCALED_TOL
from torch_argon.quant import dequantize_reference, force_finite_scales, random_quantized
from torch_argon.quant import mixed_repack as mr
from torch_argon.quant.formats import qformat

FORMATS = tuple(mr.FORMATS)
BITS = {"Q4_K": 4, "Q4_0": 4, "Q5_K": 8, "Q5_0": 8, "Q8_0": 8, "IQ4_NL": 8, "IQ4_XS": 8}
MAX_CODE = {"Q4_K": 15, "Q4_0": 15, "Q5_K": 31, "Q5_0": 31, "Q8_0": 255, "IQ4_NL": 241,
            "IQ4_XS": 241}


def random_bytes(qtype, shape_lead, n_out, n_in, seed):
    """Blocks of uniformly random bytes with finite fp16 scales (every code, scale and min
    pattern, extreme magnitudes included)."""
    fmt = qformat(qtype)
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (*shape_lead, n_out, n_in // fmt.block_elems * fmt.block_bytes),
                        dtype=torch.uint8, generator=g)
    return force_finite_scales(raw, qtype)


CASES = [((), 8, 256, 0), ((3,), 16, 512, 1), ((2,), 24, 1024, 2), ((2, 2), 8, 768, 3)]


def test_the_formats_and_their_widths():
    """The table of the module doc: the formats of 32-value affine groups, and no others."""
    assert BITS == {name: bits for name, (bits, _) in mr.FORMATS.items()}
    for name in ("Q6_K", "Q3_K", "Q2_K", "IQ2_XS", "IQ3_S", "MXFP4", "F16", "BF16"):
        assert mr.code_bits(name) == 0


@pytest.mark.parametrize("qtype", FORMATS)
@pytest.mark.parametrize("lead,n_out,n_in,seed", CASES)
def test_codes_and_groups_exact(qtype, lead, n_out, n_in, seed):
    """s * u + z from the repack's codes and the exact (float32) group parameters is the
    reference's value, bit for bit up to the sign of zero (d * (q - c) is -0.0 for a negative
    d where s * u + z is +0.0): every code lands at its value's position, every group's
    parameters at theirs; the codes within their width."""
    w_q = random_bytes(qtype, lead, n_out, n_in, seed)
    m = mr.repack(w_q, qtype, n_in)
    u = mr.unpack_codes(m).float().reshape(*lead, n_out, n_in // 32, 32)
    _, s, z = mr.groups(w_q, qtype, n_in)
    rebuilt = (s[..., None] * u + z[..., None]).reshape(*lead, n_out, n_in)
    want = dequantize_reference(w_q, qtype, n_in)
    finite = torch.isfinite(want)
    nonzero = finite & (want != 0)
    assert torch.equal(rebuilt[nonzero].view(torch.int32), want[nonzero].view(torch.int32))
    assert (rebuilt[finite & (want == 0)] == 0).all()
    assert int(mr.unpack_codes(m).max()) <= MAX_CODE[qtype]
    assert torch.equal(mr.unpack_codes(m).long(), mr.groups(w_q, qtype, n_in)[0].long())


def test_q4k_code_order_of_a_known_block():
    """One Q4_K block whose code for value k is a known function of k: Q4_K's chunked nibble
    order undone, CUTLASS's uint4 packing (low nibble first) produced."""
    want = (torch.arange(256) * 7 + 3) % 16            # codes in value order
    qs = torch.zeros(4, 32, dtype=torch.int32)
    for c in range(4):
        qs[c] = want[64 * c:64 * c + 32] | (want[64 * c + 32:64 * c + 64] << 4)
    block = torch.zeros(8, 144, dtype=torch.uint8)
    block[:, 16:] = qs.reshape(-1).to(torch.uint8)
    m = mr.repack(block, "Q4_K", 256)
    assert torch.equal(mr.unpack_codes(m)[0].long(), want)
    assert int(m.codes[0, 0]) == int(want[0] | (want[1] << 4))


def test_q8_0_codes_are_the_int8_plus_128():
    """Q8_0's 8-bit codes: byte k of a row is value k's int8 + 128, one byte a value."""
    block = torch.zeros(8, 34, dtype=torch.uint8)
    q = torch.arange(-128, 128, 8, dtype=torch.int32)  # 32 values
    block[:, 2:] = q.to(torch.int8).view(torch.uint8)
    block[:, 1] = 0x3C  # d = 1.0
    m = mr.repack(torch.cat([block, block], dim=1), "Q8_0", 64)
    assert torch.equal(m.codes[0, :32].long(), (q + 128).long())
    assert torch.equal(mr.mixed_dequantize(m, torch.float32)[0, :32], q.float())


@pytest.mark.parametrize("qtype", FORMATS)
@pytest.mark.parametrize("lead,n_out,n_in,seed", CASES[:2])
def test_kernel_weights_within_bf16_rounding(qtype, lead, n_out, n_in, seed):
    """mixed_dequantize (the kernel's bf16(u * bf16(s) + bf16(z))) differs from the exact value
    by at most the three bf16 roundings (unit roundoff 2^-8): 2^-8 of max(u) |s| + |z| + |w|
    (s, z, w exact)."""
    w_q = random_bytes(qtype, lead, n_out, n_in, seed)
    m = mr.repack(w_q, qtype, n_in)
    got = mr.mixed_dequantize(m, torch.float32)
    want = dequantize_reference(w_q, qtype, n_in)
    _, s, z = mr.groups(w_q, qtype, n_in)
    per_group = (MAX_CODE[qtype] * s.abs() + z.abs()).repeat_interleave(32, dim=-1)
    bound = 2.0 ** -8 * (per_group + want.abs()) * 1.01
    finite = torch.isfinite(want) & torch.isfinite(bound)
    assert ((got - want).abs()[finite] <= bound[finite]).all()


@pytest.mark.parametrize("qtype", FORMATS)
def test_kernel_weights_by_formula(qtype):
    """mixed_dequantize is bf16(float(u) * s + z) with the bf16 s and z the repack stored."""
    w_q = random_bytes(qtype, (2,), 8, 512, 7)
    m = mr.repack(w_q, qtype, 512)
    s, z = mr.group_params(m)
    u = mr.unpack_codes(m).float().reshape(2, 8, 16, 32)
    want = torch.addcmul(z[..., None], u, s[..., None]).to(torch.bfloat16).reshape(2, 8, 512)
    assert torch.equal(mr.mixed_dequantize(m).view(torch.int16), want.view(torch.int16))
    _, s_exact, z_exact = mr.groups(w_q, qtype, 512)
    assert torch.equal(s, s_exact.to(torch.bfloat16).float())
    assert torch.equal(z, z_exact.to(torch.bfloat16).float())


@pytest.mark.parametrize("qtype", ["Q4_K", "Q8_0"])
def test_the_kernels_reading_of_the_bytes(qtype):
    """What hopper_mixed_convert.cuh does with the repack's bytes, emulated: the scales and
    zeros read as little-endian uint32 [E, K/64, N] (group 2t in the low half: bits << 16,
    group 2t + 1 in the high half: bits & 0xFFFF0000, as float32), the codes as nibbles of
    [E, N, K/2] bytes (low first) or bytes of [E, N, K], K block kb of a 64-wide tile in group
    2t + kb / 2, and w = bf16(fma(u, s, z)): mixed_dequantize, bit for bit."""
    E, N, K = 2, 8, 512
    m = mr.repack(random_bytes(qtype, (E,), N, K, 9), qtype, K)
    pairs = m.scales.view(torch.int32).squeeze(-1), m.zeros.view(torch.int32).squeeze(-1)
    assert pairs[0].shape == (E, K // 64, N)

    def half(bits, h):  # pair_half
        return ((bits << 16) if h == 0 else (bits & -65536)).view(torch.float32)

    codes = m.codes.to(torch.int32)
    w = torch.empty(E, N, K, dtype=torch.bfloat16)
    for k in range(K):
        t, kb = k // 64, (k % 64) // 16
        if m.bits == 4:
            u = ((codes[:, :, k // 2] >> (4 * (k % 2))) & 15).float()
        else:
            u = codes[:, :, k].float()
        s = half(pairs[0][:, t, :], kb // 2)
        z = half(pairs[1][:, t, :], kb // 2)
        w[:, :, k] = torch.addcmul(z, u, s).to(torch.bfloat16)  # u * s exact: fma's rounding
    assert torch.equal(w.view(torch.int16), mr.mixed_dequantize(m).view(torch.int16))


@pytest.mark.parametrize("qtype", FORMATS)
def test_gemm_within_scaled_tolerance(qtype):
    """A GEMM on realistic (llama-like, synthetic) weights: x @ W^T with the kernel's weights
    against the exact dequant, relative Frobenius error well inside the scaled path's
    tolerance."""
    g = torch.Generator().manual_seed(0)
    e, n_out, n_in = 4, 64, 2048
    w_q = random_quantized(qtype, n_out, n_in, leading=(e,), std=0.02, generator=g)
    x = torch.randn(e, 32, n_in, generator=g).to(torch.bfloat16).float()
    m = mr.repack(w_q, qtype, n_in)
    want = x @ dequantize_reference(w_q, qtype, n_in).transpose(-1, -2)
    got = x @ mr.mixed_dequantize(m, torch.float32).transpose(-1, -2)
    rel = ((got - want).norm() / want.norm()).item()
    assert rel < SCALED_TOL / 3, rel


@pytest.mark.parametrize("qtype,code_bytes", [("Q4_K", 384), ("IQ4_XS", 768)])
def test_layout_and_bytes(qtype, code_bytes):
    w_q = random_bytes(qtype, (5,), 16, 768, 4)
    m = mr.repack(w_q, qtype, 768)
    assert m.codes.dtype == torch.uint8 and m.codes.shape == (5, 16, code_bytes)
    assert m.scales.dtype == m.zeros.dtype == torch.bfloat16
    assert m.scales.shape == m.zeros.shape == (5, 12, 16, 2)
    assert all(t.is_contiguous() for t in (m.codes, m.scales, m.zeros))
    assert (m.n_out, m.n_in, m.leading, m.bits, m.qtype) == (16, 768, (5,), BITS[qtype], qtype)
    # group 2t + h of row n at [t, n, h]: the pair of one K tile together, N the fast dim
    s, _ = mr.group_params(m)
    assert torch.equal(m.scales[:, 4, 9, 1].float(), s[:, 9, 9])
    assert mr.repacked_bytes(m) * 8 == (BITS[qtype] + 1) * 5 * 16 * 768


def test_concat_n():
    """Two stacks' repacks concatenated along N are the repack of the concatenated bytes; stacks
    of two code widths are refused."""
    a, b = random_bytes("Q4_K", (3,), 8, 512, 5), random_bytes("Q4_K", (3,), 16, 512, 6)
    both = mr.concat_n(mr.repack(a, "Q4_K", 512), mr.repack(b, "Q4_K", 512))
    want = mr.repack(torch.cat([a, b], dim=1), "Q4_K", 512)
    for got, exp in zip(both[:3], want[:3]):
        assert torch.equal(got.view(torch.uint8), exp.view(torch.uint8))
    assert (both.bits, both.qtype) == (4, "Q4_K")
    with pytest.raises(ValueError, match="same leading dims, K and code width"):
        mr.concat_n(mr.repack(a, "Q4_K", 512),
                    mr.repack(random_bytes("Q4_K", (3,), 8, 256, 7), "Q4_K", 256))
    with pytest.raises(ValueError, match="same leading dims, K and code width"):
        mr.concat_n(mr.repack(a, "Q4_K", 512),
                    mr.repack(random_bytes("Q8_0", (3,), 8, 512, 7), "Q8_0", 512))


@pytest.mark.parametrize("qtype,shape,n_in,match", [
    ("Q4_K", (12, 144), 256, "multiple of 8"),
    ("Q4_K", (8, 144), 512, "bytes per row"),
    ("Q4_K", (8, 144), 200, "multiple of 256"),
    ("Q4_K", (144,), 256, "at least 2 dims"),
    ("Q8_0", (8, 34), 32, "multiple of 64"),      # one 32-value block: half a K tile
    ("Q6_K", (8, 210), 256, "takes Q4_K, Q4_0"),  # 16-value groups
])
def test_shape_and_format_errors(qtype, shape, n_in, match):
    with pytest.raises(ValueError, match=match):
        mr.repack(torch.zeros(shape, dtype=torch.uint8), qtype, n_in)


def test_dtype_and_type_errors():
    with pytest.raises(ValueError, match="uint8"):
        mr.repack(torch.zeros(8, 144, dtype=torch.int8), "Q4_K", 256)
    with pytest.raises(TypeError, match="torch.Tensor"):
        mr.repack([[0] * 144] * 8, "Q4_K", 256)
    with pytest.raises(ValueError, match="positive multiple of 64"):
        mr.repack(torch.zeros(8, 0, dtype=torch.uint8), "Q4_K", 0)


@pytest.mark.parametrize("qtype", ["Q4_K", "IQ4_XS"])  # both code widths
def test_repack_in_chunks_equals_one_pass(qtype, monkeypatch):
    """CHUNK_VALUES bounds repack's temporaries; chunks that split the stack's rows unevenly (3
    rows of 512 values a step over 2 x 8 rows) give the bytes of one pass."""
    w_q = random_bytes(qtype, (2,), 8, 512, 11)
    whole = mr.repack(w_q, qtype, 512)
    monkeypatch.setattr(mr, "CHUNK_VALUES", 3 * 512)
    chunked = mr.repack(w_q, qtype, 512)
    for got, want in zip(chunked[:3], whole[:3]):
        assert got.shape == want.shape
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))
