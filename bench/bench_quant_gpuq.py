"""The gpuq quantized expert GEMMs (torch_argon/gpuq, csrc/gpuq) on a CUDA GPU, in one run:
correctness of every format and mode on the device, then the issue's table.

    python bench/bench_quant.py --gpuq --json $OUT/h200_quant_gpuq.json    # via bench_quant.py
    python bench/bench_quant_gpuq.py --json ...                             # the same
    python bench/bench_quant_gpuq.py --quick                                # T = 128, 2048

Needs torch_argon built with CUDA (the gpuq kernels are compiled into torch_argon._C).

What is timed (CUDA graph replay, median of 10 samples of 2 calls; weights several times the
L2; the plan made once, outside the timing, as the layer's plan kernel would):
  gpuq none   gate/up (gathered, SiLU epilogue) + down, exact-dequant products (bf16 MMA on the
              integer codes, group scales in fp32)
  gpuq q8     quantize x + gate/up + quantize h + down (int8 MMA)
  bf16        the Triton bf16 GEMMs (moe_gate_up_swiglu_triton + moe_mm_triton) on dense stacks
              of the same shapes: the baseline
The plan and the combine are the same kernels on every path and are not in these times.
Floors: the format's weight bytes over the copy bandwidth measured in the run, and the GEMMs'
FLOPs over 790 TFLOP/s (the H200's bf16 rate on random data); the larger is the floor.

Records (JSON list): {"op": "gpuq_gemms", "config", "T", "E", "K", "H", "I", "quant",
"mode", "median_us", "bf16_us", "ratio_to_bf16", "floor_us", "ratio_to_floor", "weight_bytes",
"weight_tb_per_s", "tile_m"}; {"op": "gpuq_check", "quant", "failures"}; {"op": "copy_bw",
"tb_per_s"}.
"""
import argparse
import json
import os
import sys
import time
import traceback

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]


CONFIGS = {"E512": dict(E=512, K=10, H=2048, I=512), "E128": dict(E=128, K=8, H=2048, I=768)}
T_LIST = (128, 512, 2048, 8192, 16384)
BF16_TFLOPS = 790.0
DTYPE = torch.bfloat16


def graph_us(fn, inner=2, samples=10):
    """Median us per call of fn under CUDA graph replay (torch_argon/testing/timing.py)."""
    from torch_argon.testing import timing
    return timing.cuda_graph_us(fn, inner=inner, samples=samples, warmup=2)


def copy_bandwidth():
    n = 1 << 30  # 1 GiB each way
    src = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    us = graph_us(lambda: dst.copy_(src), inner=4, samples=10)
    return 2 * n / us / 1e6  # TB/s, read + write


def random_quantized_gpu(name, E, N, n_in, seed):
    """uint8 [E, N, row_bytes]: blocks drawn on the GPU from a pool of 8192 random blocks."""
    from torch_argon.quant import FORMATS, random_quantized, row_bytes
    fmt = FORMATS[name]
    g = torch.Generator().manual_seed(seed)
    pool = random_quantized(name, 8192, fmt.block_elems, std=0.02, generator=g).cuda()
    n_blocks = E * N * (n_in // fmt.block_elems)
    gd = torch.Generator(device="cuda").manual_seed(seed)
    idx = torch.randint(0, pool.shape[0], (n_blocks,), device="cuda", generator=gd)
    return pool[idx].view(E, N, row_bytes(fmt, n_in))


def routing(T, E, K, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    ids = torch.rand(T, E, device="cuda", generator=g).topk(K, dim=1).indices
    w = torch.rand(T, K, device="cuda", generator=g)
    return ids, w


def check_formats(names):
    """Every format, both modes, on the device (tests/gpuq_cases.py); returns {name: failures}."""
    from gpuq_cases import run_gemm_case, run_unused_kept_case
    out = {}
    for name in names:
        fails = []
        for mode in ("none", "q8"):
            for tm, T in ((8, 12), (32, 40)):
                try:
                    fails += run_gemm_case(name, "cuda", DTYPE, activation_quant=mode, tm=tm, T=T)
                except Exception as e:  # noqa: BLE001 (a crash is a failure to report)
                    fails.append(f"{name} {mode}: {type(e).__name__}: {e}")
        try:
            fails += run_gemm_case(name, "cuda", torch.float16, tm=16, T=20)
            fails += run_gemm_case(name, "cuda", DTYPE, activation="gelu", tm=8, T=12)
        except Exception as e:  # noqa: BLE001
            fails.append(f"{name} fp16/gelu: {type(e).__name__}: {e}")
        out[name] = fails
    out["unused_kept"] = run_unused_kept_case("cuda")
    return out


def bench_config(cfg_name, names, Ts, records, bw, save=lambda: None):
    from torch_argon import reference
    from torch_argon.gpuq import ops as gpuq
    from torch_argon.triton_ops.configs import default_tile_m
    from torch_argon.triton_ops.ops import moe_gate_up_swiglu_triton, moe_mm_triton
    cfg = CONFIGS[cfg_name]
    E, K, H, I = cfg["E"], cfg["K"], cfg["H"], cfg["I"]
    g = torch.Generator(device="cuda").manual_seed(1)
    w_gu = (torch.randn(E, 2 * I, H, device="cuda", generator=g) * 0.02).to(DTYPE)
    w_dn = (torch.randn(E, H, I, device="cuda", generator=g) * 0.02).to(DTYPE)
    x_all = (torch.randn(max(Ts), H, device="cuda", generator=g) * 0.5).to(DTYPE)
    problems = {}
    for T in Ts:
        ids, w = routing(T, E, K, seed=T)
        x = x_all[:T]
        tm_b = default_tile_m(T * K, E)
        plan_b = reference.moe_plan(ids, w, E, tm_b)
        R = plan_b.sorted_token.shape[0]
        h_b = torch.empty(R, I, dtype=DTYPE, device="cuda")

        def bf16(x=x, p=plan_b, tm=tm_b):
            h = moe_gate_up_swiglu_triton(x, w_gu, p.tile_expert, p.meta, tm, p.sorted_token,
                                          zero_unused=False)
            return moe_mm_triton(h, w_dn, p.tile_expert, p.meta, tm, zero_unused=False,
                                 row_token=p.sorted_token)
        bf16_us = graph_us(bf16)
        tm = gpuq.layer_tile_m(T * K, E)
        problems[T] = (x, reference.moe_plan(ids, w, E, tm), tm, bf16_us)
        flops = 2.0 * T * K * (2 * I * H + H * I)
        print(f"{cfg_name} T={T:5d} bf16 GEMMs {bf16_us:9.1f} us (tile_m {tm_b}; "
              f"{flops / bf16_us / 1e6:.0f} TFLOP/s)", flush=True)
        del h_b
    del w_gu, w_dn
    for name in names:
        t0 = time.time()
        wq_gu = random_quantized_gpu(name, E, 2 * I, H, seed=11)
        wq_dn = random_quantized_gpu(name, E, H, I, seed=12)
        qbytes = wq_gu.numel() + wq_dn.numel()
        line = f"{cfg_name} {name:7s}"
        for T in Ts:
            x, plan, tm, bf16_us = problems[T]
            flops = 2.0 * T * K * (2 * I * H + H * I)
            floor = max(qbytes / bw / 1e6, flops / BF16_TFLOPS / 1e6)
            for mode in ("none", "q8"):
                def run(x=x, p=plan, tm=tm, mode=mode):
                    xq = gpuq.quantize_q8(x) if mode == "q8" else None
                    h = gpuq.qmm(x, wq_gu, name, H, p.tile_expert, tm, meta=p.meta,
                                 row_token=p.sorted_token, swiglu=True, activation_quant=mode,
                                 zero_unused=False, a_q8=xq)
                    return gpuq.qmm(h, wq_dn, name, I, p.tile_expert, tm, meta=p.meta,
                                    activation_quant=mode, zero_unused=False)
                try:
                    us = graph_us(run)
                except Exception as e:  # noqa: BLE001
                    print(f"  {name} {mode} T={T}: {type(e).__name__}: {e}", flush=True)
                    continue
                records.append(dict(
                    op="gpuq_gemms", config=cfg_name, T=T, E=E, K=K, H=H, I=I, quant=name,
                    mode=mode, tile_m=tm, median_us=round(us, 2), bf16_us=round(bf16_us, 2),
                    ratio_to_bf16=round(us / bf16_us, 3), floor_us=round(floor, 2),
                    ratio_to_floor=round(us / floor, 3), weight_bytes=qbytes,
                    weight_tb_per_s=round(qbytes / us / 1e6, 3), dtype="bfloat16",
                    timing="graph"))
                line += (f" | T={T} {mode} {us:8.1f} ({us / bf16_us:4.2f}x bf16, "
                         f"{us / floor:4.2f}x floor)")
        print(line + f"  [{time.time() - t0:.0f} s]", flush=True)
        save()  # what is measured survives a run cut short
        del wq_gu, wq_dn
        torch.cuda.empty_cache()


def table(records):
    rows = [r for r in records if r["op"] == "gpuq_gemms"]
    print("\n=== gpuq quantized expert GEMMs (gate/up + down; us, CUDA graph medians) ===")
    print(f"{'config':6s} {'quant':7s} {'T':>6s} {'none':>9s} {'q8':>9s} {'bf16':>9s} "
          f"{'none/bf16':>9s} {'q8/bf16':>8s} {'floor':>8s} {'none/fl':>7s} {'TB/s':>6s}")
    by = {}
    for r in rows:
        by.setdefault((r["config"], r["quant"], r["T"]), {})[r["mode"]] = r
    for (cfg, q, T), m in by.items():
        n, q8 = m.get("none"), m.get("q8")
        base = n or q8
        print(f"{cfg:6s} {q:7s} {T:6d} {n['median_us'] if n else float('nan'):9.1f} "
              f"{q8['median_us'] if q8 else float('nan'):9.1f} {base['bf16_us']:9.1f} "
              f"{n['ratio_to_bf16'] if n else float('nan'):9.2f} "
              f"{q8['ratio_to_bf16'] if q8 else float('nan'):8.2f} {base['floor_us']:8.1f} "
              f"{n['ratio_to_floor'] if n else float('nan'):7.2f} "
              f"{n['weight_tb_per_s'] if n else float('nan'):6.2f}")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--json",
                    default=os.path.join(ROOT, "bench", "results", "h200_quant_gpuq.json"))
    ap.add_argument("--quick", action="store_true", help="T = 128 and 2048 only")
    ap.add_argument("--formats", default=None, help="comma list (default: every gpuq format)")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--configs", default="E512,E128")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("bench_quant_gpuq.py: no CUDA device")
    from torch_argon.gpuq import ops as gpuq
    names = args.formats.split(",") if args.formats else list(gpuq.FORMATS)
    start = time.time()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    records, failed = [], False

    def save():
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)

    try:
        why = gpuq.refusal("cuda")
        if why:
            raise RuntimeError(why)
        if not args.no_check:
            t0 = time.time()
            for name, fails in check_formats(names).items():
                records.append(dict(op="gpuq_check", quant=name, failures=fails))
                print(f"  check {name:11s} {'ok' if not fails else 'FAILED'}", flush=True)
                for f in fails:
                    print(f"    {f}", flush=True)
                failed |= bool(fails)
            print(f"check: {time.time() - t0:.0f} s", flush=True)
        bw = copy_bandwidth()
        records.append(dict(op="copy_bw", tb_per_s=round(bw, 3)))
        print(f"copy bandwidth {bw:.2f} TB/s (read + write)", flush=True)
        Ts = (128, 2048) if args.quick else T_LIST
        for cfg in args.configs.split(","):
            bench_config(cfg, names, Ts, records, bw, save)
    except Exception:  # noqa: BLE001 (keep what was measured)
        traceback.print_exc()
        failed = True
    finally:
        save()
        print(f"{len(records)} records written to {args.json}")
        table(records)
        print(f"total {time.time() - start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
