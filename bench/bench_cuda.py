"""CUDA benchmark of torch_argon's plan, gather, combine (and swiglu, moe_mm) against the
plain-torch baselines (torch_argon/testing/baselines.py), all measured in the same run.

    python bench/bench_cuda.py --out bench/results/h200.json

Method: GPU time per call under CUDA graph replay (a graph of `inner` calls, replayed `samples`
times, timed with CUDA events; median over replays, divided by `inner`: testing.timing.
cuda_graph_us). Baselines that read the device back to the host (the argsort plan's bincount)
cannot be captured: they are timed eagerly (events around `inner` back-to-back calls) and marked
"timing": "eager". Routing (testing.routing): E = 512, K = 10, tile_m = 16; uniform = top-10 of
random scores, zipf = Zipf(1.2) expert popularity (K distinct experts per token); int64 ids
(torch.topk's), and for the plan the same ids as int32 too. Every plan is checked bit for bit
against the CPU backend before it is timed. The eager-overhead rows time host wall clock per
call of moe_plan against one tiny torch op (x.add_(1) on one element) in the same process, in
turns (tiny op, each API, again, 15 times), since the lent host's speed drifts between runs.
Writes a JSON list of records {op, backend, T, E, K, tm, dist, median_us, baseline,
baseline_median_us, ...}; prints a table.
"""
import argparse
import json
import os
import statistics
import sys
import time
import traceback

import torch

import torch_argon
from torch_argon.testing import baselines
from torch_argon.testing.plan_tuning import (GRID_SHAPE, LAB_BUILD_HINT, grid_device,
                                             kernels_launched, lab_build, plan_knobs)
from torch_argon._shapes import plan_rows
from torch_argon.testing.routing import routing
from torch_argon.testing.timing import cuda_graph_us, heat, median_us

E, K, TM, H = 512, 10, 16, 2560
PLAN_T = [1, 4, 16, 128, 512, 1024, 2048, 3072, 4096, 8192, 16384]
ROW_T = [128, 512, 2048, 4096, 8192, 16384]
DISTS = ["uniform", "zipf"]


def sm_clock():
    try:
        return int(torch.cuda.clock_rate())
    except Exception:  # noqa: BLE001 (pynvml missing)
        return None


def eager_us(fn, inner=20, samples=30):
    """Median time of one call launched eagerly, back to back, timed with events."""
    return median_us(fn, "cuda", warmup=3, repeat=samples, inner=inner)


def tiny_kernel_graph_us():
    """One tiny kernel under graph replay in this run: the per-launch floor."""
    x = torch.zeros(1, device="cuda")
    heat()
    return cuda_graph_us(lambda: x.add_(1), inner=50, samples=30)


def timed(fn, **kw):
    """(us, how): graph replay if the function can be captured, else eager."""
    try:
        return cuda_graph_us(fn, **kw), "graph"
    except Exception as e:  # noqa: BLE001 (a capture failure: time it eagerly instead)
        torch.cuda.synchronize()
        print(f"  (graph capture failed: {type(e).__name__}: {str(e)[:120]}; timing eagerly)")
        return eager_us(fn, **kw), "eager"


def copy_bandwidth():
    """Device-to-device copy bandwidth, bytes read plus written per second."""
    n = 1 << 29  # 1 GiB of fp16
    a = torch.empty(n, dtype=torch.float16, device="cuda")
    b = torch.empty_like(a)
    us = eager_us(lambda: b.copy_(a), inner=5, samples=10)
    return 2 * a.numel() * 2 / (us * 1e-6)


def plan_bits_equal(plan, ids, w):
    cpu = torch.ops.argon.moe_plan(ids.cpu(), w.cpu(), E, TM)
    return all(torch.equal(a.cpu().view(torch.int32), b.view(torch.int32))
               for a, b in zip(plan.tensors(), cpu))


def plan_path(fn):
    """Which plan kernel fn runs: "grid" or "fallback" (portable)."""
    return "grid" if any("plan_grid_kernel" in n for n in kernels_launched(fn)) else "fallback"


def rec(op, T, dist, us, baseline, base_us, **extra):
    r = dict(op=op, backend="cuda", T=T, E=E, K=K, tm=TM, dist=dist, median_us=round(us, 3),
             baseline=baseline, baseline_median_us=None if base_us is None else round(base_us, 3))
    if base_us:
        r["speedup"] = round(base_us / us, 3)
    r.update(extra)
    return r


def bench_plan(records):
    ops = torch_argon.argon_ops
    for dist in DISTS:
        for T in PLAN_T:
            ids, w = routing(T, E, K, dist, seed=T, device="cuda")
            out = ops.moe_plan(ids, w, E, TM)
            exact = plan_bits_equal(out, ids, w)
            plan = lambda: ops.moe_plan(ids, w, E, TM, out=out)  # noqa: E731
            heat()
            us, how = timed(plan)
            clock = sm_clock()
            base, bhow = eager_us(lambda: baselines.plan_argsort(ids, w, E, TM)), "eager"
            path = plan_path(plan)
            records.append(rec("plan", T, dist, us, "plan_argsort", base, timing=how,
                               baseline_timing=bhow, bit_exact=exact, n_entries=T * K,
                               path=path, sm_clock_mhz=clock))
            print(f"plan   {dist:8s} T={T:6d} {us:8.2f} us  argsort {base:8.2f} us  exact={exact}"
                  f"  (SM clock {clock} MHz after)")
            # The same routing as int32 ids (what vLLM's and SGLang's routers hand their
            # plans), against the int64 plan just timed: the grid kernel reads half the bytes.
            ids32 = ids.int()
            exact32 = plan_bits_equal(ops.moe_plan(ids32, w, E, TM, out=out), ids32, w)
            heat()
            us32, how32 = timed(lambda: ops.moe_plan(ids32, w, E, TM, out=out))
            exact32 = exact32 and plan_bits_equal(out, ids32, w)
            records.append(rec("plan", T, dist, us32, "plan_int64_ids", us, timing=how32,
                               baseline_timing=how, bit_exact=exact32, n_entries=T * K,
                               ids="int32 ids"))
            print(f"plan   {dist:8s} T={T:6d} {us32:8.2f} us  with int32 ids  exact={exact32}")
            for op, before in behind(T).items():
                us_pdl, us_no = plan_behind_us(before, plan)
                records.append(rec(op, T, dist, us_pdl, "same_without_dependent_launch", us_no,
                                   timing="graph", baseline_timing="graph"))
                print(f"{op:18s} {dist:8s} T={T:6d} {us_pdl:8.2f} us  without dependent launch "
                      + ("(lab build only)" if us_no is None else f"{us_no:8.2f} us"))


def behind(T):
    """Kernels to time the plan behind, as in a layer: one tiny torch kernel (which does not
    let the next kernel start early; nor does torch.topk), and the Triton router top-k of
    [T, E] scores, which does on sm_90+ (triton_ops/topk_kernel.py)."""
    x = torch.zeros(1, device="cuda")
    kernels = {"plan_after_kernel": lambda: x.add_(1)}
    from torch_argon import triton_ops
    if triton_ops.AVAILABLE:
        scores = torch.rand(T, E, device="cuda")
        kernels["plan_after_topk"] = lambda: triton_ops.topk_triton(scores, K)
    return kernels


def behind_us(before, plan, lone=None):
    """The plan's cost behind another kernel: graph replay of [before, plan] less that of
    [before] (`lone`, timed here unless given)."""
    def chain():
        before()
        plan()
    return cuda_graph_us(chain) - (cuda_graph_us(before) if lone is None else lone)


def plan_behind_us(before, plan):
    """behind_us with and without programmatic dependent launch (without: lab build only, else
    None). Back-to-back plans (the plan records) let each other start early; behind a kernel
    that does not, that gain is gone."""
    lone = cuda_graph_us(before)
    with_pdl = behind_us(before, plan, lone)
    if not lab_build():
        return with_pdl, None
    with plan_knobs(pdl=0):
        without = behind_us(before, plan, lone)
    return with_pdl, without


def bench_plan_variants(records):
    """The plan's kernels, each forced at every size, for choosing the launcher's thresholds
    (lab build only: its knobs): the default ("auto", and "auto_no_pdl" without programmatic
    dependent launch); the grid kernel as one segment on 16 or 32 replicas, as clusters of 4, 8
    or 16 segments (16 where the device runs them), and in the grid shape with 1, 2, 3 or 4
    chunks per warp; the portable fallback."""
    if not lab_build():
        print(f"plan_variants skipped: {LAB_BUILD_HINT}")
        return
    ops = torch_argon.argon_ops
    big_clusters = grid_device()["big_clusters"] > 0
    for dist in DISTS:
        for T in [1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]:
            ids, w = routing(T, E, K, dist, seed=T + 1, device="cuda")
            out = ops.moe_plan(ids, w, E, TM)
            n = T * K
            big = 1 << 30
            variants = [("auto", {}), ("auto_no_pdl", dict(pdl=0))]
            one_c = -(-n // 512)  # chunks that make the whole plan one segment
            if one_c <= 8:
                variants += [(f"grid_one_segment_r{r}",
                              dict(grid=big, grid_cluster=1, grid_chunks=one_c, grid_replicas=r))
                             for r in (16, 32)]
            variants += [(f"grid_cluster{k}", dict(grid=big, grid_cluster=k))
                         for k in (4, 8, 16) if 512 * k // 2 < n <= 512 * 8 * k
                         and (k <= 8 or big_clusters)]
            variants += [(f"grid_segments_c{c}",
                          dict(grid=big, grid_cluster=GRID_SHAPE, grid_chunks=c))
                         for c in (1, 2, 3, 4) if c < one_c and -(-n // (512 * c)) <= 128]
            variants += [("fallback", dict(grid=0))]
            for name, knobs in variants:
                with plan_knobs(**knobs):
                    ok = plan_bits_equal(ops.moe_plan(ids, w, E, TM), ids, w)
                    heat(30)
                    us, how = timed(lambda: ops.moe_plan(ids, w, E, TM, out=out))
                records.append(rec("plan_variant", T, dist, us, None, None, variant=name,
                                   timing=how, bit_exact=ok, sm_clock_mhz=sm_clock()))
                print(f"plan_variant {dist:8s} T={T:6d} {name:22s} {us:8.2f} us exact={ok}")


def bench_plan_kernels(records):
    """What one plan call launches (profiler, eager; a captured graph holds the same launches):
    only our kernels, no memset / fill / copy."""
    ops = torch_argon.argon_ops
    for T in (128, 4096):
        ids, w = routing(T, E, K, "uniform", seed=0, device="cuda")
        out = ops.moe_plan(ids, w, E, TM)
        for api, fn in [("moe_plan_out", lambda: ops.moe_plan(ids, w, E, TM, out=out)),
                        ("moe_plan", lambda: ops.moe_plan(ids, w, E, TM))]:
            names = kernels_launched(fn)
            records.append(dict(op="plan_kernels", backend="cuda", T=T, E=E, K=K, tm=TM,
                                dist="uniform", median_us=None, baseline=None,
                                baseline_median_us=None, api=api, device_ops=names))
            print(f"plan_kernels T={T} {api}: {names}")


def host_us_interleaved(fns, n=1000, trials=15):
    """Host wall clock per call of each function, measured in turns (a loop of n calls of
    each, then again, `trials` times), so a drift of the host's speed reaches every function,
    not just the one timed while it lasts; the median over trials of each (the ratios are
    ratios of these medians)."""
    for fn in fns.values():
        for _ in range(50):
            fn()
    torch.cuda.synchronize()
    per = {name: [] for name in fns}
    for _ in range(trials):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            torch.cuda.synchronize()
            per[name].append((time.perf_counter() - t0) * 1e6 / n)
    return {name: statistics.median(v) for name, v in per.items()}


def bench_plan_eager(records):
    ops = torch_argon.argon_ops
    tiny = torch.zeros(1, device="cuda")
    heat()
    for T in (128, 2048):
        ids, w = routing(T, E, K, "uniform", seed=0, device="cuda")
        out = ops.moe_plan(ids, w, E, TM)
        us = host_us_interleaved({
            "tiny": lambda: tiny.add_(1),
            "moe_plan": lambda: ops.moe_plan(ids, w, E, TM),
            "moe_plan_out": lambda: ops.moe_plan(ids, w, E, TM, out=out),
            "torch.ops.argon.moe_plan": lambda: torch.ops.argon.moe_plan(ids, w, E, TM),
        })
        base = us.pop("tiny")
        for name, t in us.items():
            records.append(rec("plan_eager", T, "uniform", t, "tiny_torch_op(x.add_(1))", base,
                               api=name, ratio_to_tiny_op=round(t / base, 3),
                               timing="host, interleaved with the tiny op"))
            print(f"plan_eager T={T} {name:26s} {t:7.2f} us/call  tiny op {base:6.2f} us  "
                  f"ratio {t / base:.2f}")


def bench_gather(records):
    ops = torch_argon.argon_ops
    for dist in DISTS:
        for T in ROW_T:
            ids, w = routing(T, E, K, dist, seed=T, device="cuda")
            plan = ops.moe_plan(ids, w, E, TM)
            x = torch.randn(T, H, device="cuda", dtype=torch.float16)
            R = plan.sorted_token.shape[0]
            out = torch.empty(R, H, device="cuda", dtype=torch.float16)
            st = plan.sorted_token
            idx = st.clamp(min=0)
            buf = torch.empty_like(out)
            heat(30)
            us, how = timed(lambda: ops.moe_gather(x, plan, out=out))
            ok = torch.equal(out, torch_argon.reference.moe_gather(x, st))
            base, bhow = timed(lambda: torch.index_select(x, 0, idx, out=buf))
            base2, _ = timed(lambda: baselines.gather_index_select(x, st))
            n_valid = int(plan.meta[2])
            moved = (n_valid * H * 2) + R * H * 2
            records.append(rec("gather", T, dist, us, "index_select", base, H=H, dtype="float16",
                               rows=R, timing=how, baseline_timing=bhow, bit_exact=ok,
                               gather_index_select_us=round(base2, 3),
                               bytes=moved, tb_per_s=round(moved / us / 1e6, 3)))
            print(f"gather {dist:8s} T={T:6d} {us:8.2f} us  index_select {base:8.2f} us  "
                  f"(clamp+index_select {base2:8.2f})  exact={ok}")


def bench_combine(records, bw):
    ops = torch_argon.argon_ops
    for dist in DISTS:
        for T in ROW_T:
            ids, w = routing(T, E, K, dist, seed=T, device="cuda")
            plan = ops.moe_plan(ids, w, E, TM)
            R = plan.sorted_token.shape[0]
            y = torch.randn(R, H, device="cuda", dtype=torch.float16)
            out = torch.empty(T, H, device="cuda", dtype=torch.float16)
            heat(30)
            us, how = timed(lambda: ops.moe_combine(y, plan, w, out=out))
            base, bhow = timed(lambda: baselines.combine_torch(y, plan.pos, w))
            n_valid = int(plan.meta[2])
            floor_bytes = n_valid * H * 2 + T * H * 2 + T * K * 8
            floor = floor_bytes / bw * 1e6
            records.append(rec("combine", T, dist, us, "combine_torch", base, H=H, dtype="float16",
                               timing=how, baseline_timing=bhow, floor_us=round(floor, 3),
                               floor_bytes=floor_bytes, ratio_to_floor=round(us / floor, 3),
                               copy_bw_tb_per_s=round(bw / 1e12, 3), sm_clock_mhz=sm_clock()))
            print(f"combine {dist:8s} T={T:6d} {us:8.2f} us  torch {base:8.2f} us  "
                  f"({base / us:5.1f}x)  floor {floor:7.2f} us ({us / floor:4.2f}x)")
    # Bit-exactness of the combine at one benchmark size, against the CPU backend.
    ids, w = routing(2048, E, K, "zipf", seed=9, device="cuda")
    plan = ops.moe_plan(ids, w, E, TM)
    y = torch.randn(plan.sorted_token.shape[0], H, device="cuda", dtype=torch.float16)
    got = ops.moe_combine(y, plan, w).cpu()
    want = torch.ops.argon.moe_combine(y.cpu(), plan.pos.cpu(), w.cpu(), None, None, None)
    print(f"combine bit-exact vs CPU at T=2048: {torch.equal(got.view(torch.int16), want.view(torch.int16))}")


def bench_swiglu(records):
    ops = torch_argon.argon_ops
    for T in (2048, 16384):
        R, inter = plan_rows(T, K, E, TM), 512
        g = torch.randn(R, 2 * inter, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(R, inter, device="cuda", dtype=torch.bfloat16)
        us, how = timed(lambda: ops.swiglu(g, out=out))
        base, bhow = timed(lambda: baselines.swiglu_torch(g))
        records.append(rec("swiglu", T, "uniform", us, "swiglu_torch", base, I=inter,
                           dtype="bfloat16", rows=R, timing=how, baseline_timing=bhow))
        print(f"swiglu T={T:6d} R={R} I={inter} {us:8.2f} us  torch {base:8.2f} us")


def bench_moe_mm(records):
    ops = torch_argon.argon_ops
    T, Kd, N = 2048, 2048, 1024
    ids, w = routing(T, E, K, "uniform", seed=0, device="cuda")
    plan = ops.moe_plan(ids, w, E, TM)
    R = plan.sorted_token.shape[0]
    for dtype in (torch.bfloat16, torch.float16):
        xs = torch.randn(R, Kd, device="cuda", dtype=dtype)
        W = torch.randn(E, N, Kd, device="cuda", dtype=dtype) / Kd ** 0.5
        reps = dict(inner=5, samples=10) if dtype == torch.bfloat16 else dict(inner=1, samples=3)
        us, how = timed(lambda: ops.moe_mm(xs, W, plan), **reps)
        base = None
        if dtype == torch.bfloat16:
            offs = plan.offsets[1:].contiguous()
            base, _ = timed(lambda: torch._grouped_mm(xs, W.transpose(1, 2), offs=offs), **reps)
        tflops = 2 * R * N * Kd / (us * 1e-6) / 1e12
        records.append(rec("moe_mm", T, "uniform", us, "torch._grouped_mm" if base else None, base,
                           Kd=Kd, N=N, dtype=str(dtype).split(".")[1], rows=R, timing=how,
                           tflops=round(tflops, 1)))
        print(f"moe_mm {dtype} T={T} R={R} Kd={Kd} N={N} {us:9.2f} us ({tflops:.0f} TFLOP/s)"
              + (f"  _grouped_mm {base:9.2f} us" if base else ""))
        del xs, W


def merge_records(path, records):
    """Writes records into the JSON list at path: an op measured in this run replaces every
    earlier record of that op (so renamed variants and paths leave nothing stale); the other
    records (the layer's, and sections not run this time) are kept."""
    kept = []
    if os.path.exists(path):
        with open(path) as f:
            new_ops = {r["op"] for r in records}
            kept = [r for r in json.load(f) if r["op"] not in new_ops]
    with open(path, "w") as f:
        json.dump(kept + records, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/results/h200.json")
    ap.add_argument("--only", default="", help="comma-separated sections to run")
    args = ap.parse_args()
    assert torch.cuda.is_available(), "needs a CUDA device"
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    records = []
    bw = copy_bandwidth()
    print(f"copy bandwidth: {bw / 1e12:.2f} TB/s (read + write)")
    tiny = tiny_kernel_graph_us()
    records.append(dict(op="tiny_kernel_graph", backend="cuda", T=None, E=None, K=None, tm=None,
                        dist=None, median_us=round(tiny, 3), baseline=None,
                        baseline_median_us=None, sm_clock_mhz=sm_clock(),
                        note="x.add_(1) on one element, 50 per graph, per-launch floor"))
    print(f"tiny kernel under graph replay: {tiny:.2f} us (SM clock {sm_clock()} MHz)")
    sections = {
        "plan": lambda: bench_plan(records),
        "plan_eager": lambda: bench_plan_eager(records),
        "gather": lambda: bench_gather(records),
        "combine": lambda: bench_combine(records, bw),
        "swiglu": lambda: bench_swiglu(records),
        "moe_mm": lambda: bench_moe_mm(records),
        "plan_variants": lambda: bench_plan_variants(records),
        "plan_kernels": lambda: bench_plan_kernels(records),
    }
    wanted = [s for s in args.only.split(",") if s] or list(sections)
    failed = []
    for name in wanted:
        try:
            sections[name]()
        except Exception:  # noqa: BLE001 (keep the other sections' numbers)
            traceback.print_exc()
            failed.append(name)
        torch.cuda.synchronize()
        merge_records(args.out, records)
    print(f"merged {len(records)} records into {args.out}" +
          (f"; FAILED: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
