"""Prefill of a GGUF MoE model: torch_argon's from_gguf (experts packed, argon MoE blocks)
against transformers' own GGUF loader (every tensor dequantized), on the same file, same run.

    python bench/bench_gguf.py --device cpu                # bench/results/cpu_gguf.json
    python bench/bench_gguf.py --device cuda               # the H200: $OUT/h200_gguf.json

The file: a synthetic Qwen3-30B-A3B-shaped qwen3moe GGUF written with gguf's writer
(torch_argon.testing.gguf_files): hidden 2048, 128 experts, top-8, expert width 768, 32 query / 4 kv heads of 128,
Q4_K gate/up/down experts (random blocks, finite scales), Q8_0 attention, --layers decoder blocks
(default 2: 713 MB of file; --layers 4 doubles the run's time), a small vocabulary (--vocab, 4096: the real 151936 would add the same
output-head GEMM to both sides).

Each path runs in its own subprocess: load the model (timed), then per T a whole-model forward on
T tokens of one sequence (torch.no_grad, use_cache=False): one warm-up, then the median of
--repeats (CUDA: timed with torch.cuda.synchronize around each forward). Memory: CPU, peak RSS
of load + prefill above the RSS before the load (/proc/self/clear_refs resets the peak); CUDA,
torch.cuda.max_memory_allocated of load + prefill. transformers' path runs in float32 on the CPU
and bfloat16 on CUDA (dequantized on the host by its loader, then moved), argon's the same dtype.
The CUDA run should take about two minutes (estimated from this CPU machine: writing the file
~30 s, transformers' single-threaded host-side dequantization ~50 s; the GPU work is seconds).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATHS = ("argon", "transformers")
SHAPE = dict(E=128, K=8, H=2048, I=768, n_head=32, n_kv_head=4, head_dim=128)


def _status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))


def worker(args):
    """One path in this process: prints one JSON line."""
    import time

    import torch

    sys.path.insert(0, ROOT)
    from torch_argon.integrations.gguf_transformers import from_gguf
    from torch_argon.testing.gguf_files import transformers_dense_load
    # first-use imports of both paths, before the memory baseline
    import transformers.modeling_gguf_pytorch_utils  # noqa: F401
    import transformers.models.qwen3_moe.modeling_qwen3_moe  # noqa: F401

    cuda = args.device == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    if args.threads:
        torch.set_num_threads(args.threads)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    reset = False
    if not cuda:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            reset = True
        except OSError:
            pass
        before = _status("VmRSS:")
    start = time.perf_counter()
    if args.path == "argon":
        model = from_gguf(args.file, device=args.device, dtype=dtype)
    else:
        model = transformers_dense_load(args.file, dtype=dtype).to(args.device)
    sync()
    load_s = time.perf_counter() - start
    g = torch.Generator().manual_seed(0)
    record = {"path": args.path, "load_s": round(load_s, 2), "prefill": {}}
    with torch.no_grad():
        warm = torch.randint(0, args.vocab, (1, 64), generator=g).to(args.device)
        model(warm, use_cache=False)
        for T in args.T:
            ids = torch.randint(0, args.vocab, (1, T), generator=g).to(args.device)
            model(ids, use_cache=False)  # warm-up at this T
            times = []
            for _ in range(args.repeats):
                sync()
                t0 = time.perf_counter()
                model(ids, use_cache=False)
                sync()
                times.append(time.perf_counter() - t0)
            record["prefill"][str(T)] = round(statistics.median(times) * 1e3, 1)
        if args.profile:
            profile_forward(model, ids, cuda)
    if cuda:
        record["peak_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    else:
        record["peak_mb"] = round((_status("VmHWM:") - before) / 2**20, 1)
        record["peak_reset"] = reset
    print(json.dumps(record))


def profile_forward(model, ids, cuda):
    """One more forward (the last T) under torch.profiler: its top operators by self time, on
    the device and on the host, to stderr (where a forward's time goes: kernels or launches)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        model(ids, use_cache=False)
        if cuda:
            torch.cuda.synchronize()
    table = prof.key_averages()
    for key in (["self_cuda_time_total"] if cuda else []) + ["self_cpu_time_total"]:
        print(f"== {key}, T={ids.shape[1]}", file=sys.stderr)
        print(table.table(sort_by=key, row_limit=18, max_name_column_width=60), file=sys.stderr)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--T", type=int, nargs="+", default=[512, 2048])
    p.add_argument("--repeats", type=int, default=None, help="default: 2 on cpu, 5 on cuda")
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--file", help="reuse this GGUF file instead of writing one")
    p.add_argument("--json", help="default: bench/results/cpu_gguf.json on cpu, "
                                  "$OUT/h200_gguf.json on cuda")
    p.add_argument("--note", default="", help="recorded with the results (e.g. machine load)")
    p.add_argument("--profile", action="store_true",
                   help="after the timing, each path's top operators of one forward at the last "
                        "T (torch.profiler: device and host self time)")
    p.add_argument("--worker", choices=PATHS, dest="path")
    args = p.parse_args()
    cuda = args.device == "cuda"
    args.repeats = args.repeats or (5 if cuda else 2)
    if args.path:
        return worker(args)

    with tempfile.TemporaryDirectory() as tmp:
        if args.file is None:
            sys.path.insert(0, ROOT)
            from torch_argon.testing.gguf_files import write_model_file
            args.file = os.path.join(tmp, "qwen3moe-30b-a3b-shaped.gguf")
            write_model_file(args.file, "qwen3moe", n_blocks=args.layers, vocab=args.vocab,
                             expert_formats=("Q4_K", "Q4_K", "Q4_K"), **SHAPE)
        file_mb = os.path.getsize(args.file) / 2**20
        results = {}
        for path in PATHS:
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", path,
                   "--file", args.file, "--device", args.device, "--layers", str(args.layers),
                   "--repeats", str(args.repeats), "--vocab", str(args.vocab),
                   "--threads", str(args.threads), "--T", *map(str, args.T)] + (
                       ["--profile"] if args.profile else [])
            env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
            out = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if out.returncode:
                sys.exit(f"{path} failed:\n{out.stderr[-4000:]}")
            results[path] = json.loads(out.stdout.strip().splitlines()[-1])
            if args.profile:
                print(f"== {path}\n{out.stderr[-12000:]}", flush=True)
            print(path, results[path], flush=True)

    a, t = results["argon"], results["transformers"]
    records = []
    for T in args.T:
        records.append({
            "bench": "gguf_prefill", "device": args.device, "model": "qwen3moe",
            "layers": args.layers, **SHAPE, "vocab": args.vocab, "quant": "Q4_K",
            "dtype": "bfloat16" if cuda else "float32", "T": T, "repeats": args.repeats,
            "file_mb": round(file_mb, 1),
            "argon_ms": a["prefill"][str(T)], "transformers_ms": t["prefill"][str(T)],
            "speedup": round(t["prefill"][str(T)] / a["prefill"][str(T)], 2),
            "argon_peak_mb": a["peak_mb"], "transformers_peak_mb": t["peak_mb"],
            "memory_ratio": round(a["peak_mb"] / t["peak_mb"], 3),
            "argon_load_s": a["load_s"], "transformers_load_s": t["load_s"],
            "note": args.note,
        })
    out_path = args.json or (os.path.join(ROOT, "bench", "results", "cpu_gguf.json") if not cuda
                             else os.path.join(os.environ.get("OUT", "."), "h200_gguf.json"))
    with open(out_path, "w") as f:
        json.dump(records, f, indent=1)
    print(f"\n| T | argon ms | transformers ms | speedup | argon peak MB | transformers peak MB |"
          f"\n|---|---|---|---|---|---|")
    for r in records:
        print(f"| {r['T']} | {r['argon_ms']} | {r['transformers_ms']} | {r['speedup']}x | "
              f"{r['argon_peak_mb']} | {r['transformers_peak_mb']} |")
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
