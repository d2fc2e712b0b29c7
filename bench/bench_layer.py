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

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from torch_argon import triton_ops  # noqa: E402
from torch_argon.testing import backends  # noqa: E402
from torch_argon.testing.layers import (argon_stages, experts_path, layer_baselines,  # noqa: E402
                                        make_layer, max_relative_error, run_layer)
from torch_argon.testing.timing import (cuda_graph_replays_us, heat, median_us,  # noqa: E402
                                        one_call_us, rounds_us)

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# E x K x hidden x expert width: a Qwen3-Next-sized layer, and Qwen3-30B-A3B's.
DEFAULT_CONFIGS = ("512x10x2048x512", "128x8x2048x768")


def parse_config(text):
    parts = text.lower().split("x")
    if len(parts) != 4 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise SystemExit(f"--configs: {text!r} is not ExKxHxI (e.g. 128x8x2048x768)")
    return tuple(int(p) for p in parts)


class Timer:
    """(median us per call, how): on CUDA, after heat(), graph replay (timing.
    cuda_graph_replays_us), or CUDA events around eager calls where fn cannot be captured (it
    syncs with the host); elsewhere the wall clock."""

    def __init__(self, device, samples):
        self.device, self.samples = device, samples

    def __call__(self, fn, capturable=True, samples=None):
        samples = samples or self.samples
        if self.device.type != "cuda":
            return median_us(fn, self.device, warmup=1, repeat=samples), "wall"
        heat()  # clocks up before every timing, as bench_cuda.py does
        if capturable:
            try:
                return cuda_graph_replays_us(fn, samples=samples), "graph"
            except RuntimeError as e:  # something in fn syncs with the host: time it eagerly
                print(f"  (CUDA graph capture failed, timing eagerly: {str(e).splitlines()[0]})")
                torch.cuda.synchronize()
        return median_us(fn, self.device, warmup=1, repeat=samples), "events"


def path_label(path):
    return f"layer_argon_{path}_path"


def layer_call(layer, ops, path):
    """The layer along one path, by tile_m: "triton" (the CUDA default) or "ops" (as before the
    Triton kernels: torch.topk and one argon op per stage)."""
    topk = "auto" if path == "triton" else "torch"
    return lambda tm: run_layer(layer, ops, path, tm, topk=topk)


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


def time_rounds(calls, rounds):
    """{key: median wall us} of calls {key: fn}, each called in turn in every one of `rounds`
    rounds (timing.rounds_us) after a warm-up call; a call that raises is reported and left
    out."""
    calls = dict(calls)
    for key_, call in list(calls.items()):
        try:
            call()
        except (RuntimeError, ValueError) as e:
            print(f"  {key_} failed: {str(e).splitlines()[0]}")
            del calls[key_]
    runs = rounds_us(calls, rounds, lambda key_, fn, r: one_call_us(fn))
    return {key_: statistics.median(v) for key_, v in runs.items()}


def time_cpu_interleaved(args, layer, ops, timed, tile_ms, baseline_calls):
    """On the CPU: every path at every tile_m and every layer baseline called in turn in each of
    args.rounds rounds, medians per call. A machine shared with other jobs then loads them
    alike (timing one after the other lets the load of one minute decide the ratio). Fills
    timed[path] = (best tm, us, "wall-interleaved"); returns {baseline: (us, how)}."""
    calls = {}
    for path in args.paths:
        run = layer_call(layer, ops, path)
        for tm in tile_ms:
            calls[(path, tm)] = (lambda run=run, tm=tm: run(tm))
    calls.update(baseline_calls)
    us = time_rounds(calls, args.rounds)
    for path in args.paths:
        by_tm = {tm: us[(path, tm)] for tm in tile_ms if (path, tm) in us}
        if not by_tm:
            raise SystemExit(f"the argon layer ({path} path) failed at every tile_m in {tile_ms}")
        tm = min(by_tm, key=by_tm.get)
        timed[path] = (tm, by_tm[tm], "wall-interleaved")
    return {name: (us[name], "wall-interleaved") for name in baseline_calls if name in us}


def stage_records(timer, stages, common, layer_us, op_prefix, rounds=0):
    """One record per stage (testing.layers.argon_stages), with its baseline's time. rounds > 0
    (the CPU): every stage and baseline called in turn in each round, as the layer is."""
    records = []
    if rounds:
        calls = {name: stage.call for name, stage in stages.items()}
        calls.update({(name, "baseline"): stage.baseline.call for name, stage in stages.items()
                      if stage.baseline is not None})
        us = time_rounds(calls, rounds)

        def timed(key_, call, capturable=True):
            if key_ not in us:
                raise RuntimeError(f"{key_} failed")
            return us[key_], "wall-interleaved"
    else:
        def timed(key_, call, capturable=True):
            return timer(call, capturable)
    for name, stage in stages.items():
        stage_us, stage_how = timed(name, stage.call)
        rec = dict(op=f"{op_prefix}/{name}", **common, median_us=stage_us, timing=stage_how,
                   share_of_layer=stage_us / layer_us, baseline=None, baseline_median_us=None)
        if stage.weight_bytes:
            rec["weight_tbps"] = stage.weight_bytes / (stage_us * 1e-6) / 1e12
        base = stage.baseline
        if base is not None:
            try:
                rec["baseline_median_us"], rec["baseline_timing"] = timed(
                    (name, "baseline"), base.call, base.capturable)
                rec["baseline"] = base.name
            except RuntimeError as e:
                print(f"  baseline {base.name} for {name} failed: {str(e).splitlines()[0]}")
        records.append(rec)
    return records


def bench_one(args, timer, ops, T, dist, tile_ms, model):
    """Records for one (model config, T, dist): the layer along each path against the
    baselines, then every stage of each path. model: (E, K, H, I)."""
    (E, K, H, I), dtype = model, DTYPES[args.dtype]
    layer = make_layer(T, E, K, H, I, dtype, args.device, dist=dist)
    common = dict(backend=args.backend, T=T, E=E, K=K, dist=dist, dtype=args.dtype, H=H, I=I)

    timed = {}  # path: (tm, us, how)
    baseline_calls = layer_baselines(layer)
    samples = {"layer_per_expert_loop": args.loop_samples}
    interleaved = {}  # baseline name: (us, how), when timed in the layer's rounds
    if args.device.type == "cpu" and args.rounds:
        interleaved = time_cpu_interleaved(args, layer, ops, timed, tile_ms, baseline_calls)
    for path in args.paths:
        if path in timed:
            continue
        run = layer_call(layer, ops, path)
        if path == "triton":  # the layer picks its tile_m from shapes (and the config table)
            _, us, how = time_layer(timer, run, [None])
            chosen = experts_path(layer.x, layer.experts, ops, top_k=K, path="triton")
            timed[path] = (chosen.tile_m, us, how)
        else:
            timed[path] = time_layer(timer, run, tile_ms)
    main_path = args.paths[0]
    tm, us, how = timed[main_path]
    common["tm"] = tm
    out = layer_call(layer, ops, main_path)(None if main_path == "triton" else tm)

    records = []
    for name, call in baseline_calls.items():
        try:
            base_us, base_how = (interleaved[name] if name in interleaved else
                                 timer(call, capturable=False, samples=samples.get(name)))
            err = max_relative_error(out, call())
        except RuntimeError as e:
            print(f"  baseline {name} failed: {str(e).splitlines()[0]}")
            continue
        records.append(dict(op="moe_layer", **common, path=main_path, median_us=us, timing=how,
                            baseline=name, baseline_median_us=base_us,
                            baseline_timing=base_how, max_rel_err_vs_baseline=err))
    for path in args.paths[1:]:
        ptm, pus, phow = timed[path]
        pout = layer_call(layer, ops, path)(ptm)
        records.append(dict(op="moe_layer", **common, path=main_path, median_us=us, timing=how,
                            baseline=path_label(path), baseline_median_us=pus,
                            baseline_timing=phow, baseline_tm=ptm,
                            max_rel_err_vs_baseline=max_relative_error(out, pout)))
    if not records:
        records.append(dict(op="moe_layer", **common, path=main_path, median_us=us, timing=how,
                            baseline=None, baseline_median_us=None))
    for r in records:
        r["weight_bytes"] = layer.weight_bytes
        if args.device.type == "cuda":
            r["weight_read_floor_us"] = layer.weight_bytes / (args.hbm_tbps * 1e12) * 1e6
            r["matrix_floor_us"] = T * K * 6 * H * I / (args.matrix_tflops * 1e12) * 1e6
            r["floor_over_layer"] = r["weight_read_floor_us"] / us  # 1.0 = at the floor

    for path in args.paths:
        ptm, pus, _ = timed[path]
        stages = argon_stages(layer, ops, path, ptm, topk="auto" if path == "triton" else "torch")
        del stages["layer"]  # timed above, at each tile_m
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
