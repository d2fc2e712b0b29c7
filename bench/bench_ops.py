"""pytest-benchmark suite: each argon op against the reference and the plain-torch baseline,
on the CPU (and on CUDA / MPS where present).

    python -m pytest bench/bench_ops.py     # prints where its JSON went (outside the checkout)
    python bench/make_tables.py --raw PATH  # that JSON into bench/results and the README tables

Shape: E=512, K=10, T=2048 (the issue's CPU figures), H=2048 for gather and combine.
"""
import pytest
import torch

import torch_argon
from torch_argon import reference
from torch_argon.testing import baselines
from torch_argon.testing.layers import experts_path, make_layer
from torch_argon.testing.routing import make_ids, make_weights
from torch_argon.testing.timing import synchronize

T, K, E, TM, H, I = 2048, 10, 512, 16, 2048, 512
DEVICES = ["cpu"] + [d for d in ("cuda", "mps") if torch_argon.testing.backends.get(d).available]


@pytest.fixture(scope="module", params=DEVICES)
def case(request):
    dev = request.param
    ids = make_ids(T, K, E, "uniform").to(dev)
    w = make_weights(T, K).to(dev)
    plan = torch_argon.moe_plan(ids, w, E, TM)
    R = plan.sorted_token.shape[0]
    g = torch.Generator().manual_seed(0)
    return dict(
        dev=dev, ids=ids, w=w, plan=plan,
        x=torch.randn(T, H, generator=g).to(dev, torch.bfloat16),
        y=torch.randn(R, H, generator=g).to(dev, torch.bfloat16),
        gu=torch.randn(R, 2 * I, generator=g).to(dev, torch.bfloat16),
    )


def run(benchmark, case, op, impl, fn, **shape):
    """Time fn; `shape` overrides the record's default shape fields (E, tm, H)."""
    info = dict(op=op, impl=impl, device=case["dev"], T=T, E=E, K=K, tm=TM, H=H, dist="uniform")
    info.update(shape)
    benchmark.group = f"{op} {case['dev']} T={T} E={info['E']} K={K}"
    benchmark.extra_info.update(info)

    def call():
        fn()
        synchronize(case["dev"])

    benchmark.pedantic(call, rounds=15, iterations=1, warmup_rounds=2)


@pytest.mark.parametrize("impl", ["argon", "reference", "torch_argsort"])
def test_plan(benchmark, case, impl):
    ids, w = case["ids"], case["w"]
    fn = {"argon": lambda: torch_argon.moe_plan(ids, w, E, TM),
          "reference": lambda: reference.moe_plan(ids, w, E, TM),
          "torch_argsort": lambda: baselines.plan_argsort(ids, w, E, TM)}[impl]
    run(benchmark, case, "moe_plan", impl, fn)


@pytest.mark.parametrize("impl", ["argon", "reference", "torch_index_select"])
def test_gather(benchmark, case, impl):
    x, st = case["x"], case["plan"].sorted_token
    fn = {"argon": lambda: torch_argon.moe_gather(x, st),
          "reference": lambda: reference.moe_gather(x, st),
          "torch_index_select": lambda: baselines.gather_index_select(x, st)}[impl]
    run(benchmark, case, "moe_gather", impl, fn)


@pytest.mark.parametrize("impl", ["argon", "reference", "torch_gather_sum"])
def test_combine(benchmark, case, impl):
    y, pos, w = case["y"], case["plan"].pos, case["w"]
    fn = {"argon": lambda: torch_argon.moe_combine(y, pos, w),
          "reference": lambda: reference.moe_combine(y, pos, w),
          "torch_gather_sum": lambda: baselines.combine_torch(y, pos, w)}[impl]
    run(benchmark, case, "moe_combine", impl, fn)


@pytest.mark.parametrize("impl", ["argon", "torch_silu_mul"])
def test_swiglu(benchmark, case, impl):
    gu = case["gu"]
    fn = {"argon": lambda: torch_argon.swiglu(gu),
          "torch_silu_mul": lambda: baselines.swiglu_torch(gu)}[impl]
    run(benchmark, case, "swiglu", impl, fn)


@pytest.mark.parametrize("impl", ["argon", "torch_grouped_mm", "torch_per_expert_loop"])
def test_moe_mm(benchmark, case, impl):
    """A smaller layer for the GEMM (E=64, hidden 1024, gate/up width 512) so the CPU run stays
    short: its gate/up stack; tile_m is what the layer takes on the ops path on this device (1
    on the CPU: no padding rows)."""
    e, hid, n = 64, 1024, 512
    dt = torch.float32 if case["dev"] == "cpu" else torch.bfloat16
    layer = make_layer(T, e, K, hid, n // 2, dt, case["dev"], seed=1)
    wts = layer.w_gate_up
    tm = experts_path(layer.x, layer.experts, torch_argon.argon_ops, top_k=K, path="ops").tile_m
    ids = make_ids(T, K, e, "uniform").to(case["dev"])
    plan = torch_argon.moe_plan(ids, case["w"], e, tm)
    g = torch.Generator().manual_seed(1)
    xs = torch.randn(plan.sorted_token.shape[0], hid, generator=g).to(case["dev"], dt)
    order, ends = baselines.argsort_plan(ids, e)
    xs_u = xs[: T * K]

    def loop():
        start = 0
        for ex, end in enumerate(ends.tolist()):
            if end > start:
                xs_u[start:end] @ wts[ex].T
            start = end

    fn = {"argon": lambda: torch_argon.moe_mm(xs, wts, plan),
          "torch_grouped_mm": lambda: baselines.grouped_mm(xs_u, wts, ends),
          "torch_per_expert_loop": loop}[impl]
    run(benchmark, case, "moe_mm", impl, fn, E=e, tm=tm, H=hid)
