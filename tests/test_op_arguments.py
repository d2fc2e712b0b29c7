"""The Python API's own handling of arguments, before any op runs: integers of any integer type
(operator.index), the expert bound, out= on another device than the inputs (a meta buffer for
real inputs), out_dtype against out=. The op checks' misuses are tests/misuse_cases.py."""
import numpy as np
import pytest
import torch

import torch_argon
from conftest import assert_bits_equal
from routing_cases import make_ids, make_weights
from torch_argon.quant import random_quantized

T, K, E, TM, H = 12, 2, 6, 4, 8


def test_integer_arguments_of_any_integer_type():
    ids, w = make_ids(T, K, E, "uniform"), make_weights(T, K)
    want = torch_argon.moe_plan(ids, w, E, TM)
    got = torch_argon.moe_plan(ids, w, np.int64(E), np.int32(TM))
    assert type(got.tile_m) is int and got.tile_m == TM
    for name, a, b in zip(want._fields, got.tensors(), want.tensors()):
        assert_bits_equal(a, b, name)
    xs = torch.randn(want.sorted_token.shape[0], H)
    W = torch.randn(E, 3, H)
    assert_bits_equal(torch_argon.moe_mm(xs, W, want.tile_expert, np.int64(TM)),
                      torch_argon.moe_mm(xs, W, want), "moe_mm")
    w_q = random_quantized("Q8_0", 4, 64, generator=torch.Generator().manual_seed(0))
    assert_bits_equal(torch_argon.dequantize(w_q, "Q8_0", np.int64(64)),
                      torch_argon.dequantize(w_q, "Q8_0", 64), "dequantize")


@pytest.mark.parametrize("value,match", [(True, "n_expert must be an int, got bool"),
                                         ("8", "n_expert must be an int, got str"),
                                         (np.float64(8), "n_expert must be an int, got float64")])
def test_non_integers_are_refused(value, match):
    with pytest.raises(ValueError, match=match):
        torch_argon.moe_plan(make_ids(T, K, E, "uniform"), make_weights(T, K), value, TM)


def test_expert_bound():
    """2^24 experts plan (shapes only: meta), one more is refused, and so is the issue's 2^31-1,
    which ran a CPU process out of memory (23 GB) before the bound."""
    ids = torch.empty(T, K, dtype=torch.int64, device="meta")
    w = torch.empty(T, K, device="meta")
    plan = torch_argon.moe_plan(ids, w, 2**24, TM)
    assert plan.counts.shape == (2**24,) and plan.offsets.shape == (2**24 + 1,)
    for n_expert in (2**24 + 1, 2**31 - 1):
        with pytest.raises(ValueError, match=f"n_expert must be at most 16777216 .*, got "
                                             f"{n_expert}"):
            torch_argon.moe_plan(ids, w, n_expert, TM)


def f16_rows():
    return torch.randn(4, 8).half().view(torch.uint8)


@pytest.mark.parametrize("call", [
    lambda out: torch_argon.dequantize(f16_rows(), "F16", 8, out=out(4, 8)),
    lambda out: torch_argon.dequantize(random_quantized("Q4_K", 4, 256), "Q4_K", 256,
                                       out=out(4, 256)),
    lambda out: torch_argon.moe_gather(torch.randn(T, H), torch.zeros(16, dtype=torch.int32),
                                       out=out(16, H)),
    lambda out: torch_argon.swiglu(torch.randn(5, 2 * H), out=out(5, H)),
], ids=["dequantize_f16", "dequantize_q4_k", "moe_gather", "swiglu"])
def test_out_on_meta_for_real_inputs_is_refused(call):
    """A meta buffer given as out= for real inputs: no kernel could write it; the op (its meta
    dispatch runs the checks) refuses it by name instead of "succeeding"."""
    with pytest.raises(ValueError, match="out must be on cpu like the other tensors of the call, "
                                         "got meta"):
        call(lambda *shape: torch.empty(*shape, device="meta"))
