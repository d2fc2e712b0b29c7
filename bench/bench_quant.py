"""Quantized experts on CUDA, the issue's table (issue 43): the whole experts path (plan, GEMMs,
combine; CUDA graph replay) of every CUDA quantized implementation and of the layer's choice
among them, against the bf16 experts path on dense stacks of the same shapes in the same run,
with the floors.

    python bench/bench_quant.py --quick            # 5 formats, both configs, every T (< 4 min)
    python bench/bench_quant.py                    # every format, and cuda_quantized's q8 mode
    python bench/bench_quant.py --formats Q4_K,IQ2_XS --configs E128 --T 128,2048
    python bench/bench_quant.py --formats Q4_K --T 2048,8192,16384 \
        --impls cuda_quantized_dequant,cuda_quantized_mixed   # those columns only (mode none)
    python bench/bench_quant.py --formats Q4_K/Q6_K --T 2048,8192 --json /tmp/q4km.json \
        --impls cuda_quantized_dequant,cuda_quantized_mixed   # gate/up Q4_K, down Q6_K
    python bench/bench_quant.py --quick --llamacpp bench/baselines/ggml_bin/test-backend-ops-cuda
                                                   # with llama.cpp's column (below)
    TRITON_INTERPRET=1 python bench/bench_quant.py --tiny --device cpu --json /tmp/q.json
                                                   # the logic at toy sizes on the CPU (the
                                                   # Triton interpreter, the gpuq emulation of a
                                                   # test build; wall-clock times)

Configs: E=512 K=10 H=2048 I=512 and E=128 K=8 H=2048 I=768 (Qwen3-30B-A3B); T = 128, 512,
2048, 8192, 16384; bf16 activations; a --formats entry "A/B" has gate/up in A and down in B
(Q4_K/Q6_K: a "Q4_K_M" file's usual MoE layer; recorded as quant "A/B", no llama.cpp column);
routing: testing.routing's uniform top-K. For each
(config, format, T), each implementation runs through torch_argon.experts.run_implementation:
  cuda_quantized          gpuq's GEMMs on the GGUF bytes (mode "none"; "q8" too without --quick)
  cuda_quantized_tiled    the tile-decode GEMM: each weight decoded once per 64-128-row tile
  cuda_quantized_dequant  the experts decoded to bf16 once per call, then the dense GEMMs
  triton_quantized        the Triton GEMMs dequantizing tiles in registers
  cuda_quantized_mixed    (--impls only: by name, Hopper) the mixed-input GEMM converting Q4_K's
                          4-bit codes in registers, a non-Q4_K GEMM decoded (experts/
                          cuda_quantized_mixed.py)
and the layer's choice is what torch_argon.experts.choose picks for the call (its time is its
implementation's row). bf16: the layer's choice (bf16_path: triton_dense, or cuda_hopper_padded
where its tuned table takes it) on dense bf16 stacks of the same shapes. Each output is
compared with the dense path on the bf16-dequantized weights (rel_err, a check on the device).
Floors: the format's weight bytes over the copy bandwidth measured in the run (read + write),
and the FLOPs over BF16_TFLOPS; the larger is the floor.

llama.cpp (--llamacpp PATH, ggml's test-backend-ops built by bench/baselines/build_ggml_cuda.sh):
its MUL_MAT_ID on the same format and shapes, timed in the same run just before ours (gate + up
+ down, f32 activations quantized to q8_1 inside each call; bench/baselines/ggml_mul_mat_id.py
says how), and the same for bf16 weights once per config; each row of ours gets llamacpp_us and
ratio_to_llamacpp (ours / llama.cpp's: below 1, we are faster). With --device cpu, PATH is a
CPU build run on ggml's CPU backend (the --tiny logic test).

Compile first: the Triton kernels every path needs are compiled in worker processes in parallel
(each path run once on uninitialized weights), so the timing finds Triton's cache warm.
Robust: an implementation that raises is recorded as an error row and the run goes on; the
JSON is written after every format (a run cut short keeps what it measured); --budget-s skips
what is left past that many seconds.

Records (JSON list, bench/results/h200_quant.json; bench/make_tables.py makes the README's and
bench/README.md's tables from them):
  {"op": "quant_experts", "config", "E", "K", "H", "I", "T", "quant", "impl", "mode", "tile_m",
   "median_us", "rel_err", "chosen", "choice", "bf16_us", "ratio_to_bf16", "floor_us",
   "ratio_to_floor", "weight_bytes", "weight_tb_per_s", "dtype", "timing", "device"}
  {"op": "quant_experts_error", "config", "T", "quant", "impl", "mode", "error"}
  {"op": "copy_bw", "tb_per_s", "device"}
  {"op": "llamacpp_experts", "config", "E", "K", "H", "I", "T", "quant", "ggml_type", "gate_us",
   "up_us", "down_us", "gate_up_us", "total_us", "ggml_commit", "device", "timing"}
  and, with --llamacpp, "llamacpp_us" and "ratio_to_llamacpp" in each quant_experts record
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
from torch_argon.testing.timing import graph_us, heat  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "baselines"))
import ggml_mul_mat_id  # noqa: E402 (llama.cpp's column, --llamacpp)

CONFIGS = {"E512": dict(E=512, K=10, H=2048, I=512), "E128": dict(E=128, K=8, H=2048, I=768)}
T_LIST = (128, 512, 2048, 8192, 16384)
QUICK_FORMATS = ("Q4_K", "Q8_0", "IQ4_XS", "Q6_K", "IQ2_XS")
# (implementation, activation_quant) in the order of the table's columns
IMPLS = (("cuda_quantized", "none"), ("cuda_quantized_tiled", "none"),
         ("cuda_quantized_dequant", "none"), ("triton_quantized", "none"))
# by name only (--impls): the Q4_K mixed-input Hopper GEMM (bench/quant_mixed_notes.md)
MIXED_IMPL = ("cuda_quantized_mixed", "none")
Q8_IMPL = ("cuda_quantized", "q8")
BF16_TFLOPS = 790.0  # the H200's bf16 rate on random data (bench/README.md's GEMM tables)
# --tiny: the same run at toy sizes on any device (the logic, not the speed)
TINY_CONFIGS = {"E512": dict(E=4, K=2, H=256, I=256), "E128": dict(E=2, K=1, H=256, I=256)}
TINY_T = (16, 40)


class Run:
    """The run's settings: device, activations' dtype, configs (set once, in every process)."""
    device = "cuda"
    dtype = torch.bfloat16
    configs = CONFIGS

    @classmethod
    def set(cls, settings):
        cls.device, cls.dtype, cls.configs = settings

    @classmethod
    def settings(cls):
        return cls.device, cls.dtype, cls.configs


def synchronize():
    if Run.device == "cuda":
        torch.cuda.synchronize()


# ---- weights and calls -------------------------------------------------------------------------

def random_quantized_on_device(name, E, N, n_in, seed, empty=False):
    """uint8 [E, N, row_bytes] of `name`: blocks drawn on the device from a pool of 8192 blocks
    made by torch_argon.quant.random_quantized (finite, std 0.02); empty: uninitialized."""
    from torch_argon.quant import FORMATS, random_quantized, row_bytes
    fmt = FORMATS[name]
    rb = row_bytes(fmt, n_in)
    if empty:
        return torch.empty(E, N, rb, dtype=torch.uint8, device=Run.device)
    g = torch.Generator().manual_seed(seed)
    pool = random_quantized(name, 8192, fmt.block_elems, std=0.02, generator=g).to(Run.device)
    n_blocks = E * N * (n_in // fmt.block_elems)
    gd = torch.Generator(device=Run.device).manual_seed(seed)
    idx = torch.randint(0, pool.shape[0], (n_blocks,), device=Run.device, generator=gd)
    return pool[idx].view(E, N, rb)


def part_formats(name):
    """(gate/up format, down format) of a --formats entry: "Q4_K" both, "Q4_K/Q6_K" gate/up in
    Q4_K and down in Q6_K (a Q4_K_M file's usual layer)."""
    gate_up, _, down = name.partition("/")
    return gate_up, down or gate_up


def quant_experts(name, cfg, seed, empty=False):
    from torch_argon.quant import QuantizedExperts, QuantizedWeight
    E, H, I = cfg["E"], cfg["H"], cfg["I"]
    gu_name, dn_name = part_formats(name)
    gu = random_quantized_on_device(gu_name, E, 2 * I, H, seed, empty)
    dn = random_quantized_on_device(dn_name, E, H, I, seed + 1, empty)
    return QuantizedExperts(gate_up=QuantizedWeight(gu, gu_name, H),
                            down=QuantizedWeight(dn, dn_name, I))


def dense_experts(cfg, seed, empty=False):
    E, H, I = cfg["E"], cfg["H"], cfg["I"]
    shapes = ((E, 2 * I, H), (E, H, I))
    if empty:
        return tuple(torch.empty(s, dtype=Run.dtype, device=Run.device) for s in shapes)
    g = torch.Generator(device=Run.device).manual_seed(seed)
    return tuple((torch.randn(s, device=Run.device, generator=g) * 0.02).to(Run.dtype)
                 for s in shapes)


def decoded(q):
    """The dense stacks of q's bf16-dequantized weights (the rel_err reference's)."""
    from torch_argon import gpuq
    return (gpuq.dequantize(q.gate_up.data, q.gate_up.qtype.type_id, q.gate_up.n_in, Run.dtype),
            gpuq.dequantize(q.down.data, q.down.qtype.type_id, q.down.n_in, Run.dtype))


def impl_tile_m(impl, mode, x, experts, n_entries):
    """The plan's tile_m that `impl` takes for the call (its own rule)."""
    import torch_argon
    from torch_argon.experts import ExpertsCall, registry
    call = ExpertsCall.of(x, experts, ops=torch_argon.argon_ops, activation_quant=mode,
                          n_entries=n_entries)
    return registry.BY_NAME[impl].tile_m(call, n_entries)


def experts_call(impl, mode, x, ids, w, experts):
    """The experts path of one implementation, as an argument-free function."""
    from torch_argon.experts import run_implementation
    return lambda: run_implementation(impl, x, ids, w, experts, activation_quant=mode)


def bf16_path(x, ids, dense):
    """The implementation the layer chooses for the dense bf16 experts of this call (triton_dense,
    or cuda_hopper_padded where its tuned table takes it): the bf16 time users get. triton_dense
    off CUDA (--tiny runs it through Triton's interpreter)."""
    import torch_argon
    from torch_argon.experts import ExpertsCall, registry
    if x.device.type != "cuda":
        return "triton_dense"
    from torch_argon.weights import DenseExperts
    call = ExpertsCall.of(x, DenseExperts(*dense), ops=torch_argon.argon_ops,
                          n_entries=ids.numel())
    return registry.choose(call, "auto").name


# ---- compile in worker processes ---------------------------------------------------------------

def task_compile(settings, cfg_name, name, Ts):
    """Runs the Triton paths of one config (and format) once per T on uninitialized weights:
    compiles their kernels (the values are never read). Returns (label, seconds, error)."""
    Run.set(settings)
    t0 = time.time()
    cfg = Run.configs[cfg_name]
    try:
        x = torch.randn(max(Ts), cfg["H"], device=Run.device).to(Run.dtype)
        experts = quant_experts(name, cfg, 0, empty=True) if name else dense_experts(cfg, 0, True)
        impls = (("triton_quantized", "none"),) if name else (("triton_dense", "none"),)
        for T in Ts:
            ids, w = routing(T, cfg["E"], cfg["K"], device=Run.device)
            for impl, mode in impls:
                experts_call(impl, mode, x[:T], ids, w, experts)()
        synchronize()
        err = ""
    except Exception as e:  # noqa: BLE001 (reported; the timing records the path's own error)
        err = f"{type(e).__name__}: {e}"
    return f"{cfg_name} {name or 'dense (bf16, the dequant path)'}", time.time() - t0, err


def compile_all(cfg_names, names, Ts, workers):
    tasks = [(cfg, None) for cfg in cfg_names] + [(cfg, n) for cfg in cfg_names for n in names]
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = {pool.submit(task_compile, Run.settings(), c, n, Ts): (c, n) for c, n in tasks}
        for fut in concurrent.futures.as_completed(futures):
            try:
                label, secs, err = fut.result()
                print(f"  compiled {label} ({secs:.0f} s){' ERROR ' + err if err else ''}",
                      flush=True)
            except Exception as e:  # noqa: BLE001 (a worker died: the timing will say more)
                print(f"  compile worker failed on {futures[fut]}: {e}", flush=True)


# ---- timing ------------------------------------------------------------------------------------

def timed_us(fn):
    return graph_us(fn, Run.device, samples=10 if Run.device == "cuda" else 1, target_ms=2.0)


def copy_bandwidth():
    n = (1 << 30) if Run.device == "cuda" else (1 << 24)
    src = torch.empty(n, dtype=torch.uint8, device=Run.device).random_()
    dst = torch.empty_like(src)
    us = timed_us(lambda: dst.copy_(src))
    return 2 * n / us / 1e6  # TB/s, read + write


class Budget:
    def __init__(self, start, seconds):
        self.end = start + seconds
        self.skipped = []

    def left(self):
        return time.time() < self.end


class Layer:
    """One config's calls: x, the routing and the bf16 experts' time per T."""

    def __init__(self, cfg_name, Ts):
        self.name, cfg = cfg_name, Run.configs[cfg_name]
        self.E, self.K, self.H, self.I = cfg["E"], cfg["K"], cfg["H"], cfg["I"]
        x_all = (torch.randn(max(Ts), self.H, device=Run.device) * 0.5).to(Run.dtype)
        self.calls = {T: (x_all[:T], *routing(T, self.E, self.K, seed=T, device=Run.device))
                      for T in Ts}
        dense = dense_experts(cfg, seed=2)
        self.bf16_us = {}
        for T, (x, ids, w) in self.calls.items():
            if Run.device == "cuda":
                heat()
            path = bf16_path(x, ids, dense)
            self.bf16_us[T] = timed_us(experts_call(path, "none", x, ids, w, dense))
            print(f"{cfg_name} T={T:6d} bf16 {self.bf16_us[T]:9.1f} us ({path})", flush=True)


def bench_format(layer, name, impls, bw, records):
    """Every implementation of `impls` on the layer's calls with `name` experts."""
    import torch_argon
    cfg = Run.configs[layer.name]
    E, K, H, I = layer.E, layer.K, layer.H, layer.I
    q = quant_experts(name, cfg, seed=11)
    reference_weights = decoded(q)
    qbytes = q.gate_up.data.numel() + q.down.data.numel()
    for T, (x, ids, w) in layer.calls.items():
        bf16_us = layer.bf16_us[T]
        floor = max(qbytes / bw / 1e6, 2.0 * T * K * 3 * H * I / BF16_TFLOPS / 1e6)
        want = experts_call("triton_dense", "none", x, ids, w, reference_weights)()
        choice = torch_argon.experts.choose(x, q, n_entries=T * K).name
        line = f"{layer.name} {name:7s} T={T:6d} (floor {floor:7.1f})"
        for impl, mode in impls:
            fn = experts_call(impl, mode, x, ids, w, q)
            try:
                err = relative_error(fn(), want)
                us = timed_us(fn)
            except Exception as e:  # noqa: BLE001 (one failing path keeps the other rows)
                traceback.print_exc()
                records.append(dict(op="quant_experts_error", config=layer.name, T=T, quant=name,
                                    impl=impl, mode=mode,
                                    error=f"{type(e).__name__}: {str(e)[:500]}"))
                line += f" | {impl} {mode}: ERROR"
                continue
            chosen = impl == choice and mode == "none"
            records.append(dict(
                op="quant_experts", config=layer.name, E=E, K=K, H=H, I=I, T=T, quant=name,
                impl=impl, mode=mode, tile_m=impl_tile_m(impl, mode, x, q, T * K),
                median_us=round(us, 2), rel_err=round(err, 5), chosen=chosen, choice=choice,
                bf16_us=round(bf16_us, 2), ratio_to_bf16=round(us / bf16_us, 3),
                floor_us=round(floor, 2), ratio_to_floor=round(us / floor, 3),
                weight_bytes=qbytes, weight_tb_per_s=round(qbytes / us / 1e6, 3),
                dtype=str(Run.dtype).replace("torch.", ""),
                timing="graph" if Run.device == "cuda" else "wall", device=device_name()))
            line += (f" | {impl}{'/q8' if mode == 'q8' else ''} {us:8.1f}"
                     f"{'*' if chosen else ''} ({us / bf16_us:.2f}x)")
        print(line, flush=True)
    del q, reference_weights
    torch_argon.experts.clear_cuda_dequant_workspace()
    if Run.device == "cuda":
        torch.cuda.empty_cache()


def llamacpp_column(layer, name, binary, records, timeout_s=600):
    """llama.cpp's MUL_MAT_ID (gate + up + down) of format `name` on the layer's shapes at every
    T, in one run of ggml's test-backend-ops at `binary`: llamacpp_experts records (an error
    record if it fails; the run goes on)."""
    if "/" in name:  # test-backend-ops runs one type per MUL_MAT_ID case
        print(f"{layer.name} {name:7s} llama.cpp: skipped (gate/up and down in two formats)",
              flush=True)
        return
    shape = ggml_mul_mat_id.MoEShape(E=layer.E, K=layer.K, H=layer.H, I=layer.I)
    backend = "CUDA0" if Run.device == "cuda" else "CPU"
    if Run.device == "cuda":
        torch.cuda.empty_cache()  # the binary allocates its own tensors beside this process
    try:
        rows = ggml_mul_mat_id.layer_times(binary, [shape], [name], list(layer.calls),
                                           backend=backend, timeout=timeout_s)
    except Exception as e:  # noqa: BLE001 (a failing baseline keeps our rows)
        records.append(dict(op="quant_experts_error", config=layer.name, T=0, quant=name,
                            impl="llamacpp", mode="-", error=f"{type(e).__name__}: {str(e)[:500]}"))
        print(f"{layer.name} {name:7s} llama.cpp: ERROR {e}", flush=True)
        return
    for r in rows:
        records.append(dict(op="llamacpp_experts", config=layer.name, **r,
                            timing="ggml test-backend-ops perf"))
        print(f"{layer.name} {name:7s} T={r['T']:6d} llama.cpp gate+up {r['gate_up_us']:9.1f} "
              f"down {r['down_us']:9.1f} total {r['total_us']:9.1f} us", flush=True)


def attach_llamacpp(records):
    """llamacpp_us and ratio_to_llamacpp in each quant_experts record that llama.cpp's column
    has a time for (same config, format and T)."""
    ll = {(r["config"], r["quant"], r["T"]): r["total_us"] for r in records
          if r["op"] == "llamacpp_experts"}
    for r in records:
        got = ll.get((r.get("config"), r.get("quant"), r.get("T")))
        if r["op"] == "quant_experts" and got:
            r["llamacpp_us"] = got
            r["ratio_to_llamacpp"] = round(r["median_us"] / got, 3)


def device_name():
    return torch.cuda.get_device_name() if Run.device == "cuda" else Run.device


# ---- report ------------------------------------------------------------------------------------

def table(records):
    rows = [r for r in records if r["op"] == "quant_experts"]
    errors = [r for r in records if r["op"] == "quant_experts_error"]
    by = {}
    for r in rows:
        by.setdefault((r["config"], r["quant"], r["T"]), {})[(r["impl"], r["mode"])] = r
    cols = [c for c in IMPLS + (Q8_IMPL, MIXED_IMPL) if any(c in v for v in by.values())]
    heads = [f"{i.replace('cuda_quantized', 'cq').replace('triton_quantized', 'tq')}"
             f"{'/q8' if m == 'q8' else ''}" for i, m in cols]
    print(f"\n=== quantized experts path (us; * the layer's choice; {Run.device}) ===")
    ll = {(r["config"], r["quant"], r["T"]): r for r in records if r["op"] == "llamacpp_experts"}
    print(f"{'config':6s} {'quant':7s} {'T':>6s} {'bf16':>8s} {'floor':>7s} "
          + " ".join(f"{h:>13s}" for h in heads) + "  choice/bf16"
          + (f" {'llama.cpp':>10s} choice/llama.cpp" if ll else ""))
    for (cfg, q, T), got in by.items():
        base = next(iter(got.values()))
        cells, choice = [], None
        for c in cols:
            r = got.get(c)
            cells.append(f"{r['median_us']:12.1f}{'*' if r['chosen'] else ' '}" if r
                         else f"{'-':>13s}")
            choice = r if r and r["chosen"] else choice
        lr = ll.get((cfg, q, T))
        llama = ((f" {lr['total_us']:10.1f} " + (f"{choice['median_us'] / lr['total_us']:.2f}x"
                                                 if choice else "-")) if lr else "")
        print(f"{cfg:6s} {q:7s} {T:6d} {base['bf16_us']:8.1f} {base['floor_us']:7.1f} "
              + " ".join(cells) + (f"  {choice['ratio_to_bf16']:.2f}x" if choice else "  -")
              + llama)
    if ll:
        print("\n=== llama.cpp MUL_MAT_ID (ggml test-backend-ops; us: gate + up, down, total) ===")
        for (cfg, q, T), r in ll.items():
            print(f"{cfg:6s} {q:7s} {T:6d} {r['gate_up_us']:10.1f} {r['down_us']:10.1f} "
                  f"{r['total_us']:10.1f}")
    for e in errors:
        print(f"ERROR {e['config']} {e['quant']} T={e['T']} {e['impl']} {e['mode']}: "
              f"{e['error'][:300]}")


def profile(impl, name, cfg_name, T):
    """The experts path of `impl` on `name` experts at one config and T, three times (an ncu
    target; no timing, no bf16 baseline, no Triton warm-up in workers)."""
    cfg = Run.configs[cfg_name]
    x = (torch.randn(T, cfg["H"], device=Run.device) * 0.5).to(Run.dtype)
    ids, w = routing(T, cfg["E"], cfg["K"], seed=T, device=Run.device)
    call = experts_call(impl, "none", x, ids, w, quant_experts(name, cfg, seed=11))
    for _ in range(3):
        y = call()
    synchronize()
    print(f"profiled {impl} {name} {cfg_name} T={T}: |y| = {y.float().norm():.4g}")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   "results", "h200_quant.json"))
    ap.add_argument("--quick", action="store_true", help=f"formats {','.join(QUICK_FORMATS)}, "
                    "mode none only; about 4 minutes on an H200")
    ap.add_argument("--formats", help="comma list (default: every block format; --quick: 5); "
                    "GATEUP/DOWN for two formats, e.g. Q4_K/Q6_K")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--T", help="comma list of T (default 128,512,2048,8192,16384)")
    ap.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1))
    ap.add_argument("--budget-s", type=float, default=None,
                    help="skip the formats left past this many seconds from the start (default: "
                         "210 with --quick, else none)")
    ap.add_argument("--llamacpp", metavar="PATH", help="ggml's test-backend-ops (bench/baselines/"
                    "build_ggml_cuda.sh): adds llama.cpp's MUL_MAT_ID column, timed in this run")
    ap.add_argument("--impls", help="comma list of implementation names to time (mode none) "
                    "instead of the default columns, e.g. cuda_quantized_dequant,"
                    "cuda_quantized_mixed")
    ap.add_argument("--mixed-tile-64-up-to", type=float, metavar="ROWS",
                    help="cuda_quantized_mixed's token tile rule for this run: 64 up to ROWS mean "
                         "rows per expert (experts/quantized_crossover.py "
                         "MIXED_TOKEN_TILE_64_UP_TO_ROWS, applied as if "
                         "MIXED_TOKEN_TILE_64_MEASURED; 0: always 128, the default until then); "
                         "the records' tile_m says which ran")
    ap.add_argument("--tiny", action="store_true", help="toy sizes on --device (logic test)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    ap.add_argument("--profile", metavar="IMPL",
                    help="no table: run IMPL's experts path 3 times on the first format, config "
                         "and T given (Nsight Compute's target: --launch-skip the first call's "
                         "kernels)")
    args = ap.parse_args(argv)
    start = time.time()
    if args.mixed_tile_64_up_to is not None:
        from torch_argon.experts import quantized_crossover
        quantized_crossover.MIXED_TOKEN_TILE_64_UP_TO_ROWS = args.mixed_tile_64_up_to
        quantized_crossover.MIXED_TOKEN_TILE_64_MEASURED = True
    Run.set((args.device, {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype],
             TINY_CONFIGS if args.tiny else CONFIGS))
    if Run.device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_quant.py: no CUDA device")
    from torch_argon import gpuq
    if Run.device == "cpu":
        import torch_argon.testing.backends  # noqa: F401 (the gpuq emulation: a test build)
    print(f"device: {device_name()}, torch {torch.__version__}", flush=True)
    why = gpuq.refusal(Run.device)
    if why:
        print(f"WARNING: {why}: the gpuq rows will be errors", flush=True)
    names = (args.formats.split(",") if args.formats
             else list(QUICK_FORMATS) if args.quick else list(gpuq.FORMATS))
    cfg_names = args.configs.split(",")
    Ts = (tuple(int(t) for t in args.T.split(",")) if args.T
          else TINY_T if args.tiny else T_LIST)
    impls = IMPLS if args.quick else IMPLS + (Q8_IMPL,)
    if args.impls:
        impls = tuple((name, "none") for name in args.impls.split(","))
    if args.profile:
        return profile(args.profile, names[0], cfg_names[0], Ts[0])
    budget = Budget(start, args.budget_s if args.budget_s is not None
                    else 210.0 if args.quick else float("inf"))
    records = []

    def save():
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)

    try:
        if Run.device == "cuda":
            t0 = time.time()
            compile_all(cfg_names, names, Ts, args.workers)
            print(f"compile: {time.time() - t0:.0f} s", flush=True)
        bw = copy_bandwidth()
        records.append(dict(op="copy_bw", tb_per_s=round(bw, 3), device=device_name()))
        print(f"copy bandwidth {bw:.3f} TB/s (read + write)", flush=True)
        layers = [Layer(cfg, Ts) for cfg in cfg_names]
        if args.llamacpp:  # llama.cpp's bf16 MUL_MAT_ID beside our bf16 column
            for layer in layers:
                llamacpp_column(layer, "BF16", args.llamacpp, records)
        for name in names:  # every config of a format before the next: a budget cut keeps both
            for layer in layers:
                if not budget.left():
                    budget.skipped.append(f"{layer.name} {name}")
                    continue
                if args.llamacpp:
                    llamacpp_column(layer, name, args.llamacpp, records)
                bench_format(layer, name, impls, bw, records)
            attach_llamacpp(records)
            save()
    except Exception:  # noqa: BLE001 (keep what was measured)
        traceback.print_exc()
        records.append(dict(op="quant_experts_error", config="-", T=0, quant="-", impl="-",
                            mode="-", error=traceback.format_exc()[-500:]))
    finally:
        save()
        print(f"{len(records)} records written to {args.json}")
        table(records)
        if budget.skipped:
            print("skipped (time budget): " + "; ".join(budget.skipped))
        print(f"total {time.time() - start:.0f} s")
    return 1 if any(r["op"] == "quant_experts_error" for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
