"""The Hopper dense experts (path="cuda_hopper_padded": the padded-plan GEMM with one tensor map
per operand, csrc/hopper/hopper_padded_gemm.cuh; path="cuda_hopper_dense": CUTLASS 3's
warp-specialized ptr-array grouped GEMM, csrc/hopper/hopper_grouped_gemm.cuh) against
triton_dense, and vLLM's fused_moe where it is staged, in one process on one GPU (H100 / H200).

    python bench/bench_hopper.py --out $OUT/hopper.json [--quick]

What it measures, per expert shape (E, K, H, I) and T:
  - the experts path (plan, gather where the path has one, gate/up, activation, down, combine:
    torch_argon.moe_experts with path=...) of each path, GPU time per call under CUDA graph
    replay (testing.timing.cuda_graph_replays_us: median of 20 samples of back-to-back
    replays); the outputs of the paths against each other first (relative error, recorded);
  - each of the Hopper GEMMs alone (gate/up [R, 2I] and down [R, H], every configuration of
    torch_argon/hopper/configs.py: the ptr-array kernel's ("kernel": "grouped") over the plan
    of tile_m 1, the padded kernel's ("kernel": "padded") over the plan of tile_m 128, padding
    rows included in its work), in achieved TFLOP/s of the routed rows' 2 * rows * N * K for
    both (the same numerator, so the padded kernel pays for its padding rows in the rate): the
    numbers the tuned tables (configs.MEASURED, configs.PADDED_MEASURED) are filled from, and
    the rows the run suggests for them ("suggested_measured", per kernel);
  - the padded path with the activation in its gate/up GEMM's epilogue
    ("cuda_hopper_padded_fused_act": hopper.configs.FUSE_ACTIVATION set to True around the
    call, records with "fused_activation": true), and its output against the unfused padded
    path's bit for bit ("kind": "fused_activation_bits"); while the fused GEMM has not passed its
    GPU tests "cuda_hopper_padded" is the unfused one, afterwards "cuda_hopper_padded_unfused_act"
    is measured beside it; and per padded configuration the fused gate/up GEMM alone
    ("gemm": "gate_up_act") against the GEMM followed by the swiglu op ("gate_up_swiglu");
  - the floors: every expert's weights read once at --hbm-tbps, the T*K*6*H*I FLOP at
    --matrix-tflops; "larger_floor_us" is the larger of the two.
vLLM's Triton fused_moe (with its own tuned configs) runs where bench/baselines/
vllm_fused_moe.py is present and its staged kernel loads (`available()`; interface:
make_experts(w_gate_up, w_down, activation, dtype, device) -> fn(x, topk_weights, topk_ids)
-> [T, H]); otherwise the JSON says why not. Routing: top-K of random scores (uniform), bf16.
One failing row is recorded with its error and the run goes on.
"""
import argparse
import importlib
import json
import os
import sys
import traceback

import torch

import torch_argon
from torch_argon import hopper
from torch_argon.testing.routing import make_ids, make_weights
from torch_argon.testing.timing import cuda_graph_replays_us
from torch_argon.weights import DenseExperts

SHAPES = ((512, 10, 2048, 512), (128, 8, 2048, 768))  # (E, K, H, I)
T_ALL = (128, 512, 2048, 8192, 16384)
T_QUICK = (512, 8192)
PATHS = ("cuda_hopper_padded", "cuda_hopper_dense", "triton_dense")
FUSED = "cuda_hopper_padded_fused_act"  # the padded path with FUSE_ACTIVATION True
UNFUSED = "cuda_hopper_padded_unfused_act"  # ... False (measured where the default fuses)


def with_fused_activation(flag, fn):
    """fn with hopper.configs.FUSE_ACTIVATION set to flag while it runs (eager, warm-up and
    capture alike: the path reads the switch at every call)."""
    def run():
        saved = hopper.configs.FUSE_ACTIVATION
        hopper.configs.FUSE_ACTIVATION = flag
        try:
            return fn()
        finally:
            hopper.configs.FUSE_ACTIVATION = saved
    return run


def vllm_baseline():
    """(make_experts or None, why not)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        module = importlib.import_module("bench.baselines.vllm_fused_moe")
    except ImportError as e:
        return None, f"bench/baselines/vllm_fused_moe.py not importable ({e})"
    ok, why = module.available()
    return (module.make_experts, "") if ok else (None, why)


def rel_err(got, want):
    want, got = want.double(), got.double()
    den = float(want.norm())
    return float((got - want).norm()) / den if den else float(got.norm())


def kernels():
    """(kernel name, its experts implementation, its configurations): the implementation's
    default_tile_m gives the plan its GEMMs take and gemm() runs one of them."""
    from torch_argon.experts import registry
    return (("grouped", registry.BY_NAME["cuda_hopper_dense"], hopper.configs.CONFIGS),
            ("padded", registry.BY_NAME["cuda_hopper_padded"], hopper.configs.PADDED_CONFIGS))


def gemm_records(experts, x, ids, w, shape, T, dtype):
    """Every configuration of both Hopper GEMMs of both kernels over this routing's plans
    (tile_m 1 for the ptr-array kernel, 128 for the padded one), timed alone."""
    E, K, H, I = shape
    ops = torch_argon.argon_ops
    out = []
    for kernel, impl, names in kernels():
        plan = ops.moe_plan(ids, w, E, impl.default_tile_m(None, T * K))
        xs = ops.moe_gather(x, plan)
        R = xs.shape[0]
        n_valid = int(plan.counts.sum())  # outside the timed part
        n_rows = int(plan.meta[0])  # the rows the padded kernel computes: whole tiles
        gu = xs.new_empty((R, 2 * I))
        h = torch.randn(R, I, device=x.device).to(dtype)
        y = xs.new_empty((R, H))
        fused = kernel == "padded" and not hopper.padded_ops.act_refusal(x.device)
        if fused:
            interleaved = hopper.interleave_gate_up(experts.gate_up)
            h_act = xs.new_empty((R, I))
        for name in names:
            timed = [("gate_up", 2 * I, H,
                      lambda name=name: impl.gemm(xs, experts.gate_up, plan, name, gu)),
                     ("down", H, I, lambda name=name: impl.gemm(h, experts.down, plan, name, y))]
            if fused:  # the fused gate/up GEMM against the GEMM + the swiglu op (same rows)
                timed += [("gate_up_act", 2 * I, H, lambda name=name: hopper.padded_act_mm(
                              xs, interleaved, plan.tile_expert, plan.meta, name, "silu",
                              out=h_act)),
                          ("gate_up_swiglu", 2 * I, H, lambda name=name: ops.swiglu(
                              impl.gemm(xs, experts.gate_up, plan, name, gu)))]
            for gemm, n, k, fn in timed:
                us = cuda_graph_replays_us(fn)
                out.append(dict(kind="gemm", kernel=kernel, gemm=gemm, config=name, E=E, K=K,
                                H=H, I=I, T=T, rows=n_valid, computed_rows=n_rows,
                                median_us=round(us, 2),
                                tflops=round(2 * n_valid * n * k / us / 1e6, 1)))
    return out


def suggested_rows(gemms, E, K, kernel="grouped"):
    """The tuned table's rows this run suggests for one kernel ("grouped": configs.MEASURED,
    "padded": configs.PADDED_MEASURED): per T, the fastest configuration of each GEMM, keyed by
    the mean rows per expert (the tables' format)."""
    by_t = {}
    for g in gemms:
        if g.get("kernel", "grouped") != kernel:
            continue
        best = by_t.setdefault(g["T"], {})
        if g["gemm"] not in best or g["median_us"] < best[g["gemm"]]["median_us"]:
            best[g["gemm"]] = g
    return [(t * K / E, best["gate_up"]["config"], best["down"]["config"])
            for t, best in sorted(by_t.items()) if "gate_up" in best and "down" in best]


def bench_shape(shape, ts, dtype, args, vllm, records, save):
    E, K, H, I = shape
    g = torch.Generator().manual_seed(0)
    experts = DenseExperts((torch.randn(E, 2 * I, H, generator=g) / H ** 0.5).to(dtype).cuda(),
                           (torch.randn(E, H, I, generator=g) / I ** 0.5).to(dtype).cuda())
    weight_bytes = (experts.gate_up.numel() + experts.down.numel()) * experts.gate_up.element_size()
    vllm_fn = vllm[0](experts.gate_up, experts.down, "silu", dtype, "cuda") if vllm[0] else None
    gemms = []
    for T in ts:
        base = dict(E=E, K=K, H=H, I=I, T=T, dtype=str(dtype).replace("torch.", ""),
                    weight_read_floor_us=round(weight_bytes / (args.hbm_tbps * 1e12) * 1e6, 1),
                    matrix_floor_us=round(T * K * 6 * H * I / (args.matrix_tflops * 1e12) * 1e6,
                                          1))
        base["larger_floor_us"] = max(base["weight_read_floor_us"], base["matrix_floor_us"])
        x = torch.randn(T, H, device="cuda").to(dtype)
        ids = make_ids(T, K, E, "uniform", seed=T).cuda()
        w = make_weights(T, K, seed=T).cuda()
        outputs = {}
        calls = {p: (lambda p=p: torch_argon.moe_experts(x, ids, w, experts, path=p))
                 for p in PATHS}
        padded = calls["cuda_hopper_padded"]
        calls[FUSED] = with_fused_activation(True, padded)
        if hopper.configs.fuse_activation():  # the default fuses: the unfused stages beside it
            calls[UNFUSED] = with_fused_activation(False, padded)
        if vllm_fn is not None:
            calls["vllm_fused_moe"] = lambda: vllm_fn(x, w, ids)
        for name, call in calls.items():
            r = dict(base, kind="experts_path", path=name)
            if name.startswith("cuda_hopper_padded"):
                r["fused_activation"] = (name == FUSED or name != UNFUSED
                                         and hopper.configs.fuse_activation())
            try:
                outputs[name] = call()
                r["median_us"] = round(cuda_graph_replays_us(call), 1)
                r["over_larger_floor"] = round(r["median_us"] / base["larger_floor_us"], 3)
                r["tflops"] = round(T * K * 6 * H * I / r["median_us"] / 1e6, 1)
            except Exception as e:  # noqa: BLE001 (one failing row must not lose the others)
                r["error"] = f"{type(e).__name__}: {e}"
                traceback.print_exc()
            records.append(r)
            print(f"E={E} T={T:6d} {name:18s} {r.get('median_us', r.get('error'))}", flush=True)
        unfused = UNFUSED if UNFUSED in outputs else "cuda_hopper_padded"
        if FUSED in outputs and unfused in outputs:
            records.append(dict(base, kind="fused_activation_bits", fused=FUSED, unfused=unfused,
                                bits_equal=bool(torch.equal(outputs[FUSED], outputs[unfused]))))
        if "triton_dense" in outputs:
            for name, out in outputs.items():
                records.append(dict(base, kind="agreement", path=name,
                                    rel_err_vs_triton_dense=rel_err(out, outputs["triton_dense"])))
        if not args.no_gemms:
            try:
                found = gemm_records(experts, x, ids, w, shape, T, dtype)
                gemms += found
                records += found
            except Exception as e:  # noqa: BLE001
                records.append(dict(base, kind="gemm", error=f"{type(e).__name__}: {e}"))
                traceback.print_exc()
        save()  # what is measured so far survives a run cut off at its time limit
    for kernel in ("grouped", "padded") if gemms else ():
        records.append(dict(kind="suggested_measured", kernel=kernel, E=E, K=K, H=H, I=I,
                            device=torch.cuda.get_device_name(), dtype=str(dtype),
                            rows=suggested_rows(gemms, E, K, kernel)))


def profile_gemms(E=512, time_them=False, kernel="grouped"):
    """The Nsight Compute target (bench/h200_hopper.sh): K=10 H=2048 I=512 T=8192 with E
    experts (512: the issue's config; 1: the same rows in one group, so no tile changes group),
    the gate/up and down GEMMs with the configurations the layer would take, launched twice.
    time_them: then each GEMM's graph-replay median and TFLOP/s, for every configuration (the
    group-change check without a profiler: E=1 against E=512 in one call). kernel: which
    kernel the two profiled launches run ("grouped": the ptr-array one; "padded": the padded
    plan's, over its plan of tile_m 128), each with its configuration rule's choice."""
    K, H, I, T = 10, 2048, 512, 8192
    dtype = torch.bfloat16
    g = torch.Generator().manual_seed(0)
    gate_up = (torch.randn(E, 2 * I, H, generator=g) / H ** 0.5).to(dtype).cuda()
    down = (torch.randn(E, H, I, generator=g) / I ** 0.5).to(dtype).cuda()
    x = torch.randn(T, H, device="cuda").to(dtype)
    # fewer experts than K: repeated ids in a row (the plan takes them), every row still routed
    ids = (make_ids(T, K, E, "uniform") if E >= K
           else torch.randint(0, E, (T, K), generator=torch.Generator().manual_seed(0)))
    impl = dict((k, i) for k, i, _ in kernels())[kernel]
    plan = torch_argon.argon_ops.moe_plan(ids.cuda(), make_weights(T, K).cuda(), E,
                                          impl.default_tile_m(None, T * K))
    xs = torch_argon.argon_ops.moe_gather(x, plan)
    h = torch.randn(xs.shape[0], I, device="cuda").to(dtype)
    cfg_gu, cfg_down = impl.choose_configs(T * K / E, torch.cuda.get_device_name(), "bfloat16")
    for _ in range(2):
        impl.gemm(xs, gate_up, plan, cfg_gu)
        impl.gemm(h, down, plan, cfg_down)
    torch.cuda.synchronize()
    print(f"profiled gate_up ({cfg_gu}) and down ({cfg_down})")
    if time_them:
        # each GEMM alone, every configuration of both kernels, TFLOP/s over the same routed
        # rows (the padded kernel over its plan of tile_m 128, padding rows in its work)
        for kernel, impl, names in kernels():
            kplan = torch_argon.argon_ops.moe_plan(ids.cuda(), make_weights(T, K).cuda(), E,
                                                   impl.default_tile_m(None, T * K))
            a_gu = torch_argon.argon_ops.moe_gather(x, kplan)
            a_down = torch.randn(a_gu.shape[0], I, device="cuda").to(dtype)
            for cfg in names:
                for name, a, w in (("gate_up", a_gu, gate_up), ("down", a_down, down)):
                    us = cuda_graph_replays_us(lambda: impl.gemm(a, w, kplan, cfg))
                    tflops = 2 * T * K * w.shape[1] * w.shape[2] / us / 1e6
                    print(f"E={E} {name:7s} {kernel:7s} {cfg:24s} {us:8.1f} us {tflops:6.1f} "
                          f"TFLOP/s", flush=True)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="JSON file to write (a list of records)")
    p.add_argument("--profile-gemms", action="store_true",
                   help="only launch the two GEMMs at E=512 T=8192 twice (ncu's target)")
    p.add_argument("--profile-experts", type=int, default=512,
                   help="E of --profile-gemms' problem (1: one group, the same rows)")
    p.add_argument("--profile-kernel", choices=("grouped", "padded"), default="grouped",
                   help="with --profile-gemms: the kernel the two profiled launches run")
    p.add_argument("--profile-time", action="store_true",
                   help="with --profile-gemms: time every configuration's two GEMMs too")
    p.add_argument("--quick", action="store_true", help=f"T = {T_QUICK} only")
    p.add_argument("--T", type=lambda v: tuple(int(t) for t in v.split(",")),
                   help=f"comma-separated token counts (default {T_ALL})")
    p.add_argument("--no-gemms", action="store_true", help="the experts paths only")
    p.add_argument("--hbm-tbps", type=float, default=4.3,
                   help="memory bandwidth for the weight-read floor (H200: 4.3; H100: 3.35)")
    p.add_argument("--matrix-tflops", type=float, default=790.0,
                   help="bf16 matrix rate for the matrix floor (H200/H100 measured: ~790)")
    args = p.parse_args()
    if args.profile_gemms:
        return profile_gemms(args.profile_experts, args.profile_time, args.profile_kernel)
    if not args.out:
        p.error("--out is required")
    why = hopper.refusal("cuda") if torch.cuda.is_available() else "no CUDA device"
    records = [dict(kind="run", device=torch.cuda.get_device_name() if not why.startswith("no CUDA")
                    else None, torch=torch.__version__, hopper_refusal=why)]
    vllm = vllm_baseline()
    records.append(dict(kind="vllm_fused_moe", available=vllm[0] is not None, why_not=vllm[1]))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)

    def save():
        with open(args.out, "w") as f:
            json.dump(records, f, indent=1)

    if not why:
        for shape in SHAPES:
            ts = args.T or (T_QUICK if args.quick else T_ALL)
            bench_shape(shape, ts, torch.bfloat16, args, vllm,
                        records, save)
    else:
        print(f"the Hopper GEMM cannot run here: {why}", file=sys.stderr)
    save()
    print(f"wrote {args.out} ({len(records)} records)")
    return 0 if not why else 1


if __name__ == "__main__":
    sys.exit(main())
