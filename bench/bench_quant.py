"""The quantized experts on CUDA (torch_argon/triton_ops: the Triton GEMMs with the GGUF dequant
in registers): the issue's benchmark. Every format's correctness on the GPU is the CUDA tests'
(tests/test_quant_triton.py: dequantize bit for bit, the GEMMs within tolerance), which
bench/h200_quant.sh runs before this script.

    python bench/bench_quant.py --json $OUT/h200_quant.json            # the H200
    python bench/bench_quant.py --quick                                 # smaller sweep
    python bench/bench_quant.py --sweep                                 # + Q4_K block shapes
    python bench/bench_quant.py --gpuq --json $OUT/h200_quant_gpuq.json # the gpuq CUDA C++
                                 kernels, every format and both activation modes against the
                                 bf16 GEMMs (bench/bench_quant_gpuq.py)
    TRITON_INTERPRET=1 python bench/bench_quant.py --tiny --device cpu --dtype fp16 \
        --json /tmp/q.json                                              # the logic, no GPU

Sections:
- layer: the experts of a layer (plan, gate/up + SwiGLU, down, combine; the router is not
  timed) with bf16 activations, configs E=512 K=10 H=2048 I=512 and E=128 K=8 H=2048 I=768, T =
  128, 512, 2048, 8192, uniform routing (top-K of random scores), three ways in the same run:
    quant        the triton_quantized experts on the quantized weights (Q4_K; rows for Q8_0,
                 IQ4_XS, IQ2_XS too)
    bf16         torch_argon.moe_experts on dense bf16 stacks of the same shapes (the Triton
                 path), the baseline
    dequant+bf16 dequantize both tensors to bf16 (our Triton dequantize kernel), then the bf16
                 path: what a library does for prefill today
  GPU time per call under CUDA graph replay (testing.timing.graph_us, median), after
  testing.timing.heat(); the routing is testing.routing's uniform one. The quant
  output is compared with the dequant+bf16 output of the same weights (rel err printed).
- sweep (--sweep): QMMConfig candidates for Q4_K's two GEMMs alone at T=128, 2048 and 8192
  (E=512; BLOCK_M 32 against 64 at the large T), to set triton_ops/quant_configs.py by. Runs
  in what is left of the time budget.

Compile time: every kernel variant the run needs is compiled first in parallel worker
processes (the layer's paths run once on uninitialized weights, which only compiles them), so
the timing in the main process finds Triton's cache warm.

Records (JSON list): {"op": "moe_experts", "backend": "cuda", "quant": "Q4_K", "T", "E", "K",
"H", "I", "tm", "dist", "median_us", "baseline": "moe_experts_bf16", "baseline_median_us",
"ratio_to_bf16", "dequant_bf16_us", "speedup_vs_dequant_bf16", "target_ratio", ...}; sweep
records {"op": "quant_sweep", ...}.
"""
import argparse
import concurrent.futures
import json
import multiprocessing
import os
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if os.environ.get("TRITON_INTERPRET") == "1":  # --tiny on the CPU (before the kernels import)
    from torch_argon.testing.triton_interpreter import enable
    enable()
from torch_argon.testing.layers import relative_error  # noqa: E402
from torch_argon.testing.routing import routing  # noqa: E402
from torch_argon.testing.timing import graph_us  # noqa: E402

CONFIGS = {"E512": dict(E=512, K=10, H=2048, I=512), "E128": dict(E=128, K=8, H=2048, I=768)}
T_LIST = (128, 512, 2048, 8192)
# --tiny: the same run at toy sizes on any device (the CPU through the Triton interpreter:
# TRITON_INTERPRET=1), to test this script's logic without a GPU. Timings are wall clock there.
TINY_CONFIGS = {"E512": dict(E=4, K=2, H=256, I=256), "E128": dict(E=2, K=1, H=256, I=256)}
TINY_T = (16, 24)
DEVICE = "cuda"
DTYPE = torch.bfloat16
MAIN_FORMAT = "Q4_K"
EXTRA_FORMATS = ("Q8_0", "IQ4_XS", "IQ2_XS")
# The targets: quant time / bf16 time at most this, per T (<= T: the first that fits).
TARGET_RATIO = ((128, 0.45), (2048, 0.8), (8192, 1.1))
TARGET_SPEEDUP_VS_DEQUANT = 2.0  # at T <= 2048


def target_ratio(T):
    for t, r in TARGET_RATIO:
        if T <= t:
            return r
    return TARGET_RATIO[-1][1]


# ---- weights and problems ----------------------------------------------------------------------

def random_quantized_gpu(name, E, N, n_in, seed, empty=False):
    """uint8 [E, N, row_bytes] of `name`: blocks drawn on the GPU from a pool of 8192 blocks made
    by torch_argon.quant.random_quantized (finite, std 0.02); empty: uninitialized (compiles)."""
    from torch_argon.quant import FORMATS, random_quantized, row_bytes
    fmt = FORMATS[name]
    rb = row_bytes(fmt, n_in)
    if empty:
        return torch.empty(E, N, rb, dtype=torch.uint8, device=DEVICE)
    g = torch.Generator().manual_seed(seed)
    pool = random_quantized(name, 8192, fmt.block_elems, generator=g).to(DEVICE)  # [P, bb]
    n_blocks = E * N * (n_in // fmt.block_elems)
    gd = torch.Generator(device=DEVICE).manual_seed(seed)
    idx = torch.randint(0, pool.shape[0], (n_blocks,), device=DEVICE, generator=gd)
    return pool[idx].view(E, N, rb)


def quant_experts(name, cfg, seed, empty=False):
    from torch_argon.quant import QuantizedExperts, QuantizedWeight
    E, H, I = cfg["E"], cfg["H"], cfg["I"]
    gu = random_quantized_gpu(name, E, 2 * I, H, seed, empty=empty)
    dn = random_quantized_gpu(name, E, H, I, seed + 1, empty=empty)
    return QuantizedExperts(down=QuantizedWeight(dn, name, I),
                            gate_up=QuantizedWeight(gu, name, H))


def dense_experts(cfg, seed, empty=False):
    E, H, I = cfg["E"], cfg["H"], cfg["I"]
    if empty:
        return (torch.empty(E, 2 * I, H, dtype=DTYPE, device=DEVICE),
                torch.empty(E, H, I, dtype=DTYPE, device=DEVICE))
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    return ((torch.randn(E, 2 * I, H, device=DEVICE, generator=g) * 0.02).to(DTYPE),
            (torch.randn(E, H, I, device=DEVICE, generator=g) * 0.02).to(DTYPE))


def paths(x, ids, w, q, dense, T, cfg):
    """The three ways to run the experts, as argument-free functions."""
    import torch_argon
    from torch_argon import triton_ops
    from torch_argon.experts import run_implementation
    from torch_argon.triton_ops.quant_ops import dequantize_triton
    ops = torch_argon.argon_ops
    tm = triton_ops.quant_layer_tile_m(T * cfg["K"], cfg["E"])

    def quant():
        return run_implementation("triton_quantized", x, ids, w, q, tile_m=tm, ops=ops)

    def bf16():
        return torch_argon.moe_experts(x, ids, w, dense)

    def dequant_bf16():
        gu = dequantize_triton(q.gate_up.data, q.gate_up.qtype, q.gate_up.n_in, x.dtype)
        dn = dequantize_triton(q.down.data, q.down.qtype, q.down.n_in, x.dtype)
        return torch_argon.moe_experts(x, ids, w, (gu, dn))

    return {"quant": quant, "bf16": bf16, "dequant+bf16": dequant_bf16}, tm


# ---- worker tasks (separate processes: compile in parallel) -------------------------------------

def use_settings(settings):
    global DEVICE, DTYPE, CONFIGS
    DEVICE, DTYPE, CONFIGS = settings


def task_compile(settings, kind, cfg_name, name, Ts):
    """Runs one path once per T on uninitialized weights: compiles its kernels (the values are
    garbage, never read). Returns (label, seconds, error or "")."""
    use_settings(settings)
    t0 = time.time()
    cfg = CONFIGS[cfg_name]
    try:
        x = torch.randn(max(Ts), cfg["H"], device=DEVICE).to(DTYPE)
        q = quant_experts(name, cfg, 0, empty=True) if name else None
        dense = dense_experts(cfg, 0, empty=True) if kind == "bf16" else None
        for T in Ts:
            ids, w = routing(T, cfg["E"], cfg["K"], device=DEVICE)
            fns, _ = paths(x[:T], ids, w, q, dense, T, cfg)
            fns[kind]()
        synchronize()
        err = ""
    except Exception as e:  # noqa: BLE001
        err = f"{type(e).__name__}: {e}"
    return f"{kind} {cfg_name} {name or ''} T={list(Ts)}", time.time() - t0, err


def run_pool(tasks, workers):
    """Runs (fn, args) tasks in spawned worker processes; yields their results as they finish."""
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = {pool.submit(fn, *args): (fn.__name__, args) for fn, args in tasks}
        for fut in concurrent.futures.as_completed(futures):
            try:
                yield fut.result()
            except Exception as e:  # noqa: BLE001 (a worker died: say which)
                yield ("worker", futures[fut], f"{type(e).__name__}: {e}")


# ---- timing ------------------------------------------------------------------------------------

def synchronize():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def heat(ms=60):
    if DEVICE == "cuda":
        from torch_argon.testing.timing import heat as heat_cuda
        heat_cuda(ms)


def timed_us(fn):
    """Graph replay on CUDA (testing.timing.graph_us); elsewhere (--tiny) the wall clock of one
    call after one."""
    return graph_us(fn, DEVICE, samples=10 if DEVICE == "cuda" else 1)


def bench_layer(cfg_name, name, Ts, records, with_baselines):
    cfg = CONFIGS[cfg_name]
    E, K, H, I = cfg["E"], cfg["K"], cfg["H"], cfg["I"]
    t0 = time.time()
    q = quant_experts(name, cfg, seed=1)
    dense = dense_experts(cfg, seed=2) if with_baselines else None
    gen_s = time.time() - t0
    x_all = (torch.randn(max(Ts), H, device=DEVICE) * 0.5).to(DTYPE)
    for T in Ts:
        x = x_all[:T]
        ids, w = routing(T, E, K, seed=T, device=DEVICE)
        fns, tm = paths(x, ids, w, q, dense, T, cfg)
        err = relative_error(fns["quant"](), fns["dequant+bf16"]())
        heat()
        us = {"quant": timed_us(fns["quant"])}
        if with_baselines:
            for k in ("bf16", "dequant+bf16"):
                heat(30)
                us[k] = timed_us(fns[k])
        qbytes = q.gate_up.data.numel() + q.down.data.numel()
        rec = dict(op="moe_experts", backend=DEVICE, quant=name, config=cfg_name, T=T, E=E, K=K,
                   H=H, I=I, tm=tm, dist="uniform", dtype=str(DTYPE).replace("torch.", ""),
                   path="triton_quant", median_us=round(us["quant"], 2),
                   timing="graph" if DEVICE == "cuda" else "wall",
                   rel_err_vs_dequant_bf16=round(err, 5), weight_bytes=qbytes,
                   weight_tb_per_s=round(qbytes / us["quant"] / 1e6, 3))
        if with_baselines:
            rec.update(baseline="moe_experts_bf16", baseline_median_us=round(us["bf16"], 2),
                       dequant_bf16_us=round(us["dequant+bf16"], 2),
                       ratio_to_bf16=round(us["quant"] / us["bf16"], 3),
                       speedup_vs_dequant_bf16=round(us["dequant+bf16"] / us["quant"], 3),
                       target_ratio=target_ratio(T))
        records.append(rec)
        line = f"{cfg_name} {name:7s} T={T:5d} tm={tm:3d} quant {us['quant']:9.1f} us"
        if with_baselines:
            line += (f"  bf16 {us['bf16']:9.1f}  dequant+bf16 {us['dequant+bf16']:9.1f}  "
                     f"ratio {rec['ratio_to_bf16']:.3f} (target <= {target_ratio(T)})  "
                     f"vs dequant {rec['speedup_vs_dequant_bf16']:.2f}x")
        print(line + f"  rel err {err:.1e}", flush=True)
    del q, dense
    torch.cuda.empty_cache()
    return gen_s


# (gemm, block_n, num_warps, num_stages, block_m or None for the table's) per sweep T.
SWEEP_SMALL = [("gate_up", 64, 4, 2, None), ("gate_up", 64, 4, 3, None),
               ("gate_up", 128, 8, 2, None), ("down", 128, 4, 2, None),
               ("down", 128, 4, 3, None), ("down", 256, 8, 2, None)]
SWEEP_LARGE = [(g, bn, w, st, bm) for bm in (32, 64)
               for g, bn, w, st in (("gate_up", 64, 4, 3), ("gate_up", 64, 4, 2),
                                    ("gate_up", 128, 8, 3), ("down", 128, 4, 2),
                                    ("down", 128, 4, 3), ("down", 256, 8, 3))]


def sweep_plan():
    """[(T, candidates)]: the small-T and large-T candidates at the benchmark's sizes."""
    if DEVICE != "cuda":
        return [(TINY_T[0], SWEEP_SMALL[:2]), (TINY_T[-1], SWEEP_LARGE[:2])]
    return [(128, SWEEP_SMALL), (2048, SWEEP_LARGE), (8192, SWEEP_LARGE)]


class SweepProblem:
    """Q4_K's gate/up (SwiGLU, gathered) and down GEMMs of the E512 config at one T, alone."""

    def __init__(self, T, empty):
        import torch_argon
        from torch_argon.quant import FORMATS
        from torch_argon.triton_ops import quant_configs
        from torch_argon.triton_ops.quant_blocks import device_tables
        cfg = CONFIGS["E512"]
        self.E, K, self.H, self.I = cfg["E"], cfg["K"], cfg["H"], cfg["I"]
        self.q = quant_experts(MAIN_FORMAT, cfg, seed=3, empty=empty)
        self.fmt = FORMATS[MAIN_FORMAT]
        self.tables = device_tables(DEVICE)
        self.tm = quant_configs.quant_layer_tile_m(T * K, self.E)
        ids, w = routing(T, self.E, K, seed=T, device=DEVICE)
        self.plan = torch_argon.moe_plan(ids, w, self.E, self.tm)
        R = self.plan.sorted_token.shape[0]
        self.x = torch.randn(T, self.H, device=DEVICE).to(DTYPE)
        self.h = (torch.randn(R, self.I, device=DEVICE) * 0.1).to(DTYPE)
        self.out_gu = torch.empty(R, self.I, dtype=DTYPE, device=DEVICE)
        self.out_d = torch.empty(R, self.H, dtype=DTYPE, device=DEVICE)

    def fn(self, gemm, bn, warps, stages, bm):
        from torch_argon.triton_ops import quant_ops
        from torch_argon.triton_ops.quant_configs import QMMConfig
        c = QMMConfig(block_n=bn, step_blocks=4, num_warps=warps, num_stages=stages)
        p = self.plan
        if gemm == "gate_up":
            return lambda: quant_ops.launch_moe_qmm(
                self.x, self.q.gate_up.data, self.fmt, self.H, self.tables, p.tile_expert,
                p.meta, self.tm, p.sorted_token, self.out_gu, swiglu=True, zero_unused=False,
                config=c, block_m=bm)
        return lambda: quant_ops.launch_moe_qmm(
            self.h, self.q.down.data, self.fmt, self.I, self.tables, p.tile_expert, p.meta,
            self.tm, None, self.out_d, swiglu=False, zero_unused=False, config=c, block_m=bm)


def task_compile_sweep(settings, T, candidate):
    """Compiles one sweep candidate (one launch on uninitialized weights)."""
    use_settings(settings)
    t0 = time.time()
    err = ""
    try:
        SweepProblem(T, empty=True).fn(*candidate)()
        synchronize()
    except Exception as e:  # noqa: BLE001 (timed, and reported, in the main process)
        err = f"{type(e).__name__}: {str(e)[:200]}"
    return f"sweep T={T} {candidate}", time.time() - t0, err


def bench_sweep(records, budget_s):
    """Times each sweep candidate alone (CUDA graph replay)."""
    t_end = time.time() + budget_s
    for T, candidates in sweep_plan():
        prob = SweepProblem(T, empty=False)
        for gemm, bn, warps, stages, bm in candidates:
            if time.time() > t_end:
                print("sweep: out of time budget, stopping")
                return
            label = (f"sweep T={T:5d} tm={prob.tm:3d} {gemm:7s} block_n={bn:3d} warps={warps} "
                     f"stages={stages} block_m={bm or 'table'}")
            try:
                us = timed_us(prob.fn(gemm, bn, warps, stages, bm))
            except Exception as e:  # noqa: BLE001 (a config that does not compile or run)
                print(f"{label}: {type(e).__name__}: {str(e)[:200]}")
                continue
            records.append(dict(op="quant_sweep", backend=DEVICE, quant=MAIN_FORMAT, T=T,
                                E=prob.E, K=CONFIGS["E512"]["K"], tm=prob.tm, gemm=gemm,
                                block_n=bn, num_warps=warps, num_stages=stages,
                                block_m=bm, median_us=round(us, 2)))
            print(f"{label}: {us:8.1f} us", flush=True)
        del prob
        if DEVICE == "cuda":
            torch.cuda.empty_cache()


# ---- report ----------------------------------------------------------------------------------

def table(records, skipped, errors):
    rows = [r for r in records if r["op"] == "moe_experts"]
    print(f"\n=== quantized experts on {DEVICE} ({str(DTYPE).replace('torch.', '')} activations; "
          f"times in us, {'CUDA graph' if DEVICE == 'cuda' else 'wall-clock'} medians) ===")
    print(f"{'config':6s} {'quant':7s} {'T':>5s} {'tm':>3s} {'quant':>9s} {'bf16':>9s} "
          f"{'deq+bf16':>9s} {'q/bf16':>7s} {'target':>6s} {'deq/q':>6s} {'ok':>3s} {'relerr':>7s}")
    for r in rows:
        if "baseline_median_us" in r:
            ok_ratio = r["ratio_to_bf16"] <= r["target_ratio"]
            ok_deq = r["T"] > 2048 or r["speedup_vs_dequant_bf16"] >= TARGET_SPEEDUP_VS_DEQUANT
            print(f"{r['config']:6s} {r['quant']:7s} {r['T']:5d} {r['tm']:3d} "
                  f"{r['median_us']:9.1f} {r['baseline_median_us']:9.1f} "
                  f"{r['dequant_bf16_us']:9.1f} {r['ratio_to_bf16']:7.3f} "
                  f"{r['target_ratio']:6.2f} {r['speedup_vs_dequant_bf16']:6.2f} "
                  f"{'yes' if ok_ratio and ok_deq else 'NO':>3s} "
                  f"{r['rel_err_vs_dequant_bf16']:7.1e}")
        else:
            print(f"{r['config']:6s} {r['quant']:7s} {r['T']:5d} {r['tm']:3d} "
                  f"{r['median_us']:9.1f} {'':>9s} {'':>9s} {'':>7s} {'':>6s} {'':>6s} {'':>3s} "
                  f"{r['rel_err_vs_dequant_bf16']:7.1e}")
    print("targets: quant/bf16 <= 0.45 at T=128, 0.8 at 2048, 1.1 at 8192; "
          "dequant+bf16 / quant >= 2 at T <= 2048")
    if skipped:
        print("skipped (time budget): " + "; ".join(skipped))
    if errors:
        print(f"ERRORS ({len(errors)}): " + "; ".join(e[:300] for e in errors))


def main():
    if "--gpuq" in sys.argv[1:]:  # the gpuq kernels' table: its own script and arguments
        import bench_quant_gpuq
        sys.exit(bench_quant_gpuq.main([a for a in sys.argv[1:] if a != "--gpuq"]))
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="bench/results/h200_quant.json")
    ap.add_argument("--quick", action="store_true", help="T = 128 and 2048 only")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1))
    ap.add_argument("--budget-s", type=float, default=390.0,
                    help="skip the remaining layer rows past this many seconds")
    ap.add_argument("--tiny", action="store_true", help="toy sizes on --device (logic test)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    args = ap.parse_args()
    start = time.time()
    settings = (args.device, {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype],
                TINY_CONFIGS if args.tiny else CONFIGS)
    use_settings(settings)
    if DEVICE == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_quant.py: no CUDA device")
    where = torch.cuda.get_device_name() if DEVICE == "cuda" else DEVICE
    print(f"device: {where}, torch {torch.__version__}", flush=True)

    extra_T = TINY_T if args.tiny else (128, 2048) if args.quick else T_LIST
    main_T = TINY_T if args.tiny else (128, 2048) if args.quick else T_LIST
    layer_jobs = [(c, MAIN_FORMAT, main_T, True) for c in CONFIGS]
    layer_jobs += [("E512", f, extra_T, False) for f in EXTRA_FORMATS]

    # 1. compile in parallel
    tasks = []
    for cfg_name, name, Ts, baselines in layer_jobs:
        tasks.append((task_compile, (settings, "quant", cfg_name, name, Ts)))
        if baselines:
            tasks.append((task_compile, (settings, "dequant+bf16", cfg_name, name, Ts)))
            tasks.append((task_compile, (settings, "bf16", cfg_name, None, Ts)))
    if args.sweep:  # T = 8192 compiles the same kernels as 2048
        tasks += [(task_compile_sweep, (settings, T, cand)) for T, cands in sweep_plan()[:2]
                  for cand in cands]
    skipped, errors, records = [], [], []
    print(f"compiling in {args.workers} worker processes ({len(tasks)} tasks)", flush=True)
    for res in run_pool(tasks, args.workers):
        if res[0] == "worker":
            print(f"  worker failed on {res[1]}: {res[2]}", flush=True)
            errors.append(f"{res[1]}: {res[2]}")
            continue
        label, secs, err = res
        print(f"  compiled {label} ({secs:.0f} s){' ERROR ' + err if err else ''}", flush=True)
        if err:
            errors.append(f"{label}: {err}")
    print(f"compile: {time.time() - start:.0f} s", flush=True)

    # 2. the layer benchmark
    try:
        for cfg_name, name, Ts, baselines in layer_jobs:
            if time.time() - start > args.budget_s:
                skipped.append(f"{cfg_name} {name} (time budget)")
                continue
            try:
                gen = bench_layer(cfg_name, name, Ts, records, baselines)
                print(f"  ({cfg_name} {name}: weights made in {gen:.1f} s; "
                      f"{time.time() - start:.0f} s so far)", flush=True)
            except Exception as e:  # noqa: BLE001 (report it, go on with the other rows)
                traceback.print_exc()
                errors.append(f"{cfg_name} {name}: {type(e).__name__}: {e}")
        if args.sweep:
            bench_sweep(records, budget_s=max(0.0, args.budget_s + 60 - (time.time() - start)))
    finally:
        if args.json:
            os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
            with open(args.json, "w") as f:
                json.dump(records, f, indent=1)
            print(f"{len(records)} records written to {args.json}")
        table(records, skipped, errors)
        print(f"total {time.time() - start:.0f} s")
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
