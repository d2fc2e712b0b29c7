"""gpuq's K loops side by side on a CUDA GPU (issue 43, small T): the plain loop, the pipelined
one and smem_act (csrc/gpuq/gpuq_kernel.h; smem_act stages the activations of 16- and 32-token
tiles in shared memory, its 8-token calls are the plain loop's), against the bf16 GEMMs, in one
run of a lab build. A lab loop that the build lacks is left out of the run (its columns empty).

    NVCC_APPEND_FLAGS=-DGPUQ_LAB_LOOPS=1 python setup.py build_ext --inplace   # every loop
    python bench/lab/gpuq_loops.py --json $OUT/gpuq_loops.json
    python bench/lab/gpuq_loops.py --T 256,512 --formats Q4_K,IQ4_XS   # smem_act's points
    python bench/lab/gpuq_loops.py --formats Q4_K --configs E128 --T 128
    TRITON_INTERPRET=1 python bench/lab/gpuq_loops.py --device cpu --tiny
                                  # the logic at toy sizes on the CPU (the gpuq emulation of a
                                  # test build, the Triton interpreter; wall-clock times)

What is timed: the gate/up GEMM (gathered, SiLU epilogue) + the down GEMM of the layer's call,
activation_quant "none", each loop chosen by ARGON_GPUQ_LOOP when its CUDA graph is captured;
bf16: the Triton bf16 GEMMs (moe_gate_up_swiglu_triton + moe_mm_triton) on dense stacks of the
same shapes. The plan and the combine are the same on every path and not in these times. The
loops and bf16 are captured once each and replayed in turns (testing/timing.py's interleaved_graphs_us),
so clock drift reaches all of them alike. Floors: the format's weight bytes over the copy
bandwidth measured in the run, or the FLOPs over BF16_TFLOPS, whichever is larger.

Each call's outputs are compared: every lab loop's must equal the plain loop's bit for bit on
the used tiles' rows (the same products in the same order); a difference is recorded and fails
the run.

Records (JSON list; per lab loop L in the build: L_us, L_speedup (plain / L), L_to_bf16,
L_to_floor, L_bit_equal; "speedup" is pipelined's, "bit_equal" all loops'):
  {"op": "gpuq_loops", "config", "E", "K", "H", "I", "T", "quant", "tile_m", "plain_us",
   "pipelined_us", "speedup", "smem_act_us", "smem_act_speedup", "bf16_us", "plain_to_bf16",
   "pipelined_to_bf16", "smem_act_to_bf16", "floor_us", "plain_to_floor", "pipelined_to_floor",
   "smem_act_to_floor", "weight_bytes", "bit_equal", "grid", "device"}
  {"op": "copy_bw", "tb_per_s", "device"}
  {"op": "gpuq_loops_error", "config", "T", "quant", "error"}
"""
import argparse
import json
import os
import sys
import time
import traceback

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
if os.environ.get("TRITON_INTERPRET") == "1":  # --tiny on the CPU (before the kernels import)
    from torch_argon.testing.triton_interpreter import enable
    enable()

CONFIGS = {"E512": dict(E=512, K=10, H=2048, I=512), "E128": dict(E=128, K=8, H=2048, I=768)}
TINY_CONFIGS = {"E512": dict(E=4, K=2, H=512, I=256), "E128": dict(E=2, K=1, H=512, I=256)}
FORMATS = ("Q4_K", "Q8_0", "IQ4_XS", "Q6_K", "IQ2_XS", "Q2_K")
T_LIST = (128, 512)
BF16_TFLOPS = 790.0  # the bf16 rate on random data (bench/README.md's GEMM tables)
LOOPS = ("plain", "pipelined", "smem_act")
LAB_LOOPS = LOOPS[1:]
WARPS, COLS_PER_WARP = 4, 16  # csrc/gpuq/gpuq_kernel.h: kWarps, 16 columns per row group


def grid(n_out, swiglu, n_tiles, tm):
    """The gpuq launch's (blocks along N, row groups) for a plan of n_tiles tiles of tm rows."""
    cols = WARPS * COLS_PER_WARP * (1 if swiglu else 2)
    return -(-n_out // cols), n_tiles * tm // min(tm, 32)


def random_quantized_on(device, name, E, N, n_in, seed):
    """uint8 [E, N, row_bytes]: blocks drawn on the device from a pool of 8192 random blocks."""
    from torch_argon.quant import FORMATS as ALL, random_quantized, row_bytes
    fmt = ALL[name]
    g = torch.Generator().manual_seed(seed)
    pool = random_quantized(name, 8192, fmt.block_elems, std=0.02, generator=g).to(device)
    n_blocks = E * N * (n_in // fmt.block_elems)
    gd = torch.Generator(device=device).manual_seed(seed)
    idx = torch.randint(0, pool.shape[0], (n_blocks,), device=device, generator=gd)
    return pool[idx].view(E, N, row_bytes(fmt, n_in))


def lab_calls(device, cfg, Ts, g):
    """{T: (x [T, H] bf16, topk ids, topk weights)}: the lab scripts' calls (uniform top-K
    routing, one x whose first T rows each call takes)."""
    from torch_argon.testing.routing import routing
    E, K, H = cfg["E"], cfg["K"], cfg["H"]
    x_all = (torch.randn(max(Ts), H, device=device, generator=g) * 0.5).to(torch.bfloat16)
    return {T: (x_all[:T], *routing(T, E, K, seed=T, device=device)) for T in Ts}


def lab_weights(device, name, cfg):
    """(gate_up, down) GGUF stacks of format `name` for cfg's shapes (random_quantized_on)."""
    E, H, I = cfg["E"], cfg["H"], cfg["I"]
    return (random_quantized_on(device, name, E, 2 * I, H, seed=11),
            random_quantized_on(device, name, E, H, I, seed=12))


def copy_bandwidth(device):
    from torch_argon.testing.timing import graph_us
    n = (1 << 30) if device == "cuda" else (1 << 22)
    src = torch.empty(n, dtype=torch.uint8, device=device).random_()
    dst = torch.empty_like(src)
    return 2 * n / graph_us(lambda: dst.copy_(src), device) / 1e6  # TB/s, read + write


def bf16_gemms(device, cfg, x, ids, w, dense):
    """The Triton bf16 GEMMs of the layer's call (the baseline), as an argument-free function."""
    from torch_argon import reference
    from torch_argon.triton_ops.configs import default_tile_m
    from torch_argon.triton_ops.ops import moe_gate_up_swiglu_triton, moe_mm_triton
    E, K = cfg["E"], cfg["K"]
    tm = default_tile_m(x.shape[0] * K, E)
    plan = reference.moe_plan(ids, w, E, tm)

    def run():
        h = moe_gate_up_swiglu_triton(x, dense[0], plan.tile_expert, plan.meta, tm,
                                      plan.sorted_token, zero_unused=False)
        return moe_mm_triton(h, dense[1], plan.tile_expert, plan.meta, tm, zero_unused=False,
                             row_token=plan.sorted_token)
    return run


def gpuq_gemms(loop, name, cfg, x, plan, tm, wq):
    """gpuq's gate/up + down GEMMs with `loop`, as an argument-free function (the loop is read
    when the GEMMs are called: a CUDA graph keeps the kernels of its capture)."""
    from torch_argon.gpuq import ops as gpuq
    H, I = cfg["H"], cfg["I"]

    def run():
        os.environ["ARGON_GPUQ_LOOP"] = loop
        try:
            h = gpuq.qmm(x, wq[0], name, H, plan.tile_expert, tm, meta=plan.meta,
                         row_token=plan.sorted_token, swiglu=True, zero_unused=False)
            return gpuq.qmm(h, wq[1], name, I, plan.tile_expert, tm, meta=plan.meta,
                            zero_unused=False)
        finally:
            os.environ.pop("ARGON_GPUQ_LOOP", None)
    return run


def bench_config(device, cfg_name, cfg, names, Ts, bw, records, save):
    from torch_argon import reference
    from torch_argon.gpuq import ops as gpuq
    from torch_argon.testing.timing import interleaved_graphs_us
    E, K, H, I = cfg["E"], cfg["K"], cfg["H"], cfg["I"]
    g = torch.Generator(device=device).manual_seed(1)
    dense = ((torch.randn(E, 2 * I, H, device=device, generator=g) * 0.02).to(torch.bfloat16),
             (torch.randn(E, H, I, device=device, generator=g) * 0.02).to(torch.bfloat16))
    calls = lab_calls(device, cfg, Ts, g)
    for name in names:
        wq = lab_weights(device, name, cfg)
        qbytes = wq[0].numel() + wq[1].numel()
        for T, (x, ids, w) in calls.items():
            try:
                tm = gpuq.layer_tile_m(T * K, E, scaled=True)  # the layer's, bf16 "none"
                plan = reference.moe_plan(ids, w, E, tm)
                fns, outs = {}, {}
                for loop in LOOPS:
                    fn = gpuq_gemms(loop, name, cfg, x, plan, tm, wq)
                    try:
                        outs[loop] = fn()
                    except RuntimeError as e:  # a build without this lab loop
                        if loop == "plain" or "this build has no" not in str(e):
                            raise
                        continue
                    fns[loop] = fn
                # the rows of used tiles (the others are left unwritten: zero_unused=False)
                used = (plan.tile_expert >= 0).repeat_interleave(tm)
                equal = {loop: torch.equal(outs["plain"][used].view(torch.int16),
                                           outs[loop][used].view(torch.int16))
                         for loop in outs if loop != "plain"}
                bit_equal = all(equal.values())
                del outs
                fns["bf16"] = bf16_gemms(device, cfg, x, ids, w, dense)
                us = interleaved_graphs_us(fns, device)
            except Exception as e:  # noqa: BLE001 (one failing case keeps the other rows)
                traceback.print_exc()
                records.append(dict(op="gpuq_loops_error", config=cfg_name, T=T, quant=name,
                                    error=f"{type(e).__name__}: {str(e)[:500]}"))
                continue
            floor = max(qbytes / bw / 1e6, 2.0 * T * K * 3 * H * I / BF16_TFLOPS / 1e6)
            n_tiles = plan.tile_expert.shape[0]
            rec = dict(op="gpuq_loops", config=cfg_name, E=E, K=K, H=H, I=I, T=T, quant=name,
                       tile_m=tm, plain_us=round(us["plain"], 2), bf16_us=round(us["bf16"], 2),
                       plain_to_bf16=round(us["plain"] / us["bf16"], 3),
                       floor_us=round(floor, 2), plain_to_floor=round(us["plain"] / floor, 3),
                       weight_bytes=qbytes, bit_equal=bit_equal,
                       grid=dict(gate_up=grid(I, True, n_tiles, tm),
                                 down=grid(H, False, n_tiles, tm)),
                       device=torch.cuda.get_device_name() if device == "cuda" else device)
            line = f"{cfg_name} {name:7s} T={T:5d} tm={tm:2d} plain {us['plain']:8.1f}"
            for loop in LAB_LOOPS:
                if loop not in us:
                    continue
                rec[f"{loop}_us"] = round(us[loop], 2)
                rec[f"{loop}_speedup"] = round(us["plain"] / us[loop], 3)
                rec[f"{loop}_to_bf16"] = round(us[loop] / us["bf16"], 3)
                rec[f"{loop}_to_floor"] = round(us[loop] / floor, 3)
                rec[f"{loop}_bit_equal"] = equal[loop]
                line += (f" {loop} {us[loop]:8.1f} ({rec[f'{loop}_speedup']:.2f}x"
                         f"{'' if equal[loop] else ', NOT BIT-EQUAL'})")
            if "pipelined_speedup" in rec:
                rec["speedup"] = rec["pipelined_speedup"]
            records.append(rec)
            print(f"{line} bf16 {us['bf16']:8.1f} floor {floor:7.1f}", flush=True)
        save()
        del wq
        if device == "cuda":
            torch.cuda.empty_cache()


def table(records):
    rows = [r for r in records if r["op"] == "gpuq_loops"]
    lab = [loop for loop in LAB_LOOPS if any(f"{loop}_us" in r for r in rows)]

    def cell(r, loop):
        if f"{loop}_us" not in r:
            return "- | -"
        return (f"{r[f'{loop}_us']:.0f} ({r[f'{loop}_to_bf16']:.2f}, "
                f"{r[f'{loop}_to_floor']:.2f}) | {r[f'{loop}_speedup']:.2f}x")
    print("\n| config | format | T | tile_m | bf16 | floor | plain (x bf16, x floor) | " +
          "".join(f"{loop} (x bf16, x floor) | speedup | " for loop in lab) + "bit-equal |")
    print("|---|---|---:|---:|---:|---:|---|" + "---|---:|" * len(lab) + "---|")
    for r in rows:
        print(f"| {r['config']} | {r['quant']} | {r['T']} | {r['tile_m']} | {r['bf16_us']:.0f} | "
              f"{r['floor_us']:.0f} | {r['plain_us']:.0f} ({r['plain_to_bf16']:.2f}, "
              f"{r['plain_to_floor']:.2f}) | " + "".join(f"{cell(r, loop)} | " for loop in lab) +
              f"{'yes' if r['bit_equal'] else 'NO'} |")
    for r in records:
        if r["op"] == "gpuq_loops_error":
            print(f"ERROR {r['config']} {r['quant']} T={r['T']}: {r['error'][:300]}")


def lab_main(argv, script, op, bench, failed, summary=None, doc=__doc__, formats=FORMATS,
             t_list=T_LIST):
    """The driver both lab scripts share: arguments (defaults: `formats`, `t_list`), the copy
    bandwidth, `bench` per config (bench_config's signature), the JSON saved after each config and at the end (what was
    measured survives an error: recorded as op + "_error"), `summary(records)` printed; exit
    status 1 where a record is an error or `failed(record)`."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--json", default=os.path.join(os.environ.get("OUT", "/tmp"), f"{op}.json"))
    ap.add_argument("--formats", default=",".join(formats))
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--T", default=",".join(map(str, t_list)))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="toy sizes (the logic, not the speed)")
    args = ap.parse_args(argv)
    start = time.time()
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit(f"{script}: no CUDA device")
    if device == "cpu":
        import torch_argon.testing.backends  # noqa: F401 (the gpuq emulation: a test build)
    configs = TINY_CONFIGS if args.tiny else CONFIGS
    Ts = tuple(int(t) for t in args.T.split(",")) if not args.tiny else (8, 24)
    records = []

    def save():
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)

    try:
        bw = copy_bandwidth(device)
        records.append(dict(op="copy_bw", tb_per_s=round(bw, 3), device=device))
        print(f"copy bandwidth {bw:.3f} TB/s (read + write)", flush=True)
        for cfg_name in args.configs.split(","):
            bench(device, cfg_name, configs[cfg_name], args.formats.split(","), Ts, bw,
                  records, save)
    except Exception:  # noqa: BLE001 (keep what was measured)
        traceback.print_exc()
        records.append(dict(op=f"{op}_error", config="-", T=0, quant="-",
                            error=traceback.format_exc()[-500:]))
    finally:
        save()
        if summary:
            summary(records)
        print(f"{len(records)} records written to {args.json}; total {time.time() - start:.0f} s")
    bad = any(r["op"] == f"{op}_error" or (r["op"] == op and failed(r)) for r in records)
    return 1 if bad else 0


def main(argv=None):
    return lab_main(argv, "gpuq_loops.py", "gpuq_loops", bench_config,
                    failed=lambda r: not r["bit_equal"], summary=table)


if __name__ == "__main__":
    sys.exit(main())
