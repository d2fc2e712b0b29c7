"""Time the whole argon MoE layer and each of its stages against plain-torch baselines, in one
run on the current device, and merge the records into a JSON file.

    # the H200 (defaults: bf16; E=512 K=10 hidden 2048 expert width 512, a Qwen3-Next-sized
    # layer, and E=128 K=8 hidden 2048 width 768, Qwen3-30B-A3B; T = 128 ... 16384), ~4 minutes:
    python bench/bench_layer.py --json bench/results/h200.json
    # one config: --configs 128x8x2048x768 (E x K x hidden x width), or --E/--K/--hidden/--inter
    # the CPU, small shapes:
    python bench/bench_layer.py --device cpu --T 64,256 --E 16 --K 4 --hidden 256 --inter 128 \
        --json bench/results/cpu.json

Timing: on CUDA, GPU time per call from CUDA events around CUDA graph replays (median of
samples); what cannot be captured because it syncs with the host (the per-expert loop, the
argsort plan's bincount) is timed eagerly with CUDA events. On the CPU, wall clock. Each
record says which ("timing", "baseline_timing").

Paths (--paths): "triton" is the layer as it runs by default on CUDA (Triton top-k; plan;
gather + gate/up GEMM + SwiGLU in one Triton kernel; Triton down GEMM; combine), "ops" the
argon ops one stage at a time with torch.topk (the layer before the Triton kernels). The first
path is the "moe_layer" record and its "moe_layer/<stage>" records; each other path is a
baseline of it ("layer_argon_<path>_path") with its stages under "moe_layer_<path>/<stage>".

Records: {"op": "moe_layer" or "moe_layer/<stage>", "backend", "T", "E", "K", "H", "I", "tm",
"dist", "median_us", "baseline", "baseline_median_us", ...}; on CUDA the layer records also
carry the floors: "weight_read_floor_us" (every expert's weights read once at --hbm-tbps) and
"matrix_floor_us" (the experts' T*K*6*H*I FLOP at --matrix-tflops). A run replaces every record
of the file with the same (backend, T, E, K, H, I, dist) whose op starts with "moe_layer"; the
others are kept.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from torch_argon import triton_ops  # noqa: E402
from torch_argon.testing import backends, baselines  # noqa: E402
from torch_argon.layer import moe_layer  # noqa: E402
from torch_argon.routing import route  # noqa: E402
from torch_argon.testing.timing import cuda_events_us, heat  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# E x K x hidden x expert width: a Qwen3-Next-sized layer, and Qwen3-30B-A3B's.
DEFAULT_CONFIGS = ("512x10x2048x512", "128x8x2048x768")


def parse_config(text):
    parts = text.lower().split("x")
    if len(parts) != 4 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise SystemExit(f"--configs: {text!r} is not ExKxHxI (e.g. 128x8x2048x768)")
    return tuple(int(p) for p in parts)
STAGES = ("route", "plan", "gather", "gate_up_mm", "swiglu", "down_mm", "combine")


# ---- timers: each returns the median microseconds per call, and how it was timed ----------

def time_wall(fn, samples):
    fn()
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e6)
    return statistics.median(times), "wall"


def time_cuda_eager(fn, samples):
    fn()
    torch.cuda.synchronize()
    return cuda_events_us(fn, samples=samples), "events"


def time_cuda_graph(fn, samples):
    """Capture fn once, then time replays; several replays per sample for short graphs."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    one = cuda_events_us(graph.replay, samples=3)
    inner = max(1, min(100, int(1000 / max(one, 1.0))))  # about 1 ms per sample
    us = cuda_events_us(graph.replay, inner=inner, samples=samples)
    del graph
    return us, "graph"


class Timer:
    def __init__(self, device, samples):
        self.device, self.samples = device, samples

    def __call__(self, fn, capturable=True, samples=None):
        samples = samples or self.samples
        if self.device.type != "cuda":
            return time_wall(fn, samples)
        heat()  # clocks up before every timing, as bench_cuda.py does
        if capturable:
            try:
                return time_cuda_graph(fn, samples)
            except RuntimeError as e:  # something in fn syncs with the host: time it eagerly
                print(f"  (CUDA graph capture failed, timing eagerly: {str(e).splitlines()[0]})")
                torch.cuda.synchronize()
        return time_cuda_eager(fn, samples)


# ---- the problem ----------------------------------------------------------------------------

def make_problem(T, E, H, I, dtype, device, dist, seed=0):
    """Activations, router and expert stacks, scaled so every stage's values are O(1).
    dist "skewed": a bias column gives expert popularity about Zipf(1.2)."""
    g = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape, scale):
        return (torch.randn(*shape, generator=g, device=device, dtype=torch.float32)
                * scale).to(dtype)

    x = randn(T, H, scale=1.0)
    router = randn(E, H, scale=H ** -0.5)
    if dist == "skewed":
        zipf = torch.arange(1, E + 1, device=device, dtype=torch.float32) ** -1.2
        x[:, 0] = 1
        router[:, 0] = (zipf / zipf.sum()).log().to(dtype)
    elif dist != "uniform":
        raise ValueError(f"dist must be uniform or skewed, got {dist!r}")
    w_gate_up = randn(E, 2 * I, H, scale=H ** -0.5)
    w_down = randn(E, H, I, scale=I ** -0.5)
    return x, router, w_gate_up, w_down


def rel_err(a, b):
    return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()


def path_label(path):
    return f"layer_argon_{path}_path"


def layer_fn(x, router, w_gate_up, w_down, K, ops, path):
    """The layer along one path: "triton" (the CUDA default) or "ops" (as before the Triton
    kernels: torch.topk and one argon op per stage)."""
    def run(tm):
        return moe_layer(x, router, (w_gate_up, w_down), K, tile_m=tm, ops=ops, path=path,
                         topk="auto" if path == "triton" else "torch")
    return run


def time_layer(timer, run, tile_ms):
    """(best tm, us, how) over the tile sizes (a backend may refuse some)."""
    layer_us = {}
    for tm in tile_ms:
        try:
            layer_us[tm] = timer(lambda: run(tm))
        except (RuntimeError, ValueError) as e:
            print(f"  tile_m={tm} failed: {str(e).splitlines()[0]}")
    if not layer_us:
        raise SystemExit(f"the argon layer failed at every tile_m in {tile_ms}")
    if len(layer_us) > 1:
        print("  layer by tile_m: " + ", ".join(f"{t}: {u:.1f} us" for t, (u, _) in
                                                 layer_us.items()))
    tm = min(layer_us, key=lambda t: layer_us[t][0])
    return (tm,) + layer_us[tm]


def time_cpu_interleaved(args, x, router, w_gate_up, w_down, K, ops, timed, tile_ms,
                         layer_baselines):
    """On the CPU: every path at every tile_m and every layer baseline called in turn in each of
    args.rounds rounds, medians per call. A machine shared with other jobs then loads them
    alike (timing one after the other lets the load of one minute decide the ratio). Fills
    timed[path] = (best tm, us, "wall-interleaved"); returns {baseline: (us, how)}."""
    calls = {}
    for path in args.paths:
        run = layer_fn(x, router, w_gate_up, w_down, K, ops, path)
        for tm in tile_ms:
            calls[(path, tm)] = (lambda run=run, tm=tm: run(tm))
    for name, fn, _ in layer_baselines:
        calls[name] = (lambda fn=fn: fn(x, router, w_gate_up, w_down, K))
    us = time_rounds(calls, args.rounds)
    for path in args.paths:
        by_tm = {tm: us[(path, tm)] for tm in tile_ms if (path, tm) in us}
        if not by_tm:
            raise SystemExit(f"the argon layer ({path} path) failed at every tile_m in {tile_ms}")
        tm = min(by_tm, key=by_tm.get)
        timed[path] = (tm, by_tm[tm], "wall-interleaved")
    return {name: (us[name], "wall-interleaved") for name, _, _ in layer_baselines if name in us}


def touched_weight_bytes(plan, w):
    """Bytes of the experts' weight stack that a GEMM over this plan must read."""
    return int((plan.counts > 0).sum()) * w[0].numel() * w.element_size()


def time_rounds(calls, rounds):
    """{key: median wall us} of calls {key: fn}, each called in turn in every one of `rounds`
    rounds after a warm-up call; a call that raises is reported and left out."""
    calls = dict(calls)
    for key_, call in list(calls.items()):
        try:
            call()
        except (RuntimeError, ValueError) as e:
            print(f"  {key_} failed: {str(e).splitlines()[0]}")
            del calls[key_]
    samples = {key_: [] for key_ in calls}
    for _ in range(rounds):
        for key_, call in calls.items():
            start = time.perf_counter()
            call()
            samples[key_].append((time.perf_counter() - start) * 1e6)
    return {key_: statistics.median(v) for key_, v in samples.items()}


def stage_records(timer, stages, common, layer_us, op_prefix, rounds=0):
    """One record per stage, with its baseline's time. rounds > 0 (the CPU): every stage and
    baseline called in turn in each round, as the layer is."""
    records = []
    if rounds:
        calls = {stage: argon_call for stage, (argon_call, _, _) in stages.items()}
        calls.update({(stage, "baseline"): base[1] for stage, (_, base, _) in stages.items()
                      if base is not None})
        us = time_rounds(calls, rounds)

        def timed(key_, call, capturable=True):
            if key_ not in us:
                raise RuntimeError(f"{key_} failed")
            return us[key_], "wall-interleaved"
    else:
        def timed(key_, call, capturable=True):
            return timer(call, capturable)
    for stage, (argon_call, base, nbytes) in stages.items():
        stage_us, stage_how = timed(stage, argon_call)
        rec = dict(op=f"{op_prefix}/{stage}", **common, median_us=stage_us, timing=stage_how,
                   share_of_layer=stage_us / layer_us, baseline=None, baseline_median_us=None)
        if nbytes:
            rec["weight_tbps"] = nbytes / (stage_us * 1e-6) / 1e12
        if base is not None:
            name, call, capturable = base
            try:
                rec["baseline_median_us"], rec["baseline_timing"] = timed((stage, "baseline"),
                                                                          call, capturable)
                rec["baseline"] = name
            except RuntimeError as e:
                print(f"  baseline {name} for {stage} failed: {str(e).splitlines()[0]}")
        records.append(rec)
    return records


def ops_stages(x, router, w_gate_up, w_down, K, E, tm, ops):
    """The ops path's stages, each on the intermediates of one layer call."""
    ids, weights = route(x, router, K, topk="torch")
    plan = ops.moe_plan(ids, weights, E, tm)
    xs = ops.moe_gather(x, plan)
    gu = ops.moe_mm(xs, w_gate_up, plan)
    h = ops.swiglu(gu)
    y = ops.moe_mm(h, w_down, plan)
    # On the CPU the layer writes these stages into buffers it keeps across calls (layer.py,
    # _CpuWorkspace); their stages here do the same, so the stages add up to the layer.
    out = (dict(gather=xs.clone(), gate_up_mm=gu.clone(), swiglu=h.clone(), down_mm=y.clone())
           if x.device.type == "cpu" else dict.fromkeys(("gather", "gate_up_mm", "swiglu",
                                                         "down_mm")))
    ends = plan.offsets[1:]  # padded group ends: grouped_mm over the same padded rows

    def grouped_mm(a, w):
        return torch._grouped_mm(a, w.transpose(1, 2), offs=ends)

    has_grouped_mm = hasattr(torch, "_grouped_mm")
    return {  # stage: (argon call, (baseline name, call, capturable) or None, weight bytes)
        "route": (lambda: route(x, router, K, topk="torch"), None, 0),
        "plan": (lambda: ops.moe_plan(ids, weights, E, tm),
                 ("torch_argsort", lambda: baselines.plan_argsort(ids, weights, E, tm), False),
                 0),
        "gather": (lambda: ops.moe_gather(x, plan, out=out["gather"]),
                   ("torch_index_select",
                    lambda: baselines.gather_index_select(x, plan.sorted_token), True), 0),
        "gate_up_mm": (lambda: ops.moe_mm(xs, w_gate_up, plan, out=out["gate_up_mm"]),
                       ("torch_grouped_mm", lambda: grouped_mm(xs, w_gate_up), True)
                       if has_grouped_mm else None, touched_weight_bytes(plan, w_gate_up)),
        "swiglu": (lambda: ops.swiglu(gu, out=out["swiglu"]),
                   ("torch_silu_mul", lambda: baselines.swiglu_torch(gu), True), 0),
        "down_mm": (lambda: ops.moe_mm(h, w_down, plan, out=out["down_mm"]),
                    ("torch_grouped_mm", lambda: grouped_mm(h, w_down), True)
                    if has_grouped_mm else None, touched_weight_bytes(plan, w_down)),
        "combine": (lambda: ops.moe_combine(y, plan, weights, out_dtype=x.dtype),
                    ("torch_gather_sum", lambda: baselines.combine_torch(y, plan.pos, weights),
                     True), 0),
    }


def triton_stages(x, router, w_gate_up, w_down, K, E, tm, ops):
    """The Triton path's stages; each baseline is what the stage replaces, in plain torch."""
    ids, weights = route(x, router, K)
    plan = ops.moe_plan(ids, weights, E, tm)
    tiles = (plan.tile_expert, plan.meta, tm)
    h = triton_ops.moe_gate_up_swiglu_triton(x, w_gate_up, *tiles, plan.sorted_token,
                                             zero_unused=False)
    y = triton_ops.moe_mm_triton(h, w_down, *tiles, zero_unused=False,
                                 row_token=plan.sorted_token)
    ends = plan.offsets[1:]

    def gather_gate_up_swiglu_torch():
        xs = baselines.gather_index_select(x, plan.sorted_token)
        return baselines.swiglu_torch(torch._grouped_mm(xs, w_gate_up.transpose(1, 2),
                                                         offs=ends))

    return {
        "route": (lambda: route(x, router, K),
                  ("torch_topk", lambda: route(x, router, K, topk="torch"), True), 0),
        "plan": (lambda: ops.moe_plan(ids, weights, E, tm),
                 ("torch_argsort", lambda: baselines.plan_argsort(ids, weights, E, tm), False),
                 0),
        "gate_up_swiglu": (
            lambda: triton_ops.moe_gate_up_swiglu_triton(x, w_gate_up, *tiles,
                                                         plan.sorted_token, zero_unused=False),
            ("torch_gather_grouped_mm_silu_mul", gather_gate_up_swiglu_torch, True),
            touched_weight_bytes(plan, w_gate_up)),
        "down_mm": (lambda: triton_ops.moe_mm_triton(h, w_down, *tiles, zero_unused=False,
                                                     row_token=plan.sorted_token),
                    ("torch_grouped_mm", lambda: torch._grouped_mm(
                        h, w_down.transpose(1, 2), offs=ends), True),
                    touched_weight_bytes(plan, w_down)),
        "combine": (lambda: ops.moe_combine(y, plan, weights, out_dtype=x.dtype),
                    ("torch_gather_sum", lambda: baselines.combine_torch(y, plan.pos, weights),
                     True), 0),
    }


def bench_one(args, timer, ops, T, dist, tile_ms, model):
    """Records for one (model config, T, dist): the layer along each path against the
    baselines, then every stage of each path. model: (E, K, H, I)."""
    (E, K, H, I), dtype = model, DTYPES[args.dtype]
    x, router, w_gate_up, w_down = make_problem(T, E, H, I, dtype, args.device, dist)
    common = dict(backend=args.backend, T=T, E=E, K=K, dist=dist, dtype=args.dtype, H=H, I=I)

    timed = {}  # path: (tm, us, how)
    layer_baselines = [("layer_per_expert_loop", baselines.layer_per_expert_loop,
                        args.loop_samples)]
    if hasattr(torch, "_grouped_mm"):
        layer_baselines.append(("layer_argsort_grouped_mm", baselines.layer_argsort_grouped_mm,
                                None))
    interleaved = {}  # baseline name: (us, how), when timed in the layer's rounds
    if args.device.type == "cpu" and args.rounds:
        interleaved = time_cpu_interleaved(args, x, router, w_gate_up, w_down, K, ops, timed,
                                           tile_ms, layer_baselines)
    for path in args.paths:
        if path in timed:
            continue
        run = layer_fn(x, router, w_gate_up, w_down, K, ops, path)
        if path == "triton":  # the layer picks its tile_m from shapes (and the config table)
            _, us, how = time_layer(timer, run, [None])
            timed[path] = (triton_ops.configs.layer_tile_m(
                T * K, E, hidden=H, inter=I, dtype=dtype,
                device_name=triton_ops.device_name(args.device)), us, how)
        else:
            timed[path] = time_layer(timer, run, tile_ms)
    main_path = args.paths[0]
    tm, us, how = timed[main_path]
    common["tm"] = tm
    out = layer_fn(x, router, w_gate_up, w_down, K, ops, main_path)(
        None if main_path == "triton" else tm)

    records = []
    for name, fn, samples in layer_baselines:
        call = lambda: fn(x, router, w_gate_up, w_down, K)  # noqa: E731
        try:
            base_us, base_how = (interleaved[name] if name in interleaved else
                                 timer(call, capturable=False, samples=samples))
            err = rel_err(out, call())
        except RuntimeError as e:  # e.g. _grouped_mm without kernels for this device / dtype
            print(f"  baseline {name} failed: {str(e).splitlines()[0]}")
            continue
        records.append(dict(op="moe_layer", **common, path=main_path, median_us=us, timing=how,
                            baseline=name, baseline_median_us=base_us,
                            baseline_timing=base_how, max_rel_err_vs_baseline=err))
    for path in args.paths[1:]:
        ptm, pus, phow = timed[path]
        pout = layer_fn(x, router, w_gate_up, w_down, K, ops, path)(ptm)
        records.append(dict(op="moe_layer", **common, path=main_path, median_us=us, timing=how,
                            baseline=path_label(path), baseline_median_us=pus,
                            baseline_timing=phow, baseline_tm=ptm,
                            max_rel_err_vs_baseline=rel_err(out, pout)))
    if not records:
        records.append(dict(op="moe_layer", **common, path=main_path, median_us=us, timing=how,
                            baseline=None, baseline_median_us=None))
    weight_bytes = (w_gate_up.numel() + w_down.numel()) * w_gate_up.element_size()
    for r in records:
        r["weight_bytes"] = weight_bytes
        if args.device.type == "cuda":
            r["weight_read_floor_us"] = weight_bytes / (args.hbm_tbps * 1e12) * 1e6
            r["matrix_floor_us"] = T * K * 6 * H * I / (args.matrix_tflops * 1e12) * 1e6
            r["floor_over_layer"] = r["weight_read_floor_us"] / us  # 1.0 = at the floor

    for path in args.paths:
        ptm, pus, _ = timed[path]
        make = triton_stages if path == "triton" else ops_stages
        stages = make(x, router, w_gate_up, w_down, K, E, ptm, ops)
        prefix = "moe_layer" if path == main_path else f"moe_layer_{path}"
        records += stage_records(timer, stages, dict(common, tm=ptm), pus, prefix,
                                 rounds=args.rounds if args.device.type == "cpu" else 0)
    return records


# ---- output ---------------------------------------------------------------------------------

def shape_of(r):
    """The layer config of a record; records from before the configs were recorded are the
    default E=512 layer."""
    return tuple(r.get(k, d) for k, d in (("E", 512), ("K", 10), ("H", 2048), ("I", 512)))


def key(r, with_dtype=True):
    return ((r["op"], r["backend"], r["T"], shape_of(r), r["baseline"], r.get("dist"))
            + ((r.get("dtype"),) if with_dtype else ()))


def group(r, with_dtype=True):
    return ((r["backend"], r["T"], shape_of(r), r.get("dist"))
            + ((r.get("dtype"),) if with_dtype else ()) if r["op"].startswith("moe_layer")
            else None)


def merge_into(path, records):
    """Replace the records with the same key, and every moe_layer record of a (backend, T,
    dist, dtype) this run measured (stages renamed or dropped since leave none behind); keep
    every other one (so fp32 and bf16 runs of one shape sit side by side). A record written
    before records carried their dtype matches any dtype. A JSON list, or a dict holding one
    under "records"."""
    data = []
    if os.path.exists(path):
        with open(path) as f:
            data = json.load(f)
    old = data["records"] if isinstance(data, dict) else data

    new_keys = {typed: {key(n, typed) for n in records} for typed in (True, False)}
    new_groups = {typed: {group(n, typed) for n in records} - {None} for typed in (True, False)}

    def replaced(r):
        if not (isinstance(r, dict) and "op" in r and "backend" in r):
            return False
        typed = "dtype" in r
        return key(r, typed) in new_keys[typed] or group(r, typed) in new_groups[typed]

    merged = [r for r in old if not replaced(r)]
    merged += records
    if isinstance(data, dict):
        data["records"] = merged
    else:
        data = merged
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


def report(records, device):
    layer = [r for r in records if r["op"] == "moe_layer"][0]
    print(f"E={layer['E']} K={layer['K']} H={layer['H']} I={layer['I']} "
          f"T={layer['T']} dist={layer['dist']} tm={layer['tm']}: argon layer "
          f"({layer.get('path', '-')} path) {layer['median_us']:.1f} us ({layer['timing']})")
    for r in records:
        if r["op"] == "moe_layer" and r["baseline"]:
            print(f"  vs {r['baseline']:<28} {r['baseline_median_us']:10.1f} us "
                  f"({r['baseline_timing']}): {r['baseline_median_us'] / r['median_us']:.2f}x, "
                  f"max rel err {r['max_rel_err_vs_baseline']:.2e}")
    if device.type == "cuda":
        floor, matrix = layer["weight_read_floor_us"], layer["matrix_floor_us"]
        print(f"  floors: weight read {floor:.0f} us, matrix {matrix:.0f} us: layer at "
              f"{layer['median_us'] / max(floor, matrix):.2f}x the larger")
    for prefix in dict.fromkeys(r["op"].split("/")[0] for r in records if "/" in r["op"]):
        print(f"  {prefix} stages:")
        stages = [r for r in records if r["op"].startswith(prefix + "/")]
        for r in stages:
            base = (f"   {r['baseline']} {r['baseline_median_us']:.1f} us"
                    if r["baseline"] else "")
            tbps = f"  {r['weight_tbps']:.2f} TB/s" if "weight_tbps" in r else ""
            print(f"    {r['op'].split('/')[1]:<15} {r['median_us']:9.1f} us  "
                  f"{r['share_of_layer']:6.1%}{tbps}{base}")
        print(f"    sum of stages {sum(r['median_us'] for r in stages):.1f} us")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="auto", help="auto (cuda when present), cuda or cpu")
    p.add_argument("--backend", default=None,
                   help="torch_argon backend name (default: cuda on CUDA, cpu on the CPU)")
    p.add_argument("--T", default="128,512,2048,8192,16384",
                   help="token counts, comma separated")
    p.add_argument("--configs", default=",".join(DEFAULT_CONFIGS),
                   help="layer configs ExKxHxI (experts, top-k, hidden, expert width), comma "
                        "separated")
    p.add_argument("--E", type=int, default=None,
                   help="with --K/--hidden/--inter: one config instead of --configs (the "
                        "others default to 512x10x2048x512's)")
    p.add_argument("--K", type=int, default=None)
    p.add_argument("--hidden", type=int, default=None)
    p.add_argument("--inter", type=int, default=None, help="expert width I")
    p.add_argument("--dtype", default="bf16", choices=DTYPES)
    p.add_argument("--tile-m", default=None,
                   help="tile_m values, comma separated: the layer is timed at each, and the "
                        "fastest is recorded (with its stages) (default: 16,32,64,128 on GPUs; "
                        "on the CPU 1, the tile_m the layer takes there)")
    p.add_argument("--dist", default="uniform", help="uniform and/or skewed, comma separated")
    p.add_argument("--paths", default=None,
                   help="layer paths, comma separated, the first recorded as the layer: triton "
                        "and/or ops (default: triton,ops on CUDA with Triton, else ops)")
    p.add_argument("--samples", type=int, default=20, help="timing samples per measurement")
    p.add_argument("--loop-samples", type=int, default=3,
                   help="samples for the (slow) per-expert loop baseline")
    p.add_argument("--rounds", type=int, default=7,
                   help="CPU: the layer and its layer baselines are called in turn in this many "
                        "rounds and each gets its median (0: time them one after the other, "
                        "--samples / --loop-samples each)")
    p.add_argument("--hbm-tbps", type=float, default=4.3,
                   help="memory bandwidth for the weight-read floor (H200: 4.3 TB/s)")
    p.add_argument("--matrix-tflops", type=float, default=790.0,
                   help="matrix rate for the matrix floor (H200 bf16, measured: 790 TFLOP/s)")
    p.add_argument("--json", default=None, help="merge the records into this JSON file")
    args = p.parse_args()

    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    args.device = torch.device(args.device)
    args.backend = args.backend or ("cuda" if args.device.type == "cuda" else "cpu")
    backend = backends.get(args.backend)
    if not backend.available:
        sys.exit(f"backend {args.backend} is unavailable: {backend.reason}")
    if torch.device(backend.device).type != args.device.type:
        sys.exit(f"backend {args.backend} runs on {backend.device}, not {args.device}")
    if any(v is not None for v in (args.E, args.K, args.hidden, args.inter)):
        base = parse_config(DEFAULT_CONFIGS[0])
        models = [tuple(v if v is not None else d for v, d in
                        zip((args.E, args.K, args.hidden, args.inter), base))]
    else:
        models = [parse_config(c) for c in args.configs.split(",")]
    name = torch.cuda.get_device_name() if args.device.type == "cuda" else "CPU"
    print(f"{name}, backend {args.backend}, {args.dtype}, configs " +
          ", ".join("E={} K={} H={} I={}".format(*m) for m in models))

    if args.paths is None:
        args.paths = ("triton,ops" if args.device.type == "cuda" and triton_ops.AVAILABLE
                      else "ops")
    args.paths = args.paths.split(",")
    timer = Timer(args.device, args.samples)
    if args.tile_m is None:
        args.tile_m = "1" if args.device.type == "cpu" else "16,32,64,128"
    tile_ms = [int(t) for t in args.tile_m.split(",")]
    records = []
    with torch.inference_mode():
        for model in models:
            for dist in args.dist.split(","):
                for T in (int(t) for t in args.T.split(",")):
                    recs = bench_one(args, timer, backend.ops, T, dist, tile_ms, model)
                    report(recs, args.device)
                    records += recs
                    if args.device.type == "cuda":
                        torch.cuda.empty_cache()
    if args.json:
        merge_into(args.json, records)
        print(f"{len(records)} records merged into {args.json}")


if __name__ == "__main__":
    main()
