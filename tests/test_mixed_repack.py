"""Q4_K repacked for the mixed-input GEMM (torch_argon.quant.mixed_repack), on the CPU: the codes
and groups carried exactly (the exact affine form rebuilt from the repack equals the dequant
reference bit for bit), the kernel's weights (mixed_dequantize) within the bf16 rounding bound
of the reference per value and within the scaled-path tolerance per GEMM on random and
realistic blocks, the layout the kernel reads, and the argument errors."""
import pytest
import torch

from gpuq_cases import SCALED_TOL
from torch_argon.quant import dequantize_reference, force_finite_scales, random_quantized
from torch_argon.quant import mixed_repack as mr
from torch_argon.quant import reference


def random_bytes(shape_lead, n_out, n_in, seed):
    """Q4_K blocks of uniformly random bytes with finite fp16 scales (every code, scale and min
    pattern, extreme magnitudes included)."""
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (*shape_lead, n_out, n_in // 256 * 144), dtype=torch.uint8,
                        generator=g)
    return force_finite_scales(raw, "Q4_K")


def exact_params(w_q):
    """float32 (d * sc, dmin * m) per group [..., N, K/32], as the reference computes them."""
    blocks = w_q.reshape(-1, 144)
    d, dmin = reference._f16(blocks, 0), reference._f16(blocks, 2)
    sc, m = reference._k_scales_mins(reference._field(blocks, 4, 12))
    shape = (*w_q.shape[:-1], -1)
    return (d * sc.float()).reshape(shape), (dmin * m.float()).reshape(shape)


CASES = [((), 8, 256, 0), ((3,), 16, 512, 1), ((2,), 24, 1024, 2), ((2, 2), 8, 768, 3)]


@pytest.mark.parametrize("lead,n_out,n_in,seed", CASES)
def test_codes_and_groups_exact(lead, n_out, n_in, seed):
    """(d * sc) * q - dmin * m from the repack's codes and the exact per-group parameters is the
    reference's value, bit for bit: every code lands at its value's position, every group's
    parameters at theirs."""
    w_q = random_bytes(lead, n_out, n_in, seed)
    m = mr.repack_q4k(w_q, n_in)
    q = mr.unpack_codes(m).float().reshape(*lead, n_out, n_in // 32, 32)
    dl, ml = exact_params(w_q)
    rebuilt = reference._sub(dl[..., None] * q, ml[..., None]).reshape(*lead, n_out, n_in)
    want = dequantize_reference(w_q, "Q4_K", n_in)
    assert torch.equal(rebuilt.view(torch.int32), want.view(torch.int32))


def test_code_order_of_a_known_block():
    """One block whose code for value k is a known function of k: Q4_K's chunked nibble order
    undone, CUTLASS's uint4 packing (low nibble first) produced."""
    want = (torch.arange(256) * 7 + 3) % 16            # codes in value order
    qs = torch.zeros(4, 32, dtype=torch.int32)
    for c in range(4):
        qs[c] = want[64 * c:64 * c + 32] | (want[64 * c + 32:64 * c + 64] << 4)
    block = torch.zeros(8, 144, dtype=torch.uint8)
    block[:, 16:] = qs.reshape(-1).to(torch.uint8)
    m = mr.repack_q4k(block, 256)
    assert torch.equal(mr.unpack_codes(m)[0].long(), want)
    assert int(m.codes[0, 0]) == int(want[0] | (want[1] << 4))


@pytest.mark.parametrize("lead,n_out,n_in,seed", CASES)
def test_kernel_weights_within_bf16_rounding(lead, n_out, n_in, seed):
    """mixed_dequantize (the kernel's bf16(q * bf16(s) + bf16(z))) differs from the exact value
    by at most the three bf16 roundings (unit roundoff 2^-8): 2^-8 of 15 |s| + |z| + |w|
    (s, z, w exact)."""
    w_q = random_bytes(lead, n_out, n_in, seed)
    m = mr.repack_q4k(w_q, n_in)
    got = mr.mixed_dequantize(m, torch.float32)
    want = dequantize_reference(w_q, "Q4_K", n_in)
    dl, ml = exact_params(w_q)
    per_group = (15 * dl.abs() + ml.abs()).repeat_interleave(32, dim=-1)
    bound = 2.0 ** -8 * (per_group + want.abs()) * 1.01
    assert ((got - want).abs() <= bound).all()


def test_kernel_weights_by_formula():
    """mixed_dequantize is bf16(float(q) * s + z) with the bf16 s and z the repack stored."""
    w_q = random_bytes((2,), 8, 512, 7)
    m = mr.repack_q4k(w_q, 512)
    s, z = mr.group_params(m)
    q = mr.unpack_codes(m).float().reshape(2, 8, 16, 32)
    want = torch.addcmul(z[..., None], q, s[..., None]).to(torch.bfloat16).reshape(2, 8, 512)
    assert torch.equal(mr.mixed_dequantize(m).view(torch.int16), want.view(torch.int16))
    dl, ml = exact_params(w_q)
    assert torch.equal(s, dl.to(torch.bfloat16).float())
    assert torch.equal(z, (-ml).to(torch.bfloat16).float())


def test_the_kernels_reading_of_the_bytes():
    """What hopper_mixed_q4k_convert.cuh does with the repack's bytes, emulated: the scales and
    zeros read as little-endian uint32 [E, K/64, N] (group 2t in the low half: bits << 16,
    group 2t + 1 in the high half: bits & 0xFFFF0000, as float32), the codes as nibbles of
    [E, N, K/2] bytes (low first), K block kb of a 64-wide tile in group 2t + kb / 2, and
    w = bf16(fma(q, s, z)): mixed_dequantize, bit for bit."""
    E, N, K = 2, 8, 512
    m = mr.repack_q4k(random_bytes((E,), N, K, 9), K)
    pairs = m.scales.view(torch.int32).squeeze(-1), m.zeros.view(torch.int32).squeeze(-1)
    assert pairs[0].shape == (E, K // 64, N)

    def half(bits, h):  # pair_half
        return ((bits << 16) if h == 0 else (bits & -65536)).view(torch.float32)

    codes = m.codes.to(torch.int32)
    w = torch.empty(E, N, K, dtype=torch.bfloat16)
    for k in range(K):
        t, kb = k // 64, (k % 64) // 16
        q = ((codes[:, :, k // 2] >> (4 * (k % 2))) & 15).float()
        s = half(pairs[0][:, t, :], kb // 2)
        z = half(pairs[1][:, t, :], kb // 2)
        w[:, :, k] = torch.addcmul(z, q, s).to(torch.bfloat16)  # q * s exact: fma's rounding
    assert torch.equal(w.view(torch.int16), mr.mixed_dequantize(m).view(torch.int16))


@pytest.mark.parametrize("seed", [0, 1])
def test_gemm_within_scaled_tolerance(seed):
    """A GEMM on realistic (llama-like, synthetic) Q4_K weights: x @ W^T with the kernel's
    weights against the exact dequant, relative Frobenius error well inside the scaled path's
    tolerance."""
    g = torch.Generator().manual_seed(seed)
    e, n_out, n_in = 4, 64, 2048
    w_q = random_quantized("Q4_K", n_out, n_in, leading=(e,), std=0.02, generator=g)
    x = torch.randn(e, 32, n_in, generator=g).to(torch.bfloat16).float()
    m = mr.repack_q4k(w_q, n_in)
    want = x @ dequantize_reference(w_q, "Q4_K", n_in).transpose(-1, -2)
    got = x @ mr.mixed_dequantize(m, torch.float32).transpose(-1, -2)
    rel = ((got - want).norm() / want.norm()).item()
    assert rel < SCALED_TOL / 3, rel


def test_layout_and_bytes():
    w_q = random_bytes((5,), 16, 768, 4)
    m = mr.repack_q4k(w_q, 768)
    assert m.codes.dtype == torch.uint8 and m.codes.shape == (5, 16, 384)
    assert m.scales.dtype == m.zeros.dtype == torch.bfloat16
    assert m.scales.shape == m.zeros.shape == (5, 12, 16, 2)
    assert all(t.is_contiguous() for t in (m.codes, m.scales, m.zeros))
    assert (m.n_out, m.n_in, m.leading) == (16, 768, (5,))
    # group 2t + h of row n at [t, n, h]: the pair of one K tile together, N the fast dim
    s, _ = mr.group_params(m)
    assert torch.equal(m.scales[:, 4, 9, 1].float(), s[:, 9, 9])
    assert mr.repacked_bytes(m) * 8 == 5 * 5 * 16 * 768


def test_concat_n():
    """Two stacks' repacks concatenated along N are the repack of the concatenated bytes."""
    a, b = random_bytes((3,), 8, 512, 5), random_bytes((3,), 16, 512, 6)
    both = mr.concat_n(mr.repack_q4k(a, 512), mr.repack_q4k(b, 512))
    want = mr.repack_q4k(torch.cat([a, b], dim=1), 512)
    for got, exp in zip(both[:3], want[:3]):
        assert torch.equal(got.view(torch.uint8), exp.view(torch.uint8))
    with pytest.raises(ValueError, match="same leading dims and K"):
        mr.concat_n(mr.repack_q4k(a, 512), mr.repack_q4k(random_bytes((3,), 8, 256, 7), 256))


@pytest.mark.parametrize("shape,n_in,match", [
    ((12, 144), 256, "multiple of 8"),
    ((8, 144), 512, "bytes per row"),
    ((8, 144), 200, "multiple of 256"),
    ((144,), 256, "at least 2 dims"),
])
def test_shape_errors(shape, n_in, match):
    with pytest.raises(ValueError, match=match):
        mr.repack_q4k(torch.zeros(shape, dtype=torch.uint8), n_in)


def test_dtype_and_type_errors():
    with pytest.raises(ValueError, match="uint8"):
        mr.repack_q4k(torch.zeros(8, 144, dtype=torch.int8), 256)
    with pytest.raises(TypeError, match="torch.Tensor"):
        mr.repack_q4k([[0] * 144] * 8, 256)
    with pytest.raises(ValueError, match="n_in > 0"):
        mr.repack_q4k(torch.zeros(8, 0, dtype=torch.uint8), 0)
