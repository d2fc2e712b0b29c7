"""moe_mm against a float64 reference. Tolerance is a relative Frobenius error per dtype
(the GEMM's summation order is the backend's own): fp32 1e-5, fp16 1e-3, bf16 8e-3."""
import pytest
import torch

from routing_cases import garbage_like, make_ids, make_weights

REL_TOL = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}


def rel_err(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm().clamp(min=1e-30))


def setup(T, K, E, tm, dist, Kd, N, dtype, seed=0):
    from torch_argon import reference
    plan = reference.moe_plan(make_ids(T, K, E, dist, seed=seed), make_weights(T, K), E, tm)
    x = torch.randn(T, Kd).to(dtype)
    xs = reference.moe_gather(x, plan.sorted_token)
    w = (torch.randn(E, N, Kd) / Kd ** 0.5).to(dtype)
    return plan, xs, w


@pytest.mark.parametrize("dtype", list(REL_TOL))
@pytest.mark.parametrize("T,K,E,tm,dist,Kd,N", [
    (1, 1, 1, 16, "uniform", 32, 16),
    (64, 4, 8, 16, "zipf", 64, 48),
    (100, 2, 16, 32, "neg_some", 40, 24),
    (50, 8, 64, 16, "empty", 128, 64),
    (80, 10, 16, 64, "one_expert", 96, 80),
])
def test_moe_mm_matches_reference(backend, ref, dtype, T, K, E, tm, dist, Kd, N):
    plan, xs, w = setup(T, K, E, tm, dist, Kd, N, dtype)
    d = backend.device
    out = garbage_like(torch.empty(xs.shape[0], N, dtype=dtype)).to(d)
    got = backend.ops.moe_mm(xs.to(d), w.to(d), plan.tile_expert.to(d), tm, out=out)
    want = ref.moe_mm(xs, w, plan.tile_expert, tm)
    assert rel_err(got, want) < REL_TOL[dtype]
    # Rows of tiles whose expert is -1 are zero, not garbage.
    n_rows = int(plan.meta[0])
    assert torch.all(got[n_rows:].cpu() == 0)


def test_moe_mm_transposed_weight_stack(backend, ref):
    """A [E, Kd, N] stack passed as w.transpose(1, 2) is used without a copy by the caller."""
    plan, xs, w = setup(60, 4, 8, 16, "uniform", 64, 32, torch.float32)
    w_t = w.transpose(1, 2).contiguous().transpose(1, 2)
    assert not w_t.is_contiguous()
    d = backend.device
    got = backend.ops.moe_mm(xs.to(d), w_t.to(d), plan.to(d))
    assert rel_err(got, ref.moe_mm(xs, w, plan.tile_expert, 16)) < REL_TOL[torch.float32]


def test_moe_mm_empty(backend, ref):
    plan, xs, w = setup(0, 4, 8, 16, "uniform", 32, 16, torch.float32)
    got = backend.ops.moe_mm(xs.to(backend.device), w.to(backend.device), plan.to(backend.device))
    assert got.shape == (0, 16)


@pytest.mark.parametrize("op", ["moe_mm", "moe_qmm"])
def test_bare_tile_expert_needs_tile_m(op):
    """A bare tile_expert tensor says nothing of the tile: the caller must pass tile_m."""
    import torch_argon as argon_ops
    te = torch.zeros(2, dtype=torch.int32)
    if op == "moe_mm":
        call = lambda: argon_ops.moe_mm(torch.zeros(8, 4), torch.zeros(1, 3, 4), te)  # noqa: E731
    else:
        call = lambda: argon_ops.moe_qmm(torch.zeros(8, 32), torch.zeros(1, 3, 34, dtype=torch.uint8),  # noqa: E731
                                         "Q8_0", 32, te)
    with pytest.raises(ValueError, match=f"{op}: pass tile_m along with a bare tile_expert"):
        call()
