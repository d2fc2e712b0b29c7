"""The CPU quantized GEMM (moe_qmm) against "dequantize to float, then moe_mm", in one run: time
(median) and the extra memory each takes (peak RSS above the RSS before the call).

    python bench/bench_quant_cpu.py --memory             # the issue's table (a few minutes)
    python bench/bench_quant_cpu.py --formats Q4_K --T 512 --repeats 3 --json out.json
    python bench/bench_quant_cpu.py --formats all --threads 2 --json bench/results/cpu_quant_q8.json

Without --memory (the q8 table), each (format, T, GEMM) runs in one subprocess whose methods
(moe_qmm with activation_quant "none" and "q8", and the baseline) are timed in interleaved
rounds, each round calling each method once: a loaded machine then slows all of them alike.
Those records also carry the CPU model, the torch_argon CPU variant that ran (csrc/cpu/cpu_isa.h)
and the load average before and after.

Shape: E experts, top-K routing of T tokens (testing.routing's uniform one: distinct experts per
token), the CPU layer's tile_m (1); per format, both expert GEMMs of a layer: gate_up (w_q
[E, 2I, H] on rows of H values) and down (w_q [E, H, I] on rows of I values). The activations are fp32 unless
--dtype says otherwise; the baseline then dequantizes to fp32 (torch_argon.dequantize, our CPU
kernel) and runs torch_argon.moe_mm in fp32 (with xs widened to fp32 and the result rounded back
to --dtype: the fast way to run it; torch's CPU bf16 matmul is far slower).

Each (format, T, GEMM, method) runs in a fresh subprocess, so one's memory cannot hide in
another's: it builds its inputs (seeded: both methods see the same ones), resets the process's
peak RSS to its current RSS (/proc/self/clear_refs; where that is refused, the peak so far is
the reference), runs the method once, and reads resource.getrusage's ru_maxrss: the method's
peak memory is that peak minus the RSS before the call (the output counts for both). Then it
times warm calls (median of --repeats): wall clock, and CPU time (user + system of all the
process's threads, from getrusage), which a loaded machine distorts less (a descheduled thread
adds wall time, not CPU time; threads spinning at a barrier add CPU time). The methods alternate
per case. Read the ratios measured in the same run. The last lines printed are the table;
--json writes the records (each with a `quant` field).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METHODS = ("moe_qmm", "dequantize+moe_mm")
ROUND_METHODS = ("moe_qmm", "moe_qmm_q8", "dequantize+moe_mm")


def worker(args):
    """One measurement in this process; prints one JSON line."""
    import ctypes
    import resource
    import time

    import torch

    sys.path.insert(0, ROOT)
    import torch_argon
    from torch_argon.quant import random_quantized
    from torch_argon.testing.routing import routing

    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    E, K, T = args.E, args.K, args.T
    N, n_in = (2 * args.I, args.H) if args.gemm == "gate_up" else (args.H, args.I)
    ids, weights = routing(T, E, K, seed=args.seed)
    plan = torch_argon.moe_plan(ids, weights, E, 1)
    g = torch.Generator().manual_seed(args.seed)
    x = (torch.randn(T, n_in, generator=g)).to(dtype)
    xs = torch_argon.moe_gather(x, plan)
    w_q = random_quantized(args.format, N, n_in, leading=(E,), std=n_in ** -0.5, generator=g)
    del x

    calls = {
        "moe_qmm": lambda: torch_argon.moe_qmm(xs, w_q, args.format, n_in, plan),
        "moe_qmm_q8": lambda: torch_argon.moe_qmm(xs, w_q, args.format, n_in, plan,
                                                  activation_quant="q8"),
        "dequantize+moe_mm": lambda: torch_argon.moe_mm(
            xs if dtype == torch.float32 else xs.float(),
            torch_argon.dequantize(w_q, args.format, n_in), plan).to(dtype),
    }
    if args.method == "rounds":
        return rounds(args, calls, int(plan.sorted_token.shape[0]))
    call = calls[args.method]

    def rss_kb():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the peak RSS (VmHWM, ru_maxrss) back to the current RSS
        reset = True
    except OSError:
        reset = False
    before = rss_kb()
    out = call()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out_mb = out.numel() * out.element_size() / 2**20
    del out
    def cpu_s():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    times, cpu_times = [], []
    for _ in range(args.repeats):
        c0, t0 = cpu_s(), time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
        cpu_times.append(cpu_s() - c0)
    print(json.dumps({"median_s": statistics.median(times), "times_s": times,
                      "cpu_median_s": statistics.median(cpu_times),
                      "peak_extra_mb": (peak - before) / 1024, "rss_before_mb": before / 1024,
                      "out_mb": out_mb,
                      "peak_reset": reset, "rows": int(plan.sorted_token.shape[0])}))


def write_json(path, records):
    if path:
        with open(path, "w") as f:
            json.dump(records, f, indent=1)


def rounds(args, calls, rows):
    """The methods of ROUND_METHODS timed in interleaved rounds (one warm-up call each first);
    prints one JSON line: per method the median wall and CPU seconds."""
    import resource
    import time

    def cpu_s():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    for m in ROUND_METHODS:
        calls[m]()
    times = {m: [] for m in ROUND_METHODS}
    cpu_times = {m: [] for m in ROUND_METHODS}
    for _ in range(args.repeats):
        for m in ROUND_METHODS:
            c0, t0 = cpu_s(), time.perf_counter()
            calls[m]()
            times[m].append(time.perf_counter() - t0)
            cpu_times[m].append(cpu_s() - c0)
    print(json.dumps({"rows": rows, **{m: {"median_s": statistics.median(times[m]),
                                            "cpu_median_s": statistics.median(cpu_times[m])}
                                        for m in ROUND_METHODS}}))


def machine():
    """The CPU model, torch_argon's CPU variant, and torch's view of the CPU."""
    import torch

    import torch_argon  # noqa: F401 (loads the argon_cpu ops)
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return dict(cpu_model=model, argon_cpu_isa=torch.ops.argon_cpu.isa(),
                torch_cpu_capability=torch.backends.cpu.get_cpu_capability())


def rounds_main(args, formats):
    """The q8 table: moe_qmm "none" and "q8" against the baseline in interleaved rounds."""
    sys.path.insert(0, ROOT)
    info = machine()
    records = []
    for fmt in formats:
        for T in args.T:
            for gemm in args.gemms:
                load0 = os.getloadavg()[0]
                got = run_worker(args, format=fmt, T=T, gemm=gemm, method="rounds")
                q, q8, b = (got[m] for m in ROUND_METHODS)
                rec = dict(op="moe_qmm", backend="cpu", quant=fmt, gemm=gemm, T=T, E=args.E,
                           K=args.K, H=args.H, I=args.I, tm=1, dist="uniform", dtype=args.dtype,
                           rows=got["rows"], threads=args.threads or None, **info,
                           median_us=round(q["median_s"] * 1e6, 1),
                           q8_median_us=round(q8["median_s"] * 1e6, 1),
                           baseline="dequantize_then_moe_mm",
                           baseline_median_us=round(b["median_s"] * 1e6, 1),
                           speedup=round(b["median_s"] / q["median_s"], 3),
                           q8_speedup=round(b["median_s"] / q8["median_s"], 3),
                           cpu_speedup=round(b["cpu_median_s"] / q["cpu_median_s"], 3),
                           q8_cpu_speedup=round(b["cpu_median_s"] / q8["cpu_median_s"], 3),
                           repeats=args.repeats,
                           load_average=[round(load0, 1), round(os.getloadavg()[0], 1)])
                records.append(rec)
                print(json.dumps(rec), flush=True)
    write_json(args.json, records)
    print()
    print(f"moe_qmm (\"none\" and \"q8\") vs dequantize+moe_mm on the CPU ({args.dtype} "
          f"activations, E={args.E} H={args.H} I={args.I} K={args.K}, tile_m 1, threads: "
          f"{args.threads or 'default'}; {info['cpu_model']}, variant {info['argon_cpu_isa']}; "
          f"medians of {args.repeats} interleaved rounds, wall time)")
    print("| format | T | GEMM | none ms | q8 ms | base ms | none speedup | q8 speedup | "
          "q8 CPU-time speedup | load |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---|")
    for r in records:
        print(f"| {r['quant']} | {r['T']} | {r['gemm']} | {r['median_us'] / 1e3:.1f} | "
              f"{r['q8_median_us'] / 1e3:.1f} | {r['baseline_median_us'] / 1e3:.1f} | "
              f"{r['speedup']:.2f}x | {r['q8_speedup']:.2f}x | {r['q8_cpu_speedup']:.2f}x | "
              f"{r['load_average'][0]}-{r['load_average'][1]} |")


def run_worker(args, **overrides):
    argv = [sys.executable, os.path.abspath(__file__), "--worker"]
    for key, value in {**vars(args), **overrides}.items():
        if key in ("worker", "json", "formats", "gemms", "T", "memory"):
            continue
        if value is None:
            continue
        argv += [f"--{key.replace('_', '-')}", str(value)]
    argv += ["--T", str(overrides["T"])]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"worker failed: {' '.join(argv)}\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--formats", nargs="+", default=["Q4_K", "Q8_0", "IQ4_XS", "IQ2_XS"],
                   help="GGUF formats, or 'all' (every format moe_qmm reads)")
    p.add_argument("--memory", action="store_true",
                   help="the memory table: each method in its own subprocess (no q8 column)")
    p.add_argument("--T", nargs="+", type=int, default=[512, 2048])
    p.add_argument("--gemms", nargs="+", default=["gate_up", "down"], choices=["gate_up", "down"])
    p.add_argument("--E", type=int, default=64)
    p.add_argument("--H", type=int, default=1024)
    p.add_argument("--I", type=int, default=512)
    p.add_argument("--K", type=int, default=8)
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the records here")
    # internal: one measurement
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--format", help=argparse.SUPPRESS)
    p.add_argument("--gemm", help=argparse.SUPPRESS)
    p.add_argument("--method", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        args.T = args.T[0]
        return worker(args)

    formats = args.formats
    if formats == ["all"]:
        sys.path.insert(0, ROOT)
        from torch_argon.quant import FORMATS
        formats = [n for n, f in FORMATS.items() if not f.is_float]
    if not args.memory:
        return rounds_main(args, formats)
    records = []
    for fmt in formats:
        for T in args.T:
            for gemm in args.gemms:
                got = {m: run_worker(args, format=fmt, T=T, gemm=gemm, method=m) for m in METHODS}
                q, b = got["moe_qmm"], got["dequantize+moe_mm"]
                rec = dict(op="moe_qmm", backend="cpu", quant=fmt, gemm=gemm, T=T, E=args.E,
                           K=args.K, H=args.H, I=args.I, tm=1, dist="uniform", dtype=args.dtype,
                           rows=q["rows"], median_us=round(q["median_s"] * 1e6, 1),
                           baseline="dequantize_then_moe_mm",
                           baseline_median_us=round(b["median_s"] * 1e6, 1),
                           speedup=round(b["median_s"] / q["median_s"], 3),
                           cpu_median_us=round(q["cpu_median_s"] * 1e6, 1),
                           baseline_cpu_median_us=round(b["cpu_median_s"] * 1e6, 1),
                           cpu_speedup=round(b["cpu_median_s"] / q["cpu_median_s"], 3),
                           threads=args.threads or None,
                           peak_extra_mb=round(q["peak_extra_mb"], 1),
                           baseline_peak_extra_mb=round(b["peak_extra_mb"], 1),
                           memory_ratio=round(q["peak_extra_mb"] / max(b["peak_extra_mb"], 1e-9),
                                              3),
                           out_mb=round(q["out_mb"], 1),
                           workspace_mb=round(q["peak_extra_mb"] - q["out_mb"], 1),
                           baseline_workspace_mb=round(b["peak_extra_mb"] - b["out_mb"], 1),
                           peak_reset=q["peak_reset"] and b["peak_reset"],
                           repeats=args.repeats)
                records.append(rec)
                print(json.dumps(rec), flush=True)
    write_json(args.json, records)
    print()
    threads = args.threads or "torch's default"
    print(f"moe_qmm vs dequantize+moe_mm on the CPU ({args.dtype} activations, E={args.E} "
          f"H={args.H} I={args.I} K={args.K}, tile_m 1, threads: {threads}; medians of "
          f"{args.repeats}: wall time, and CPU time (user + system, all threads); memory: peak "
          "RSS above the RSS before the call, output included; workspace: without the output)")
    print("| format | T | GEMM | qmm ms | base ms | speedup | qmm CPU ms | base CPU ms | "
          "CPU speedup | qmm MB | base MB | memory ratio | qmm workspace MB | "
          "base workspace MB |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in records:
        print(f"| {r['quant']} | {r['T']} | {r['gemm']} | {r['median_us'] / 1e3:.0f} | "
              f"{r['baseline_median_us'] / 1e3:.0f} | {r['speedup']:.2f}x | "
              f"{r['cpu_median_us'] / 1e3:.0f} | {r['baseline_cpu_median_us'] / 1e3:.0f} | "
              f"{r['cpu_speedup']:.2f}x | {r['peak_extra_mb']:.1f} | "
              f"{r['baseline_peak_extra_mb']:.1f} | {r['memory_ratio']:.2f} | "
              f"{r['workspace_mb']:.1f} | {r['baseline_workspace_mb']:.1f} |")


if __name__ == "__main__":
    main()
