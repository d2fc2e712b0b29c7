"""moe_gather against the reference, bit for bit, into garbage-filled outputs."""
import pytest
import torch

from conftest import assert_bits_equal
from routing_cases import DISTRIBUTIONS, garbage_like, make_ids, make_weights

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def sorted_token_for(T, K, E, tm, dist):
    from torch_argon import reference
    return reference.moe_plan(make_ids(T, K, E, dist), make_weights(T, K), E, tm).sorted_token


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
@pytest.mark.parametrize("T,K,E,H", [(0, 2, 4, 64), (1, 1, 1, 8), (33, 10, 64, 72), (300, 2, 16, 256)])
def test_gather_matches_reference(backend, ref, T, K, E, H, dist):
    st = sorted_token_for(T, K, E, 16, dist)
    x = torch.randn(T, H, dtype=torch.float16)
    out = garbage_like(torch.empty(st.shape[0], H, dtype=torch.float16)).to(backend.device)
    got = backend.ops.moe_gather(x.to(backend.device), st.to(backend.device), out=out)
    assert got is out
    assert_bits_equal(got, ref.moe_gather(x, st), "xs")


@pytest.mark.parametrize("x_dtype", DTYPES)
@pytest.mark.parametrize("out_dtype", DTYPES)
def test_gather_dtypes_and_conversion(backend, ref, x_dtype, out_dtype):
    """Same dtype copies bits; a conversion rounds once, to nearest even."""
    st = sorted_token_for(120, 4, 16, 8, "neg_some")
    x = (torch.randn(120, 40) * 1e3).to(x_dtype)
    got = backend.ops.moe_gather(x.to(backend.device), st.to(backend.device), out_dtype=out_dtype)
    assert_bits_equal(got, ref.moe_gather(x, st, out_dtype=out_dtype), "xs")


def test_gather_odd_width_and_strided_x(backend, ref):
    """H not a multiple of any vector width, and x a non-contiguous view."""
    st = sorted_token_for(50, 3, 8, 16, "uniform")
    x = torch.randn(50, 2 * 37, dtype=torch.bfloat16)[:, ::2]
    got = backend.ops.moe_gather(x.to(backend.device), st.to(backend.device))
    assert_bits_equal(got, ref.moe_gather(x, st), "xs")


def test_gather_large(backend, ref):
    st = sorted_token_for(110_000, 10, 512, 16, "zipf")
    x = torch.randn(110_000, 16, dtype=torch.float16)
    got = backend.ops.moe_gather(x.to(backend.device), st.to(backend.device))
    assert_bits_equal(got, ref.moe_gather(x, st), "xs")
