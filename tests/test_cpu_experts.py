"""The CPU experts path's own machinery (csrc/cpu/moe_mm_cpu.cpp, experts/cpu_workspace.py): blocks
of one expert split over threads, the fp16 / bf16 GEMMs widened to fp32, calls from inside
torch.inference_mode with outputs that are inference tensors, and the layer's buffers reused
across calls of different shapes. Tolerances as tests/test_moe_mm.py's."""
import pytest
import torch

from routing_cases import garbage_like, make_ids, make_weights

REL_TOL = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}


def rel_err(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp(min=1e-30))


def problem(T, K, E, dist, Kd, N, dtype, tm=1):
    from torch_argon import reference
    plan = reference.moe_plan(make_ids(T, K, E, dist), make_weights(T, K), E, tm)
    x = torch.randn(T, Kd).to(dtype)
    xs = reference.moe_gather(x, plan.sorted_token)
    w = (torch.randn(E, N, Kd) / Kd ** 0.5).to(dtype)
    return plan, xs, w


@pytest.mark.parametrize("dtype", list(REL_TOL))
@pytest.mark.parametrize("T,K,E,dist,tm", [
    (700, 1, 1, "uniform", 1),      # one expert, 700 rows: three blocks (256 rows each at most)
    (300, 4, 3, "zipf", 1),         # uneven experts, blocks of several sizes
    (200, 2, 8, "neg_some", 16),    # skipped entries: zero rows between experts
])
def test_moe_mm_blocks_match_reference(dtype, T, K, E, dist, tm):
    from torch_argon import reference
    from torch_argon.ops import argon_ops as ops
    plan, xs, w = problem(T, K, E, dist, 96, 40, dtype, tm)
    out = garbage_like(torch.empty(xs.shape[0], 40, dtype=dtype))
    got = ops.moe_mm(xs, w, plan, out=out)
    want = reference.moe_mm(xs.double(), w.double(), plan.tile_expert, tm)
    assert rel_err(got, want) < REL_TOL[dtype]
    assert torch.all(got[int(plan.meta[0]):] == 0)
    assert torch.equal(ops.moe_mm(xs, w, plan), got)  # deterministic: same bytes again


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_moe_mm_into_inference_tensors(dtype):
    """Worker threads see the caller's inference mode: out= may be an inference tensor."""
    from torch_argon import reference
    from torch_argon.ops import argon_ops as ops
    plan, xs, w = problem(256, 4, 8, "uniform", 64, 32, dtype)
    with torch.inference_mode():
        out = torch.empty(xs.shape[0], 32, dtype=dtype)
        got = ops.moe_mm(xs, w, plan, out=out)
    want = reference.moe_mm(xs.double(), w.double(), plan.tile_expert, 1)
    assert rel_err(got, want) < REL_TOL[dtype]


def test_moe_mm_strided_operands():
    """xs with a row stride, and a [E, Kd, N] stack passed transposed, in the widened path."""
    from torch_argon import reference
    from torch_argon.ops import argon_ops as ops
    plan, xs, w = problem(200, 2, 4, "uniform", 48, 24, torch.bfloat16)
    xs_strided = torch.cat([xs, xs], dim=1)[:, :48]
    w_t = w.transpose(1, 2).contiguous().transpose(1, 2)
    got = ops.moe_mm(xs_strided, w_t, plan)
    want = reference.moe_mm(xs.double(), w.double(), plan.tile_expert, 1)
    assert rel_err(got, want) < REL_TOL[torch.bfloat16]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("inference", [False, True])
def test_layer_reuses_buffers_across_shapes(dtype, inference):
    """Calls of growing and shrinking T through the reused buffers equal fresh-buffer calls
    (another OpSet object over the same library, which the workspace does not serve)."""
    from torch_argon import experts, layer
    from torch_argon.experts import cpu_workspace
    from torch_argon.ops import argon_ops as ops
    from torch_argon.ops import OpSet
    fresh_ops = OpSet(torch.ops.argon)
    fresh_ops.ns = None  # not the argon library as far as the workspace can tell
    torch.manual_seed(0)
    E, K, H, I = 8, 2, 64, 32
    router = torch.randn(E, H).to(dtype)
    wgu = (torch.randn(E, 2 * I, H) / H ** 0.5).to(dtype)
    wd = (torch.randn(E, H, I) / I ** 0.5).to(dtype)
    layer.clear_cpu_workspace()
    ctx = torch.inference_mode() if inference else torch.no_grad()
    with ctx:
        for T in (40, 300, 7, 300):
            x = torch.randn(T, H).to(dtype)
            assert experts.choose(x, (wgu, wd), n_entries=T * K, ops=ops).name == "cpu_workspace"
            assert experts.choose(x, (wgu, wd), n_entries=T * K, ops=fresh_ops).name == "ops_dense"
            got = layer.moe_layer(x, router, (wgu, wd), K, ops=ops)
            want = layer.moe_layer(x, router, (wgu, wd), K, ops=fresh_ops)
            assert torch.equal(got, want)
    assert cpu_workspace.BUFFERS.buffers  # the buffers were used
    layer.clear_cpu_workspace()
    assert not cpu_workspace.BUFFERS.buffers
