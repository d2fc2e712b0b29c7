"""Buffers given with out= (docs/contract.md, "Buffers given with out="): the in-place uses the
contract allows (the combine's out is its residual; swiglu's out is its gate or up, given as two
tensors) give the out-of-place bytes, and separate slices of one buffer are fine. The overlaps
it refuses are cases of tests/misuse_cases.py (a ValueError before anything is written, on
every backend, on meta tensors and under torch.compile)."""
import pytest
import torch

from torch_argon.plan import MoEPlan
from conftest import assert_bits_equal
from misuse_cases import E, H, K, R, T, TM, plan_buffers
from routing_cases import make_ids, make_weights


def test_plan_separate_slices_of_one_buffer_are_fine(backend, ref):
    ids, w = make_ids(T, K, E, "uniform"), make_weights(T, K)
    out = MoEPlan(*plan_buffers(backend.device), TM)
    got = backend.ops.moe_plan(ids.to(backend.device), w.to(backend.device), E, TM, out=out)
    want = ref.moe_plan(ids, w, E, TM)
    for name, a, b in zip(MoEPlan._fields, got.tensors(), want.tensors()):
        assert_bits_equal(a, b, name)


def plan_and_data(backend):
    ids, w = make_ids(T, K, E, "uniform").to(backend.device), make_weights(T, K).to(backend.device)
    return backend.ops.moe_plan(ids, w, E, TM), w


def test_gather_into_another_part_of_x_buffer(backend, ref):
    plan, _ = plan_and_data(backend)
    big = torch.randn(R + T, H, device=backend.device)
    x, out = big[R:], big[:R]  # disjoint slices of one buffer: fine
    backend.ops.moe_gather(x, plan, out=out)
    assert_bits_equal(out, ref.moe_gather(x.cpu(), plan.sorted_token.cpu()), "gather")


def test_combine_in_place_into_residual(backend):
    plan, w = plan_and_data(backend)
    y = torch.randn(R, H, device=backend.device, dtype=torch.bfloat16)
    residual = torch.randn(T, H, device=backend.device, dtype=torch.bfloat16)
    want = backend.ops.moe_combine(y, plan, w, residual=residual)
    got = backend.ops.moe_combine(y, plan, w, residual=residual, out=residual)
    assert got is residual
    assert_bits_equal(residual, want, "in-place combine")


@pytest.mark.parametrize("into", ["gate", "up"])
def test_swiglu_in_place_into_an_input(backend, into):
    gate = torch.randn(R, H, device=backend.device)
    up = torch.randn(R, H, device=backend.device)
    want = backend.ops.swiglu(gate, up)
    target = gate if into == "gate" else up
    backend.ops.swiglu(gate, up, out=target)
    assert_bits_equal(target, want, f"swiglu into {into}")
