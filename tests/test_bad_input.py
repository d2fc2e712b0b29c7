"""Bad input gets a clear error naming the argument, before anything is written; and ids out of
range never touch memory out of bounds (GPU-style backends count them instead of raising)."""
import pytest
import torch

from torch_argon._shapes import META_N_BAD_IDS, META_SIZE, plan_rows
from torch_argon.plan import MoEPlan
from routing_cases import make_ids, make_weights

T, K, E, TM = 20, 4, 8, 16


def ok_inputs():
    return make_ids(T, K, E, "uniform"), make_weights(T, K)


def on(backend, *ts):
    return [t.to(backend.device) if isinstance(t, torch.Tensor) else t for t in ts]


@pytest.mark.parametrize("change,match", [
    (lambda ids, w: (ids.float(), w, E, TM), "topk_ids must be int32 or int64"),
    (lambda ids, w: (ids, w.int(), E, TM), "topk_weights must be float32, float16 or bfloat16"),
    (lambda ids, w: (ids.reshape(-1), w, E, TM), "topk_ids must be 2-D"),
    (lambda ids, w: (ids, w[:, :2], E, TM), "topk_weights must have the shape of topk_ids"),
    (lambda ids, w: (ids, w, 0, TM), "n_expert must be >= 1"),
    (lambda ids, w: (ids, w, -3, TM), "n_expert must be >= 1"),
    (lambda ids, w: (ids, w, E, 12), "tile_m must be a power of two"),
    (lambda ids, w: (ids, w, E, 0), "tile_m must be a power of two"),
])
def test_plan_rejects_bad_arguments(backend, change, match):
    args = on(backend, *change(*ok_inputs()))
    with pytest.raises(ValueError, match=match):
        backend.ops.moe_plan(*args)


def test_plan_rejects_bad_out_buffers(backend):
    ids, w = on(backend, *ok_inputs())
    good = backend.ops.moe_plan(ids, w, E, TM)
    for i, name in enumerate(MoEPlan._fields[:7]):
        bufs = [t.clone() for t in good.tensors()]
        bufs[i] = bufs[i][:-1] if bufs[i].dim() == 1 else bufs[i][:, :-1]
        with pytest.raises(ValueError, match=f"{name} must have shape"):
            backend.ops.moe_plan(ids, w, E, TM, out=MoEPlan(*bufs, TM))
    bufs = [t.clone() for t in good.tensors()]
    bufs[4] = torch.empty(K, T, dtype=torch.int32, device=ids.device).t()  # pos, strided
    with pytest.raises(ValueError, match="pos must be contiguous"):
        backend.ops.moe_plan(ids, w, E, TM, out=MoEPlan(*bufs, TM))


@pytest.mark.parametrize("bad", [E, E + 1000, -2, -(2**31)])
def test_plan_out_of_range_ids(backend, ref, bad):
    """The CPU raises; GPU-style backends treat the id as -1 and count it in meta.
    Either way, nothing is written outside the output buffers: each sits inside a larger
    guard buffer whose margins must stay untouched."""
    ids, w = ok_inputs()
    ids[3, 1] = bad
    ids[T - 1, K - 1] = bad
    R = plan_rows(T, K, E, TM)
    sizes = [E, E + 1, R, R, T * K, R // TM, META_SIZE]
    guard = 64
    frames = [torch.full((n + 2 * guard,), 0x5A5A5A5A, dtype=torch.int32) for n in sizes]
    frames = [f.to(backend.device) for f in frames]
    outs = [f[guard:guard + n] for f, n in zip(frames, sizes)]
    outs[3] = outs[3].view(torch.float32)
    outs[4] = outs[4].view(T, K)
    dev_ids, dev_w = on(backend, ids, w)
    if backend.name == "cpu":
        with pytest.raises(ValueError, match=r"topk_ids\[3, 1\] = .* is out of range"):
            backend.ops.moe_plan(dev_ids, dev_w, E, TM, out=MoEPlan(*outs, TM))
    else:
        plan = backend.ops.moe_plan(dev_ids, dev_w, E, TM, out=MoEPlan(*outs, TM))
        assert int(plan.meta[META_N_BAD_IDS]) == 2
        masked = torch.where((ids >= E) | (ids < -1), -1, ids)
        want = ref.moe_plan(masked, w, E, TM)
        for f in ("counts", "offsets", "sorted_token", "pos", "tile_expert"):
            assert torch.equal(getattr(plan, f).cpu(), getattr(want, f)), f
        with pytest.raises(ValueError, match="outside"):
            backend.ops.moe_plan(dev_ids, dev_w, E, TM, check_ids=True)
    for f, n in zip(frames, sizes):
        assert torch.all(f[:guard] == 0x5A5A5A5A) and torch.all(f[guard + n:] == 0x5A5A5A5A)


def test_gather_rejects_bad_arguments(backend):
    ids, w = ok_inputs()
    plan = backend.ops.moe_plan(*on(backend, ids, w), E, TM)
    x = torch.randn(T, 16, device=backend.device)
    with pytest.raises(ValueError, match="sorted_token must be int32"):
        backend.ops.moe_gather(x, plan.sorted_token.long())
    with pytest.raises(ValueError, match="x must be 2-D"):
        backend.ops.moe_gather(x[0], plan)
    with pytest.raises(ValueError, match="x must be float32, float16 or bfloat16"):
        backend.ops.moe_gather(x.int(), plan)
    with pytest.raises(ValueError, match="out must have shape"):
        backend.ops.moe_gather(x, plan, out=torch.empty(3, 16, device=backend.device))


def test_combine_rejects_bad_arguments(backend):
    ids, w = on(backend, *ok_inputs())
    plan = backend.ops.moe_plan(ids, w, E, TM)
    y = torch.randn(plan.sorted_token.shape[0], 16, device=backend.device)
    with pytest.raises(ValueError, match="topk_weights must have the shape of pos"):
        backend.ops.moe_combine(y, plan, w[:, :1])
    with pytest.raises(ValueError, match="pos must be int32"):
        backend.ops.moe_combine(y, plan.pos.long(), w)
    with pytest.raises(ValueError, match=r"shared must have shape \[T, H\]"):
        backend.ops.moe_combine(y, plan, w, shared=torch.randn(T, 15, device=backend.device))
    with pytest.raises(ValueError, match=r"residual must have shape \[T, H\]"):
        backend.ops.moe_combine(y, plan, w, residual=torch.randn(T + 1, 16, device=backend.device))


def test_swiglu_rejects_bad_arguments(backend):
    g = torch.randn(4, 7, device=backend.device)
    with pytest.raises(ValueError, match="last dim must be even"):
        backend.ops.swiglu(g)
    with pytest.raises(ValueError, match="up must have the shape of gate"):
        backend.ops.swiglu(g, g[:, :3])
    with pytest.raises(ValueError, match="up must have the dtype of gate"):
        backend.ops.swiglu(g, g.half())


def test_moe_mm_rejects_bad_arguments(backend):
    ids, w = on(backend, *ok_inputs())
    plan = backend.ops.moe_plan(ids, w, E, TM)
    R = plan.sorted_token.shape[0]
    xs = torch.randn(R, 32, device=backend.device)
    W = torch.randn(E, 24, 32, device=backend.device)
    with pytest.raises(ValueError, match="w must have the dtype of xs"):
        backend.ops.moe_mm(xs, W.half(), plan)
    with pytest.raises(ValueError, match=r"w must be \[E, N, Kd\] with Kd"):
        backend.ops.moe_mm(xs, W[:, :, :16], plan)
    with pytest.raises(ValueError, match="xs must have tile_expert.size"):
        backend.ops.moe_mm(xs[:-1], W, plan)
    with pytest.raises(ValueError, match="tile_m must be a power of two"):
        backend.ops.moe_mm(xs, W, plan.tile_expert, 3)


def test_corrupt_plan_indices_never_read_out_of_bounds(backend):
    """sorted_token / pos / tile_expert that no plan could produce: the CPU raises naming the
    argument; a GPU-style backend may instead treat the bad index as -1. It never reads or
    writes out of bounds."""
    ids, w = on(backend, *ok_inputs())
    plan = backend.ops.moe_plan(ids, w, E, TM)
    x = torch.randn(T, 8, device=backend.device)
    st = plan.sorted_token.clone()
    st[0] = T + 5
    pos = plan.pos.clone()
    pos[0, 0] = 10**6
    te = plan.tile_expert.clone()
    te[0] = E + 3
    R = st.shape[0]
    calls = [
        ("sorted_token", lambda: backend.ops.moe_gather(x, st)),
        ("pos", lambda: backend.ops.moe_combine(torch.randn(R, 8, device=x.device), pos, w)),
        ("tile_expert", lambda: backend.ops.moe_mm(torch.randn(R, 8, device=x.device),
                                                   torch.randn(E, 4, 8, device=x.device), te, TM)),
    ]
    for name, call in calls:
        if backend.name == "cpu":
            with pytest.raises(ValueError, match=f"{name}.* is out of range"):
                call()
        else:
            try:
                call()
            except RuntimeError as e:
                assert name in str(e)


def test_cpu_plan_scratch_is_bounded_for_huge_n_expert():
    """The CPU plan's per-chunk histograms are one int32 per (chunk, expert): with E in the
    millions they are capped at 64 MiB (or one row of E) instead of 64 rows of E, which was
    1 GiB here (E = 4M, a million entries) and 5 GiB at E = 20M. Peak RSS of a fresh process,
    against the same process before the call."""
    import subprocess
    import sys
    code = (
        "import resource, torch, torch_argon\n"
        "T, K, E = 131072, 8, 4_000_000\n"
        "ids = torch.randint(0, E, (T, K)); w = torch.rand(T, K)\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "plan = torch_argon.moe_plan(ids, w, E, 1)\n"
        "after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print((after - before) // 1024)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    grown_mib = int(out.stdout.split()[-1])
    # outputs: counts + offsets 32 MB, sorted_token + sorted_weight 8 MB, pos 4 MB; scratch 64 MiB
    assert grown_mib < 200, f"peak RSS grew {grown_mib} MiB"
