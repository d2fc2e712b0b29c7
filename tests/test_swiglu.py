"""swiglu against the reference: silu(g) * u in fp32, rounded once. The exp of each backend
may differ by an ulp, so the comparison allows a few ulps of the output dtype."""
import pytest
import torch

from routing_cases import garbage_like

# Absolute and relative tolerances per output dtype: a few ulps of each.
TOL = {torch.float32: (1e-6, 1e-5), torch.float16: (1e-3, 2e-3), torch.bfloat16: (1e-2, 1.6e-2)}
DTYPES = list(TOL)


ACTIVATIONS = ["silu", "gelu", "gelu_tanh"]


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fused", [False, True], ids=["two_tensors", "fused_gate_up"])
@pytest.mark.parametrize("R,I", [(0, 8), (1, 1), (37, 100), (256, 512)])
def test_swiglu_matches_reference(backend, ref, dtype, fused, R, I, activation):
    g = (torch.randn(R, 2 * I) * 4).to(dtype)
    d = backend.device
    out = garbage_like(torch.empty(R, I, dtype=dtype)).to(d)
    if fused:
        got = backend.ops.swiglu(g.to(d), out=out, activation=activation)
        want = ref.swiglu(g, activation=activation)
    else:
        gate, up = g[:, :I].contiguous(), g[:, I:].contiguous()
        got = backend.ops.swiglu(gate.to(d), up.to(d), out=out, activation=activation)
        want = ref.swiglu(gate, up, activation=activation)
    atol, rtol = TOL[dtype]
    if activation != "silu" and dtype == torch.float32:
        # gelu(g) = 0.5 g (1 + erf): for negative g the sum cancels, so every implementation's
        # result is off by up to an ulp of 1 times |g u| / 2, here up to ~1e-5 (|g|, |u| <= ~16).
        atol = 2e-5
    torch.testing.assert_close(got.cpu(), want, atol=atol, rtol=rtol)


@pytest.mark.parametrize("out_dtype", DTYPES)
def test_swiglu_out_dtype(backend, ref, out_dtype):
    g = torch.randn(20, 64, dtype=torch.bfloat16)
    got = backend.ops.swiglu(g.to(backend.device), out_dtype=out_dtype)
    atol, rtol = TOL[out_dtype]
    torch.testing.assert_close(got.cpu(), ref.swiglu(g, out_dtype=out_dtype), atol=atol, rtol=rtol)


def test_swiglu_large_magnitudes(backend, ref):
    """Large |g| saturates silu to g or 0 without NaN."""
    g = torch.tensor([[-1e4, -100.0, 100.0, 1e4, 2.0, 3.0, 4.0, 5.0]])
    got = backend.ops.swiglu(g.to(backend.device))
    torch.testing.assert_close(got.cpu(), ref.swiglu(g), atol=1e-6, rtol=1e-5)


# fp32 out: relative to the reference within 16 ulp (each backend's exp is within a few ulps of
# torch's), with an absolute floor of the smallest normal float only, so that a wrong exp in any
# part of its range fails; the general TOL's atol would accept any answer near zero.
EVERY_GATE_TOL = {torch.float32: (torch.finfo(torch.float32).tiny, 16 * 2.0 ** -23),
                  torch.bfloat16: TOL[torch.bfloat16]}


@pytest.mark.parametrize("out_dtype", list(EVERY_GATE_TOL))
def test_swiglu_every_finite_bf16_gate(backend, ref, out_dtype):
    """Every finite bf16 value as the gate (zeros, subnormals, the largest, both signs) times
    two ups: with fp32 out, each backend's silu is held to 16 ulp of the reference's over the
    whole range of its exp, including where exp(-g) overflows."""
    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    gate = bits.view(torch.bfloat16)
    gate = gate[torch.isfinite(gate)].reshape(-1, 8)
    d = backend.device
    atol, rtol = EVERY_GATE_TOL[out_dtype]
    for up_value in (1.0, -3.5):
        up = torch.full_like(gate, up_value)
        got = backend.ops.swiglu(gate.to(d), up.to(d), out_dtype=out_dtype)
        torch.testing.assert_close(got.cpu(), ref.swiglu(gate, up, out_dtype=out_dtype),
                                   atol=atol, rtol=rtol)


@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh"])
def test_gelu_every_finite_bf16_gate(backend, ref, activation):
    """Every finite bf16 gate through the GeGLU activations, fp32 out: within 8 ulp of the
    reference's, or 1e-6 absolute where 1 + erf (or 1 + tanh) cancels for negative gates (an
    ulp of 1 times |g| / 2 for |g| up to 8, beyond which erf is -1 for everyone; Metal's erf is
    our own, within 3 ulp)."""
    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    gate = bits.view(torch.bfloat16)
    gate = gate[torch.isfinite(gate)].reshape(-1, 8)
    up = torch.full_like(gate, 1.0)
    got = backend.ops.swiglu(gate.to(backend.device), up.to(backend.device),
                             out_dtype=torch.float32, activation=activation)
    want = ref.swiglu(gate, up, out_dtype=torch.float32, activation=activation)
    torch.testing.assert_close(got.cpu(), want, atol=1e-6, rtol=8 * 2.0 ** -23)


def test_swiglu_unknown_activation(backend):
    g = torch.randn(4, 8, device=backend.device)
    with pytest.raises(ValueError, match='activation must be one of "silu", "gelu", "gelu_tanh"'):
        backend.ops.swiglu(g, activation="relu")
