"""Bad input gets a clear error naming the argument, before anything is written (every misuse of
tests/misuse_cases.py, on every backend); and ids out of range never touch memory out of bounds
(GPU-style backends count them instead of raising)."""
import pytest
import torch

from torch_argon._shapes import META_N_BAD_IDS, META_SIZE, plan_rows
from torch_argon.plan import MoEPlan
from misuse_cases import CASES, skip_without_kernels
from routing_cases import make_ids, make_weights

T, K, E, TM = 20, 4, 8, 16


def ok_inputs():
    return make_ids(T, K, E, "uniform"), make_weights(T, K)


def on(backend, *ts):
    return [t.to(backend.device) if isinstance(t, torch.Tensor) else t for t in ts]


def storage_bytes(t):
    """Every byte of t's storage (a view's whole base; expanded tensors cost their storage)."""
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage()).clone()


@pytest.mark.parametrize("case", CASES, ids=str)
def test_misuse_is_refused_before_anything_is_written(backend, case):
    """Each misuse of tests/misuse_cases.py: its error, and every tensor of the call (outputs,
    inputs and the buffers they view) left as it was."""
    skip_without_kernels(backend, case)
    call, tensors = case.make(backend.ops, backend.device)
    before = [storage_bytes(t) for t in tensors]
    with pytest.raises(case.exception, match=case.match):
        call(*tensors)
    for i, (t, b) in enumerate(zip(tensors, before)):
        assert torch.equal(storage_bytes(t), b), f"tensor {i} of the call was written"


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
