"""moe_combine against the reference. The contract fixes the accumulation (fp32, ascending k,
one rounding per step, skipped entries skipped), so the result is compared bit for bit."""
import pytest
import torch

from conftest import assert_bits_equal
from routing_cases import DISTRIBUTIONS, garbage_like, make_ids, make_weights

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def plan_for(T, K, E, dist, w_dtype=torch.float32):
    from torch_argon import reference
    w = make_weights(T, K, w_dtype)
    return reference.moe_plan(make_ids(T, K, E, dist), w, E, 16), w


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
@pytest.mark.parametrize("T,K,E,H", [(0, 2, 4, 32), (1, 1, 1, 8), (40, 10, 64, 96),
                                      (64, 16, 32, 40), (200, 2, 8, 128)])
def test_combine_matches_reference(backend, ref, T, K, E, H, dist):
    plan, w = plan_for(T, K, E, dist)
    y = torch.randn(plan.sorted_token.shape[0], H, dtype=torch.bfloat16)
    out = garbage_like(torch.empty(T, H, dtype=torch.bfloat16)).to(backend.device)
    d = backend.device
    got = backend.ops.moe_combine(y.to(d), plan.pos.to(d), w.to(d), out=out)
    assert got is out
    assert_bits_equal(got, ref.moe_combine(y, plan.pos, w), "out")


@pytest.mark.parametrize("y_dtype", DTYPES)
@pytest.mark.parametrize("w_dtype", DTYPES)
@pytest.mark.parametrize("out_dtype", DTYPES)
def test_combine_dtypes(backend, ref, y_dtype, w_dtype, out_dtype):
    plan, w = plan_for(90, 10, 32, "neg_some", w_dtype)
    y = (torch.randn(plan.sorted_token.shape[0], 48) * 10).to(y_dtype)
    d = backend.device
    got = backend.ops.moe_combine(y.to(d), plan.pos.to(d), w.to(d), out_dtype=out_dtype)
    assert_bits_equal(got, ref.moe_combine(y, plan.pos, w, out_dtype=out_dtype), "out")


@pytest.mark.parametrize("extra_dtype", DTYPES)
def test_combine_shared_and_residual(backend, ref, extra_dtype):
    plan, w = plan_for(70, 4, 16, "uniform")
    y = torch.randn(plan.sorted_token.shape[0], 64, dtype=torch.float16)
    shared = torch.randn(70, 64).to(extra_dtype)
    residual = torch.randn(70, 64).to(extra_dtype)
    d = backend.device
    for s, r in [(shared, None), (None, residual), (shared, residual)]:
        got = backend.ops.moe_combine(y.to(d), plan.pos.to(d), w.to(d),
                                      shared=None if s is None else s.to(d),
                                      residual=None if r is None else r.to(d))
        assert_bits_equal(got, ref.moe_combine(y, plan.pos, w, shared=s, residual=r), "out")


def test_combine_signed_zero_and_specials(backend, ref):
    """-0.0 terms, infinities and NaN in y follow the same arithmetic as the reference."""
    plan, w = plan_for(16, 3, 4, "neg_some")
    y = torch.randn(plan.sorted_token.shape[0], 8)
    y[::3] = -0.0
    y[1, 0], y[2, 1], y[4, 2] = float("inf"), float("-inf"), float("nan")
    d = backend.device
    got = backend.ops.moe_combine(y.to(d), plan.pos.to(d), w.to(d))
    assert_bits_equal(got, ref.moe_combine(y, plan.pos, w), "out")


def test_combine_strided_y(backend, ref):
    plan, w = plan_for(30, 3, 8, "uniform")
    y = torch.randn(plan.sorted_token.shape[0], 2 * 24, dtype=torch.bfloat16)[:, 1::2]
    d = backend.device
    got = backend.ops.moe_combine(y.to(d), plan.pos.to(d), w.to(d))
    assert_bits_equal(got, ref.moe_combine(y, plan.pos, w), "out")
