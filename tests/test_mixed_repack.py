"""GGUF stacks repacked for the mixed-input GEMM (torch_argon.quant.mixed_repack), on the CPU, for
every format it takes: the codes and groups carried exactly (the exact affine form rebuilt from
the repack equals the dequant reference bit for bit), the kernel's weights (mixed_dequantize)
within the bf16 rounding bound of the reference per value and within the scaled-path tolerance
per GEMM on random and realistic blocks, the layout the kernel reads (the codes' 16 x 16 blocks
in CUTLASS's reordered order, both code widths; the scale pairs), the 4-bit codes' single bf16
rounding against an exact (fractions) reference, and the argument errors."""
import math
from fractions import Fraction

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


CASES = [((), 16, 256, 0), ((3,), 32, 512, 1), ((2,), 48, 1024, 2), ((2, 2), 16, 768, 3)]


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


def test_the_blocks_permutation():
    """to_tiles puts value (n, k) at tile_offset(n, k) of block [k // 16, n // 16] (the module
    doc's formula, a bijection onto 0..255 per block); from_tiles undoes it, leading dims
    kept."""
    n = torch.arange(48)[:, None].expand(48, 128)
    k = torch.arange(128)[None, :].expand(48, 128)
    off = mr.tile_offset(n, k)
    assert sorted(off[:16, :16].reshape(-1).tolist()) == list(range(256))
    assert (int(mr.tile_offset(0, 1)), int(mr.tile_offset(8, 0)), int(mr.tile_offset(0, 8)),
            int(mr.tile_offset(1, 0)), int(mr.tile_offset(0, 2))) == (4, 1, 2, 32, 8)
    u = n * 1000 + k
    t = mr.to_tiles(u)
    assert t.shape == (8, 3, 256)
    assert torch.equal(t[k // 16, n // 16, off], u)
    assert torch.equal(mr.from_tiles(t), u)
    g = torch.Generator().manual_seed(0)
    stack = torch.randint(0, 256, (2, 3, 32, 64), generator=g)
    assert mr.to_tiles(stack).shape == (2, 3, 4, 2, 256)
    assert torch.equal(mr.from_tiles(mr.to_tiles(stack)), stack)


def test_q4k_code_order_of_a_known_block():
    """Q4_K blocks whose code for value (n, k) is a known function of n and k: Q4_K's chunked
    nibble order undone, the codes in the blocks' order (tile_offset), CUTLASS's uint4 packing
    (low nibble first) produced."""
    want = (torch.arange(16)[:, None] * 5 + torch.arange(256) * 7 + 3) % 16  # [n, k]
    block = torch.zeros(16, 144, dtype=torch.uint8)
    for n in range(16):
        qs = torch.zeros(4, 32, dtype=torch.int64)
        for c in range(4):
            qs[c] = want[n, 64 * c:64 * c + 32] | (want[n, 64 * c + 32:64 * c + 64] << 4)
        block[n, 16:] = qs.reshape(-1).to(torch.uint8)
    m = mr.repack(block, "Q4_K", 256)
    assert m.codes.shape == (16, 1, 128)
    assert torch.equal(mr.unpack_codes(m).long(), want)
    # byte 0 of block (0, 0): offset 0 = value (0, 0) low, offset 1 = value (8, 0) high
    assert int(m.codes[0, 0, 0]) == int(want[0, 0] | (want[8, 0] << 4))
    # value (13, 37): K block 2, offset 32 * 5 + 8 * 2 + 4 * 1 + 2 * 0 + 1 = 181, a high nibble
    assert int(mr.tile_offset(13, 37)) == 181
    assert int(m.codes[2, 0, 90]) >> 4 == int(want[13, 37])


def test_q8_0_codes_are_the_int8_plus_128():
    """Q8_0's 8-bit codes: the int8 + 128 of value (n, k) in byte tile_offset(n, k) of its
    block, one byte a value."""
    q = (torch.arange(16)[:, None] * 3 + torch.arange(64) * 8) % 256 - 128  # [n, k]
    block = torch.zeros(16, 2, 34, dtype=torch.uint8)
    block[:, :, 2:] = q.reshape(16, 2, 32).to(torch.int8).view(torch.uint8)
    block[:, :, 1] = 0x3C  # d = 1.0
    m = mr.repack(block.reshape(16, 68), "Q8_0", 64)
    assert m.codes.shape == (4, 1, 256)
    assert torch.equal(mr.unpack_codes(m).long(), q + 128)
    # lane 0's 8 values: (0, 0), (8, 0), (0, 8), (8, 8), (0, 1), (8, 1), (0, 9), (8, 9)
    lane0 = [(0, 0), (8, 0), (0, 8), (8, 8), (0, 1), (8, 1), (0, 9), (8, 9)]
    assert m.codes[0, 0, :8].tolist() == [int(q[n, k]) + 128 for n, k in lane0]
    assert int(mr.tile_offset(13, 37)) == 181
    assert int(m.codes[2, 0, 181]) == int(q[13, 37]) + 128
    assert torch.equal(mr.mixed_dequantize(m, torch.float32), q.float())


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


def bf16_nearest(x):
    """The bf16 value nearest the exact rational x (ties to even; bf16 subnormals, multiples of
    2^-133; overflow to inf), as a float: the slow exact reference."""
    if x == 0:
        return 0.0
    sign, a = (-1 if x < 0 else 1), abs(x)
    e = a.numerator.bit_length() - a.denominator.bit_length()  # 2^(e-1) < a < 2^(e+1)
    if a < Fraction(2) ** e:
        e -= 1
    quantum = Fraction(2) ** (max(e, -126) - 7)
    v = a / quantum
    f = math.floor(v)
    if v - f > Fraction(1, 2) or (v - f == Fraction(1, 2) and f % 2):
        f += 1
    w = f * quantum
    return sign * (math.inf if w >= Fraction(2) ** 128 else float(w))


def assert_bf16_equal(got, want):
    """Bit for bit, up to the sign of zero."""
    assert got.dtype == want.dtype == torch.bfloat16
    same = got.view(torch.int16) == want.view(torch.int16)
    assert (same | ((got == 0) & (want == 0))).all()


def exact_bf16(values):
    """bf16 tensor of bf16_nearest over a list of Fractions."""
    return torch.tensor([bf16_nearest(v) for v in values], dtype=torch.float64).to(
        torch.float32).to(torch.bfloat16)  # exact: bf16 values


def test_bf16_of_sum_rounds_once_exactly():
    """bf16_of_sum(a, b) is the exact a + b rounded to bf16 once, against a fractions reference:
    random float64 pairs of every magnitude (sums not exact in float64 included), the repack's
    kind of sums (u * s + z of bf16 s, z), exact ties and ties missed by a tiny term either
    side, bf16 subnormals and their ties, the overflow boundary."""
    g = torch.Generator().manual_seed(0)

    def rand_f64(count, lo, hi):
        mant = 1 + torch.rand(count, generator=g, dtype=torch.float64)
        sign = torch.randint(0, 2, (count,), generator=g) * 2 - 1
        return sign * mant * torch.exp2(torch.randint(lo, hi, (count,), generator=g).double())

    bf = lambda t: t.to(torch.bfloat16).double()  # noqa: E731
    a, b = [], []
    a.append(rand_f64(1000, -140, 127))
    b.append(rand_f64(1000, -200, 127))
    a.append(rand_f64(500, -20, 20))
    b.append(torch.zeros(500, dtype=torch.float64))
    u = torch.randint(0, 16, (1000,), generator=g).double()
    a.append(u * bf(rand_f64(1000, -30, 20)))
    b.append(bf(rand_f64(1000, -35, 22)))
    ties = bf(rand_f64(600, -125, 126)).abs()
    ties = torch.copysign(ties + torch.exp2(torch.floor(torch.log2(ties)) - 8), rand_f64(
        600, 0, 1))  # the midpoint above a bf16 value (same sign)
    a.append(ties)
    b.append(torch.cat([torch.zeros(200), torch.full((200,), 2.0 ** -300),
                                        torch.full((200,), -(2.0 ** -300))]).double())
    ties_rel = ties[:200]
    a.append(ties_rel)
    b.append(-ties_rel * 2.0 ** -60)
    sub = rand_f64(400, -141, -126)
    a.append(sub)
    b.append(torch.zeros(400, dtype=torch.float64))
    half = (torch.randint(-(2 ** 7), 2 ** 7, (300,), generator=g).double() + 0.5) * 2.0 ** -133
    a.append(half)
    b.append(torch.cat([torch.zeros(100), torch.full((100,), 2.0 ** -400),
                                        torch.full((100,), -(2.0 ** -400))]).double())
    top = torch.tensor([255.5, 255.5, -255.5, 255.25, 254.5, 255.0]).double() * 2.0 ** 120
    a.append(top)
    b.append(torch.tensor([0.0, -(2.0 ** 60), 0.0, 0.0, 0.0, 2.0 ** 111]).double())
    a, b = torch.cat(a), torch.cat(b)
    got = mr.bf16_of_sum(a, b)
    want = exact_bf16([Fraction(x) + Fraction(y) for x, y in zip(a.tolist(), b.tolist())])
    assert_bf16_equal(got, want)
    # bf16's max 255 * 2^120 and the tie above it: to the even 2^128, inf; just below, the max
    assert got[-6] == math.inf and got[-4] == -math.inf and got[-5] == 255 * 2.0 ** 120
    # the tie cases: a double rounding (float32, then bf16) gets some of them wrong
    double = (a + b).to(torch.float32).to(torch.bfloat16)
    assert not torch.equal(double.view(torch.int16), want.view(torch.int16))


def mixed_of(u, s, z, bits):
    """MixedWeights from codes u [N, K] in value order and bf16 scales / zeros [N, K/32]."""
    n, k = u.shape
    t = mr.to_tiles(u.to(torch.int32))
    codes = (t if bits == 8 else t[..., 0::2] | (t[..., 1::2] << 4)).to(torch.uint8)
    pairs = [v.reshape(n, k // 64, 2).movedim(-2, -3).contiguous() for v in (s, z)]
    return mr.MixedWeights(codes, *pairs, k, bits, "test")


def test_4_bit_codes_round_once_8_bit_codes_twice():
    """Where u * s + z is within float32's rounding of a bf16 tie, the 4-bit codes' weight (one
    bf16 fma) rounds the exact value, the 8-bit codes' (float32 fma, then bf16) the tie:
    3 * (1 + 2^-7) - 2^-30 = (3 + 2^-6 and a half) - 2^-30: 3 + 2^-6 once, 3 + 2^-5 (even)
    twice; 3 * (1 + 3 2^-7) + 2^-30 = (3 + 4 2^-6 and a half) + 2^-30: 3 + 5 2^-6 once,
    3 + 4 2^-6 (even) twice."""
    u = torch.full((16, 64), 3)
    s = torch.empty(16, 2, dtype=torch.bfloat16)
    z = torch.empty(16, 2, dtype=torch.bfloat16)
    s[:8], z[:8] = 1 + 2 ** -7, -(2 ** -30)
    s[8:], z[8:] = 1 + 3 * 2 ** -7, 2 ** -30
    once = torch.tensor([3 + 2 ** -6] * 8 + [3 + 5 * 2 ** -6] * 8)[:, None].expand(16, 64)
    twice = torch.tensor([3 + 2 ** -5] * 8 + [3 + 4 * 2 ** -6] * 8)[:, None].expand(16, 64)
    assert torch.equal(mr.mixed_dequantize(mixed_of(u, s, z, 4), torch.float32), once)
    assert torch.equal(mr.mixed_dequantize(mixed_of(u, s, z, 8), torch.float32), twice)


@pytest.mark.parametrize("qtype", FORMATS)
def test_kernel_weights_by_formula(qtype):
    """mixed_dequantize, with the bf16 s and z the repack stored: 4-bit codes, the exact
    u * s + z rounded to bf16 once (fractions reference); 8-bit codes,
    bf16(float32(u * s + z))."""
    w_q = random_bytes(qtype, (2,), 16, 512, 7)
    m = mr.repack(w_q, qtype, 512)
    s, z = mr.group_params(m)
    u = mr.unpack_codes(m).float().reshape(2, 16, 16, 32)
    got = mr.mixed_dequantize(m)
    if m.bits == 8:
        want = torch.addcmul(z[..., None], u, s[..., None]).to(torch.bfloat16)
    else:
        us, ss, zs = (t.expand(2, 16, 16, 32).reshape(-1).tolist()
                      for t in (u, s[..., None], z[..., None]))
        want = exact_bf16([Fraction(int(ui)) * Fraction(si) + Fraction(zi)
                           for ui, si, zi in zip(us, ss, zs)])
    assert_bf16_equal(got, want.reshape(2, 16, 512))
    _, s_exact, z_exact = mr.groups(w_q, qtype, 512)
    assert torch.equal(s, s_exact.to(torch.bfloat16).float())
    assert torch.equal(z, z_exact.to(torch.bfloat16).float())


@pytest.mark.parametrize("qtype", ["Q4_K", "Q8_0"])
def test_the_kernels_reading_of_the_bytes(qtype):
    """What hopper_mixed_convert.cuh does with the repack's bytes, emulated: the scales and
    zeros read as little-endian uint32 [E, K/64, N] (group 2t in the low half: bits << 16,
    group 2t + 1 in the high half: bits & 0xFFFF0000), K block kb of a 64-wide tile in group
    2t + kb / 2; the codes of a 16 x 16 block as its lanes' words: 4-bit, lane l's 32-bit word
    (bytes 4l .. 4l + 3), pair j = nibbles j and j + 4, values (n, k) and (n, k + 1) with
    n = 8 (j % 2) + l // 4, k = 2 (l % 4) + 8 (j // 2), each code as bf16 (0x4300 | u) - 128,
    w = one bf16 fma; 8-bit, lane l's two words (bytes 8l .. 8l + 7), byte j of the first and
    byte j of the second the same (n, k), (n, k + 1), w = bf16(float32 fma): the codes
    unpack_codes gives, and mixed_dequantize's weights, bit for bit."""
    E, N, K = 2, 48, 512
    m = mr.repack(random_bytes(qtype, (E,), N, K, 9), qtype, K)
    pairs = m.scales.view(torch.int32).squeeze(-1), m.zeros.view(torch.int32).squeeze(-1)
    assert pairs[0].shape == (E, K // 64, N)

    def half(bits, h):  # pair_half
        return ((bits << 16) if h == 0 else (bits & -65536)).view(torch.float32)

    words = m.codes.view(torch.int32).long() & 0xFFFFFFFF  # [E, K/16, N/16, 32 or 64]
    kb, nb, lane, j = torch.meshgrid(torch.arange(K // 16), torch.arange(N // 16),
                                     torch.arange(32), torch.arange(4), indexing="ij")
    n, k = 16 * nb + 8 * (j % 2) + lane // 4, 16 * kb + 2 * (lane % 4) + 8 * (j // 2)
    if m.bits == 4:  # the pair: nibbles j and j + 4 of the lane's word
        word = words[:, kb, nb, lane]
        pair = [(word >> (4 * p)) & 15 for p in (j, j + 4)]
    else:  # byte j of the lane's first word, byte j of its second
        pair = [(words[:, kb, nb, 2 * lane + i] >> (8 * j)) & 255 for i in (0, 1)]
    t, h = kb // 4, (kb % 4) // 2  # K tile, its group of K block kb
    s = torch.where(h == 0, half(pairs[0][:, t, n], 0), half(pairs[0][:, t, n], 1))
    z = torch.where(h == 0, half(pairs[1][:, t, n], 0), half(pairs[1][:, t, n], 1))
    u = torch.full((E, N, K), -1, dtype=torch.long)
    w = torch.empty(E, N, K, dtype=torch.bfloat16)
    for i, code in enumerate(pair):  # (n, k), (n, k + 1)
        u[:, n, k + i] = code
        if m.bits == 4:  # the code as bf16 (0x4300 | u) - 128: exact; one bf16 fma
            q = (0x4300 | code).to(torch.int16).view(torch.bfloat16).double() - 128
            w[:, n, k + i] = mr.bf16_of_sum(q * s.double(), z.double())
        else:  # float32 fma (u * s exact), then bf16
            w[:, n, k + i] = torch.addcmul(z, code.float(), s).to(torch.bfloat16)
    assert torch.equal(u, mr.unpack_codes(m).long())
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


@pytest.mark.parametrize("qtype,block_bytes", [("Q4_K", 128), ("IQ4_XS", 256)])
def test_layout_and_bytes(qtype, block_bytes):
    w_q = random_bytes(qtype, (5,), 32, 768, 4)
    m = mr.repack(w_q, qtype, 768)
    assert m.codes.dtype == torch.uint8 and m.codes.shape == (5, 48, 2, block_bytes)
    assert m.scales.dtype == m.zeros.dtype == torch.bfloat16
    assert m.scales.shape == m.zeros.shape == (5, 12, 32, 2)
    assert all(t.is_contiguous() for t in (m.codes, m.scales, m.zeros))
    assert (m.n_out, m.n_in, m.leading, m.bits, m.qtype) == (32, 768, (5,), BITS[qtype], qtype)
    # group 2t + h of row n at [t, n, h]: the pair of one K tile together, N the fast dim
    s, _ = mr.group_params(m)
    assert torch.equal(m.scales[:, 4, 9, 1].float(), s[:, 9, 9])
    assert mr.repacked_bytes(m) * 8 == (BITS[qtype] + 1) * 5 * 32 * 768


@pytest.mark.parametrize("qtype", ["Q4_K", "Q8_0"])  # both code widths
def test_concat_n(qtype):
    """Two stacks' repacks concatenated along N (the codes along their N-block dim) are the
    repack of the concatenated rows, every byte: the blocks of the first stack's rows then the
    second's within each K block. Stacks of other K or code widths are refused."""
    a, b = random_bytes(qtype, (3,), 16, 512, 5), random_bytes(qtype, (3,), 32, 512, 6)
    both = mr.concat_n(mr.repack(a, qtype, 512), mr.repack(b, qtype, 512))
    want = mr.repack(torch.cat([a, b], dim=1), qtype, 512)
    for got, exp in zip(both[:3], want[:3]):
        assert got.shape == exp.shape
        assert torch.equal(got.view(torch.uint8), exp.view(torch.uint8))
    assert (both.n_out, both.bits, both.qtype) == (48, BITS[qtype], qtype)
    other = "Q8_0" if qtype == "Q4_K" else "Q4_K"
    with pytest.raises(ValueError, match="same leading dims, K and code width"):
        mr.concat_n(mr.repack(a, qtype, 512),
                    mr.repack(random_bytes(qtype, (3,), 16, 256, 7), qtype, 256))
    with pytest.raises(ValueError, match="same leading dims, K and code width"):
        mr.concat_n(mr.repack(a, qtype, 512),
                    mr.repack(random_bytes(other, (3,), 16, 512, 7), other, 512))


@pytest.mark.parametrize("qtype,shape,n_in,match", [
    ("Q4_K", (8, 144), 256, r"w_q: .* N \(the output rows, dim -2\) to be a multiple of 16"),
    ("Q4_K", (24, 144), 256, r"w_q: .* multiple of 16 .*got N=24"),
    ("Q4_K", (16, 144), 512, "bytes per row"),
    ("Q4_K", (16, 144), 200, "multiple of 256"),
    ("Q4_K", (144,), 256, "at least 2 dims"),
    ("Q8_0", (16, 34), 32, "multiple of 64"),      # one 32-value block: half a K tile
    ("Q6_K", (16, 210), 256, "takes Q4_K, Q4_0"),  # 16-value groups
])
def test_shape_and_format_errors(qtype, shape, n_in, match):
    with pytest.raises(ValueError, match=match):
        mr.repack(torch.zeros(shape, dtype=torch.uint8), qtype, n_in)


def test_dtype_and_type_errors():
    with pytest.raises(ValueError, match="uint8"):
        mr.repack(torch.zeros(16, 144, dtype=torch.int8), "Q4_K", 256)
    with pytest.raises(TypeError, match="torch.Tensor"):
        mr.repack([[0] * 144] * 16, "Q4_K", 256)
    with pytest.raises(ValueError, match="positive multiple of 64"):
        mr.repack(torch.zeros(16, 0, dtype=torch.uint8), "Q4_K", 0)


@pytest.mark.parametrize("qtype", ["Q4_K", "IQ4_XS"])  # both code widths
@pytest.mark.parametrize("chunk_rows", [3, 40])  # steps of 16 rows (the least), of 32 + 16
def test_repack_in_chunks_equals_one_pass(qtype, chunk_rows, monkeypatch):
    """CHUNK_VALUES bounds repack's temporaries; steps of whole 16-row blocks per leading
    index, splitting the 48 rows unevenly (32 then 16) or at the least step, give the bytes of
    one pass; so does the traced form's single pass."""
    w_q = random_bytes(qtype, (2,), 48, 512, 11)
    whole = mr.repack(w_q, qtype, 512)
    monkeypatch.setattr(mr, "CHUNK_VALUES", chunk_rows * 512)
    chunked = mr.repack(w_q, qtype, 512)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    traced = mr.repack(w_q, qtype, 512)
    for got, want, one in zip(chunked[:3], whole[:3], traced[:3]):
        assert got.shape == want.shape == one.shape
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))
        assert torch.equal(one.view(torch.uint8), want.view(torch.uint8))
