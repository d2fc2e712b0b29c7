"""All tensors of a call live on one device (docs/contract.md): a meta tensor mixed with real
ones, or real tensors of two devices, is a ValueError naming the argument, from the kernels and
from the fakes alike; nothing is written and nothing uninitialised comes back. Calls with meta
tensors only trace shapes (what torch.compile does)."""
import pytest
import torch

import torch_argon
from torch_argon.plan import MoEPlan
from routing_cases import make_ids, make_weights

T, K, E, TM, H = 12, 2, 4, 4, 8


def real_plan():
    return torch_argon.moe_plan(make_ids(T, K, E, "uniform"), make_weights(T, K), E, TM)


def test_combine_with_a_meta_residual():
    plan = real_plan()
    y = torch.randn(plan.sorted_token.shape[0], H)
    with pytest.raises(ValueError, match="residual must be on cpu"):
        torch_argon.moe_combine(y, plan, make_weights(T, K),
                                residual=torch.zeros(T, H, device="meta"))


def test_gather_with_a_meta_sorted_token():
    plan = real_plan()
    with pytest.raises(ValueError, match="sorted_token must be on cpu"):
        torch_argon.moe_gather(torch.randn(T, H), plan.sorted_token.to("meta"))


def test_plan_out_with_one_meta_buffer():
    ids, w = make_ids(T, K, E, "uniform"), make_weights(T, K)
    good = torch_argon.moe_plan(ids, w, E, TM)
    bufs = [torch.full_like(t, 7) for t in good.tensors()]
    bufs[2] = torch.empty_like(bufs[2], device="meta")
    with pytest.raises(ValueError, match="must be on cpu"):
        torch_argon.moe_plan(ids, w, E, TM, out=MoEPlan(*bufs, TM))
    assert all(bool((b == 7).all()) for i, b in enumerate(bufs) if i != 2)


def test_moe_mm_with_meta_weights():
    plan = real_plan()
    xs = torch.randn(plan.sorted_token.shape[0], H)
    with pytest.raises(ValueError, match="w must be on cpu"):
        torch_argon.moe_mm(xs, torch.randn(E, H, H, device="meta"), plan)


def test_meta_only_calls_give_shapes():
    ids = torch.zeros(T, K, dtype=torch.int64, device="meta")
    w = torch.zeros(T, K, device="meta")
    plan = MoEPlan(*torch.ops.argon.moe_plan(ids, w, E, TM), TM)
    assert all(t.is_meta for t in plan.tensors())
    xs = torch_argon.moe_gather(torch.zeros(T, H, device="meta"), plan)
    assert xs.is_meta and xs.shape == (plan.sorted_token.shape[0], H)
    out = torch_argon.moe_combine(xs, plan, w)
    assert out.is_meta and out.shape == (T, H)
