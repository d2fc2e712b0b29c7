"""Buffers given with out= must not overlap each other or an input (docs/contract.md, "Buffers
given with out="): an overlap is a ValueError raised before anything is written, on every
backend. The in-place uses the contract allows (the combine's out is its residual; swiglu's out
is its gate or up, given as two tensors) give the out-of-place bytes."""
import pytest
import torch

from torch_argon._shapes import META_SIZE, plan_rows
from torch_argon.plan import MoEPlan
from conftest import assert_bits_equal
from routing_cases import make_ids, make_weights

T, K, E, TM, H = 20, 4, 8, 4, 16
R = plan_rows(T, K, E, TM)
SIZES = {"counts": E, "offsets": E + 1, "sorted_token": R, "sorted_weight": R, "pos": T * K,
         "tile_expert": R // TM, "meta": META_SIZE}


def plan_buffers(device, overlaps=()):
    """The seven plan outputs as slices of one int32 buffer, laid end to end, except the pairs
    in `overlaps`, where the second starts one element into the first (the issue's
    counts=big[:E], offsets=big[1:E+2])."""
    total = sum(SIZES.values()) + 8
    big = torch.full((total,), 0x5A5A5A5A, dtype=torch.int32, device=device)
    start, at = 0, {}
    for name, n in SIZES.items():
        at[name] = start
        start += n
    for first, second in overlaps:
        at[second] = at[first] + 1
    bufs = [big[at[name]:at[name] + n] for name, n in SIZES.items()]
    bufs[3] = bufs[3].view(torch.float32)
    bufs[4] = bufs[4].view(T, K)
    return big, MoEPlan(*bufs, TM)


@pytest.mark.parametrize("pair", [("counts", "offsets"), ("offsets", "meta"), ("counts", "meta"),
                                  ("sorted_token", "pos"), ("pos", "tile_expert")])
def test_plan_rejects_overlapping_outputs(backend, pair):
    ids, w = make_ids(T, K, E, "uniform").to(backend.device), make_weights(T, K).to(backend.device)
    big, out = plan_buffers(backend.device, [pair])
    before = big.clone()
    with pytest.raises(ValueError, match="overlap"):
        backend.ops.moe_plan(ids, w, E, TM, out=out)
    assert torch.equal(big.cpu(), before.cpu()), "a buffer was written before the error"


def test_plan_rejects_an_output_over_an_input(backend):
    ids = make_ids(T, K, E, "uniform").to(torch.int32).to(backend.device)
    w = make_weights(T, K).to(backend.device)
    _, out = plan_buffers(backend.device)
    out = out._replace(pos=ids)  # writing pos would overwrite the ids being read
    with pytest.raises(ValueError, match="pos overlaps the input topk_ids"):
        backend.ops.moe_plan(ids, w, E, TM, out=out)


def test_plan_separate_slices_of_one_buffer_are_fine(backend, ref):
    ids, w = make_ids(T, K, E, "uniform"), make_weights(T, K)
    _, out = plan_buffers(backend.device)
    got = backend.ops.moe_plan(ids.to(backend.device), w.to(backend.device), E, TM, out=out)
    want = ref.moe_plan(ids, w, E, TM)
    for name, a, b in zip(MoEPlan._fields, got.tensors(), want.tensors()):
        assert_bits_equal(a, b, name)


def plan_and_data(backend):
    ids, w = make_ids(T, K, E, "uniform").to(backend.device), make_weights(T, K).to(backend.device)
    return backend.ops.moe_plan(ids, w, E, TM), w


def test_gather_rejects_out_over_x(backend):
    plan, _ = plan_and_data(backend)
    big = torch.randn(R + T, H, device=backend.device)
    x, out = big[R:], big[:R]  # disjoint: fine
    backend.ops.moe_gather(x, plan, out=out)
    with pytest.raises(ValueError, match="out overlaps the input x"):
        backend.ops.moe_gather(big[:T], plan, out=big[T // 2:T // 2 + R])


def test_combine_rejects_out_over_y(backend):
    plan, w = plan_and_data(backend)
    y = torch.randn(R, H, device=backend.device)
    with pytest.raises(ValueError, match="out overlaps the input y"):
        backend.ops.moe_combine(y, plan, w, out=y[:T])
    with pytest.raises(ValueError, match="out overlaps the input shared"):
        shared = torch.randn(T + 1, H, device=backend.device)
        backend.ops.moe_combine(y, plan, w, shared=shared[1:], out=shared[:T])


def test_combine_in_place_into_residual(backend):
    plan, w = plan_and_data(backend)
    y = torch.randn(R, H, device=backend.device, dtype=torch.bfloat16)
    residual = torch.randn(T, H, device=backend.device, dtype=torch.bfloat16)
    want = backend.ops.moe_combine(y, plan, w, residual=residual)
    got = backend.ops.moe_combine(y, plan, w, residual=residual, out=residual)
    assert got is residual
    assert_bits_equal(residual, want, "in-place combine")
    with pytest.raises(ValueError, match="out overlaps the input residual"):
        r2 = torch.randn(T + 1, H, device=backend.device, dtype=torch.bfloat16)
        backend.ops.moe_combine(y, plan, w, residual=r2[1:], out=r2[:T])


@pytest.mark.parametrize("into", ["gate", "up"])
def test_swiglu_in_place_into_an_input(backend, into):
    gate = torch.randn(R, H, device=backend.device)
    up = torch.randn(R, H, device=backend.device)
    want = backend.ops.swiglu(gate, up)
    target = gate if into == "gate" else up
    backend.ops.swiglu(gate, up, out=target)
    assert_bits_equal(target, want, f"swiglu into {into}")


def test_swiglu_fused_input_rejects_overlap(backend):
    gu = torch.randn(R, 2 * H, device=backend.device)
    with pytest.raises(ValueError, match="out overlaps the input gate"):
        backend.ops.swiglu(gu, out=gu.view(-1)[:R * H].view(R, H))


def test_moe_mm_rejects_out_over_xs(backend):
    plan, _ = plan_and_data(backend)
    xs = torch.randn(R, H, device=backend.device)
    W = torch.randn(E, H, H, device=backend.device)
    with pytest.raises(ValueError, match="out overlaps the input xs"):
        backend.ops.moe_mm(xs, W, plan, out=xs)
