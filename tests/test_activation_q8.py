"""The q8 activation quantization (torch_argon/quant/activation_q8.py): the definition the
integer kernels of moe_qmm(..., activation_quant="q8") are held to."""
import pytest
import torch

from torch_argon.quant.activation_q8 import Q8_BLOCK, q8_activations, quantize_rows_q8


def test_codes_scales_and_round_trip():
    x = torch.randn(7, 4 * Q8_BLOCK, generator=torch.Generator().manual_seed(0)) * 3
    q, d = quantize_rows_q8(x)
    assert q.dtype == torch.int8 and d.dtype == torch.float32
    assert d.shape == (7, 4)
    blocks = x.reshape(7, 4, Q8_BLOCK)
    amax = blocks.abs().amax(-1)
    assert torch.equal(d, amax / 127)
    # the largest value of every block maps to +-127; every error is at most half a step
    assert torch.equal(q.reshape(7, 4, Q8_BLOCK).abs().amax(-1), torch.full((7, 4), 127, dtype=torch.int8))
    err = (q8_activations(x) - x.double()).reshape(7, 4, Q8_BLOCK).abs()
    assert (err <= d.double()[..., None] / 2 * (1 + 1e-6)).all()


def test_scale_and_inverse_are_correctly_rounded():
    """inv = 127 / amax and d = amax / 127 as single float32 divisions (what every kernel
    computes), not 127 * (1 / amax), which differs in the last bit for about a quarter of the
    values and then moves codes whose product lies within a rounding of .5 (failed before the
    reference divided: a block whose 127 * (1 / amax) product rounded -83.49999 to -83.5)."""
    x = torch.rand(4096, Q8_BLOCK, generator=torch.Generator().manual_seed(1)) * 3 + 1e-3
    _, d = quantize_rows_q8(x)
    amax = x.abs().amax(-1).double()
    assert torch.equal(d, (amax / 127).float().reshape(d.shape))
    block = torch.tensor([[2.9639759063720703, -1.9487556219100952] + [0.0] * 30])
    q, _ = quantize_rows_q8(block)
    inv = (127 / torch.tensor(2.9639759063720703, dtype=torch.float64)).float()
    assert q[0, 1].item() == round(float(torch.tensor(-1.9487556219100952) * inv)) == -83


def test_rounds_half_to_even():
    x = torch.zeros(1, Q8_BLOCK)
    x[0, 0] = 127.0  # d = 1, inv = 1: codes equal the values
    x[0, 1:5] = torch.tensor([0.5, 1.5, 2.5, -0.5])
    q, d = quantize_rows_q8(x)
    assert d.item() == 1.0
    assert q[0, :5].tolist() == [127, 0, 2, 2, 0]


@pytest.mark.parametrize("tiny", [0.0, 1e-38])
def test_zero_and_underflowing_blocks_quantize_to_zero(tiny):
    x = torch.full((2, Q8_BLOCK), tiny)
    x[1] = torch.linspace(-1, 1, Q8_BLOCK)
    q, d = quantize_rows_q8(x)
    assert d[0].item() == 0 and not q[0].any()
    assert d[1].item() == pytest.approx(1 / 127)


def test_non_finite_block_gives_non_finite_values():
    x = torch.randn(1, 2 * Q8_BLOCK)
    x[0, 3] = float("nan")
    x[0, Q8_BLOCK + 5] = float("inf")
    a = q8_activations(x)
    assert not torch.isfinite(a).any()  # d is NaN / inf in both blocks


def test_shape_errors():
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize_rows_q8(torch.zeros(2, 33))
