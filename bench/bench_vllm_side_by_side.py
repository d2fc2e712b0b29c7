"""torch_argon's experts path side by side with vLLM's Triton fused_moe, in one process, on the
same weights and routing (issues 43, 45).

    bash bench/baselines/stage_vllm.sh              # once, where PyPI is reachable
    python bench/bench_vllm_side_by_side.py                      # both configs, T = 128..16384
    python bench/bench_vllm_side_by_side.py --quick              # T = 128, 2048, 8192 (< 3 min)
    python bench/bench_vllm_side_by_side.py --paths triton_dense,hopper_dense   # named paths too
    TRITON_INTERPRET=1 python bench/bench_vllm_side_by_side.py --tiny --device cpu
                                                    # the script's logic at toy sizes on the CPU
                                                    # (the Triton interpreter; fp16; wall clock)

Configs: E=512 K=10 H=2048 I=512 and E=128 K=8 H=2048 I=768 (Qwen3-30B-A3B); bf16; routing:
testing.routing's uniform top-K (int32 ids, as vLLM's router gives them, handed to both).
Compared at each (config, T), on the same x, ids, weights and expert stacks:
  argon:auto     torch_argon.moe_experts(..., path="auto"): the implementation the layer picks
                 (named in the record), plan + GEMMs + combine
  argon:<name>   the same with path=<name>, for each --paths name (a new implementation is
                 measured here by name before the layer's automatic choice may take it)
  vllm           bench/baselines/vllm_fused_moe.py: vLLM's fused_experts_impl with its
                 fused_moe_kernel and the config vLLM picks (its tuned file for this E, N and
                 device when one exists, else its default rule: the record says which), the
                 compiled glue ops replaced by equivalents (vllm_glue.py) timed inside its path
Timing: every call captured into its own CUDA graph, the graphs replayed in turns (3 rounds;
timing.interleaved_graphs_us), the median per call; the GPU heated first. vLLM's glue (the
alignment, activation and top-k sum) is also timed alone, so its share can be read off
(vllm_glue_us). Checks: every output's relative error against torch_argon.reference.moe_layer
(float64), recorded, and flagged when above 2e-2. TFLOP/s: 6*T*K*H*I FLOP over the time.

Robust: a call that raises (a declining path, a failed capture) becomes an error record and the
rest goes on; the JSON is rewritten after every point; --budget-s (170 with --quick) skips the
points left past that many seconds, each recorded as an error row.

Records (JSON list; --json, default $OUT/vllm_side_by_side.json, else
bench/results/vllm_side_by_side.json):
  {"op": "vllm_baseline", "vllm", "wheel", "wheel_sha256", "device", "torch", "triton"}
  {"op": "vllm_side_by_side", "config", "E", "K", "H", "I", "T", "dtype", "impl", "chosen",
   "median_us", "tflops", "rel_err", "vllm_us", "vllm_over_impl", "timing", "device"}
   (impl "vllm" records add "vllm_config", "vllm_config_source", "vllm_glue_us")
  {"op": "vllm_side_by_side_error", "config", "T", "impl", "error"}
"""
import argparse
import json
import os
import sys
import time
import traceback

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
if os.environ.get("TRITON_INTERPRET") == "1":  # --tiny on the CPU (before the kernels import)
    from torch_argon.testing.triton_interpreter import enable
    enable()
import torch_argon  # noqa: E402
from bench.baselines import vllm_fused_moe  # noqa: E402
from torch_argon import reference  # noqa: E402
from torch_argon.testing.layers import relative_error  # noqa: E402
from torch_argon.testing.routing import routing  # noqa: E402
from torch_argon.testing.timing import graph_us, heat, interleaved_graphs_us  # noqa: E402

CONFIGS = {"E512": dict(E=512, K=10, H=2048, I=512), "E128": dict(E=128, K=8, H=2048, I=768)}
T_LIST = (128, 512, 2048, 8192, 16384)
QUICK_T = (128, 2048, 8192)
TINY_CONFIGS = {"E512": dict(E=8, K=2, H=64, I=32), "E128": dict(E=4, K=2, H=64, I=64)}
TINY_T = (16, 40)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
REL_ERR_LIMIT = 2e-2  # bf16 GEMMs against float64: about 4e-3 seen; far above means wrong
VLLM = "vllm"


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help="E512 and/or E128, or ExKxHxI, comma separated")
    ap.add_argument("--T", help=f"comma list (default {','.join(map(str, T_LIST))}; --quick "
                    f"{','.join(map(str, QUICK_T))})")
    ap.add_argument("--paths", default="",
                    help="torch_argon experts paths timed besides auto, comma separated "
                         "(torch_argon.experts.PATHS: an implementation's name or a family)")
    ap.add_argument("--quick", action="store_true", help="T = 128, 2048, 8192: under 3 minutes")
    ap.add_argument("--dtype", default="bf16", choices=DTYPES)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved replay rounds")
    ap.add_argument("--no-glue", action="store_true", help="skip timing vLLM's glue alone")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="skip the points left past this many seconds from the start, recorded "
                         "as error rows (default: 170 with --quick, else none)")
    ap.add_argument("--tiny", action="store_true", help="toy sizes (a logic test; --device cpu)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.json is None:
        args.json = (os.path.join(os.environ["OUT"], "vllm_side_by_side.json")
                     if os.environ.get("OUT") else
                     os.path.join(ROOT, "bench", "results", "vllm_side_by_side.json"))
    table = TINY_CONFIGS if args.tiny else CONFIGS
    args.configs = {name: config_of(name, table) for name in args.configs.split(",") if name}
    args.T = (tuple(int(t) for t in args.T.split(",")) if args.T else
              TINY_T if args.tiny else QUICK_T if args.quick else T_LIST)
    args.paths = ["auto"] + [p for p in args.paths.split(",") if p and p != "auto"]
    if args.budget_s is None:
        args.budget_s = 170.0 if args.quick else float("inf")
    args.dtype = torch.float16 if args.tiny else DTYPES[args.dtype]  # bf16 dots: not in the
    return args                                                       # interpreter


def config_of(name, table):
    if name in table:
        return dict(table[name])
    parts = name.lower().split("x")
    if len(parts) != 4 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise SystemExit(f"--configs: {name!r} is neither {' / '.join(table)} nor ExKxHxI")
    return dict(zip("EKHI", map(int, parts)))


def device_name(device):
    return torch.cuda.get_device_name() if device == "cuda" else device


def make_experts(cfg, dtype, device, seed=0):
    """Expert stacks [E, 2I, H] and [E, H, I] with O(1) outputs (rows N(0, 1/fan-in))."""
    E, H, I = cfg["E"], cfg["H"], cfg["I"]
    g = torch.Generator(device=device).manual_seed(seed)
    w_gate_up = (torch.randn(E, 2 * I, H, generator=g, device=device) * H ** -0.5).to(dtype)
    w_down = (torch.randn(E, H, I, generator=g, device=device) * I ** -0.5).to(dtype)
    return w_gate_up, w_down


class Point:
    """One (config, T): the inputs, the float64 reference, and the calls to time."""

    def __init__(self, cfg, T, dtype, device, weights):
        E, K, H = cfg["E"], cfg["K"], cfg["H"]
        g = torch.Generator(device=device).manual_seed(T)
        self.x = torch.randn(T, H, generator=g, device=device).to(dtype)
        ids, self.w = routing(T, E, K, "uniform", seed=T, device=device)
        self.ids = ids.int()
        self.weights = weights
        self.ref = reference.moe_layer(self.x, None, weights, K, topk_ids=self.ids,
                                       topk_weights=self.w)

    def argon(self, path):
        x, ids, w, experts = self.x, self.ids, self.w, self.weights
        return lambda: torch_argon.moe_experts(x, ids, w, experts, path=path)


def time_calls(calls, device, rounds):
    """{name: us} of the calls that capture, timed interleaved; {name: error} of the others."""
    errors, good = {}, {}
    for name, fn in calls.items():
        try:
            interleaved_graphs_us({name: fn}, device, rounds=1, samples=1)  # capture check
            good[name] = fn
        except Exception as e:  # noqa: BLE001 (one failing call keeps the others)
            errors[name] = f"{type(e).__name__}: {str(e)[:400]}"
            if device == "cuda":
                torch.cuda.synchronize()
    if device == "cuda":
        heat()
    us = interleaved_graphs_us(good, device, rounds=rounds) if good else {}
    return us, errors


def glue_us(vllm_experts, point, config, top_k):
    """vLLM's glue ops alone at this point (graph replay): the alignment at the config's
    BLOCK_SIZE_M, the activation on the [T*K, 2I] gate/up rows, the top-k sum."""
    fm = vllm_fused_moe.kernel_module()
    from bench.baselines import vllm_glue
    T, H = point.x.shape
    two_i = vllm_experts.w1.shape[1]
    dev = point.x.device
    gu = torch.randn(T * top_k, two_i, device=dev).to(point.x.dtype)
    h = torch.empty(T * top_k, two_i // 2, device=dev, dtype=point.x.dtype)
    y3 = torch.randn(T, top_k, H, device=dev).to(point.x.dtype)
    out = torch.empty(T, H, device=dev, dtype=point.x.dtype)
    E = vllm_experts.w1.shape[0]
    calls = {
        "align": lambda: fm.moe_align_block_size(point.ids, config["BLOCK_SIZE_M"], E, None,
                                                 ignore_invalid_experts=True),
        "activation": lambda: vllm_glue.act_and_mul("silu", h, gu),
        "moe_sum": lambda: vllm_glue.moe_sum(y3, out),
    }
    return {name: round(graph_us(fn, dev.type, samples=10), 2) for name, fn in calls.items()}


def bench_point(args, cfg_name, cfg, T, weights, vllm_experts, records):
    E, K, H, I = cfg["E"], cfg["K"], cfg["H"], cfg["I"]
    dev = args.device
    common = dict(config=cfg_name, E=E, K=K, H=H, I=I, T=T,
                  dtype=str(args.dtype).replace("torch.", ""))
    point = Point(cfg, T, args.dtype, dev, weights)
    chosen = torch_argon.experts.choose(point.x, weights, n_entries=T * K).name
    calls = {f"argon:{p}": point.argon(p) for p in args.paths}
    if vllm_experts is not None:
        calls[VLLM] = lambda: vllm_experts(point.x, point.w, point.ids)
    errs = {}
    for name, fn in list(calls.items()):  # a first call: compiles, and checks the output
        try:
            errs[name] = relative_error(fn(), point.ref)
        except Exception as e:  # noqa: BLE001 (one failing call keeps the others)
            traceback.print_exc()
            records.append(dict(op="vllm_side_by_side_error", config=cfg_name, T=T, impl=name,
                                error=f"{type(e).__name__}: {str(e)[:500]}"))
            del calls[name]
    us, capture_errors = time_calls(calls, dev, args.rounds)
    for name, error in capture_errors.items():
        records.append(dict(op="vllm_side_by_side_error", config=cfg_name, T=T, impl=name,
                            error=error))
    flops = 6.0 * T * K * H * I
    vllm_us = us.get(VLLM)
    line = f"{cfg_name} T={T:6d}"
    for name, t in us.items():
        rec = dict(op="vllm_side_by_side", **common, impl=name,
                   chosen=chosen if name == "argon:auto" else None, median_us=round(t, 2),
                   tflops=round(flops / t / 1e6, 1), rel_err=float(f"{errs[name]:.3g}"),
                   vllm_us=None if vllm_us is None else round(vllm_us, 2),
                   vllm_over_impl=None if vllm_us is None else round(vllm_us / t, 3),
                   timing="graph, interleaved" if dev == "cuda" else "wall",
                   device=device_name(dev))
        if name == VLLM:
            config, source = vllm_fused_moe.chosen_config(vllm_experts.w1, vllm_experts.w2, K,
                                                          args.dtype, T)
            rec.update(vllm_config=config, vllm_config_source=source)
            if not args.no_glue:
                try:
                    rec["vllm_glue_us"] = glue_us(vllm_experts, point, config, K)
                except Exception as e:  # noqa: BLE001 (the row stands without the split)
                    rec["vllm_glue_us"] = f"{type(e).__name__}: {str(e)[:200]}"
        if errs[name] > REL_ERR_LIMIT:
            rec["wrong"] = f"relative error {errs[name]:.3g} above {REL_ERR_LIMIT}"
        records.append(rec)
        line += f" | {name} {t:8.1f} us {rec['tflops']:6.1f} TF/s"
    print(line + (f" | errors: {sorted(set(calls) - set(us)) + sorted(capture_errors)}"
                  if len(us) < len(calls) or capture_errors else ""), flush=True)


def table(records):
    rows = [r for r in records if r["op"] == "vllm_side_by_side"]
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    print("\n=== experts path side by side with vLLM's fused_moe (us, TFLOP/s; "
          "vllm/impl > 1: faster than vLLM) ===")
    print(f"{'config':7s} {'T':>6s} " + " ".join(f"{i:>26s}" for i in impls)
          + "  vllm config, its glue alone")
    by = {}
    for r in rows:
        by.setdefault((r["config"], r["T"]), {})[r["impl"]] = r
    for (cfg, T), got in by.items():
        cells = []
        for i in impls:
            r = got.get(i)
            if r is None:
                cells.append(f"{'-':>26s}")
                continue
            ratio = "" if i == VLLM or r["vllm_over_impl"] is None else \
                f" {r['vllm_over_impl']:.2f}x"
            flag = "!" if "wrong" in r else ""
            cells.append(f"{r['median_us']:9.1f} {r['tflops']:6.1f}{ratio:>7s}{flag:1s}".rjust(26))
        v = got.get(VLLM, {})
        glue = v.get("vllm_glue_us")
        glue = f", glue {sum(glue.values()):.1f} us" if isinstance(glue, dict) else ""
        print(f"{cfg:7s} {T:6d} " + " ".join(cells) + f"  {v.get('vllm_config_source', '-')}"
              + glue)
    chosen = {(r["config"], r["T"]): r["chosen"] for r in rows if r["impl"] == "argon:auto"}
    if chosen:
        print("argon:auto ran: " + ", ".join(sorted(set(chosen.values()))))
    for r in records:
        if r["op"] == "vllm_side_by_side_error":
            print(f"ERROR {r['config']} T={r['T']} {r['impl']}: {r['error'][:300]}")
        elif "wrong" in r:
            print(f"WRONG {r['config']} T={r['T']} {r['impl']}: {r['wrong']}")


def main(argv=None):
    args = parse_args(argv)
    start = time.time()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_vllm_side_by_side.py: no CUDA device (--tiny --device cpu for a dry run)")
    import triton
    records = [dict(op="vllm_baseline", **vllm_fused_moe.version_record(),
                    device=device_name(args.device), torch=torch.__version__,
                    triton=triton.__version__)]
    ok, why = vllm_fused_moe.available()
    print(f"device: {device_name(args.device)}, torch {torch.__version__}, triton "
          f"{triton.__version__}; vLLM baseline: "
          + (f"{records[0]['vllm']} ({records[0]['wheel']})" if ok else f"UNAVAILABLE: {why}"),
          flush=True)

    def save():
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)

    try:
        with torch.inference_mode():
            for cfg_name, cfg in args.configs.items():
                weights = make_experts(cfg, args.dtype, args.device)
                vllm_experts = None
                if ok:
                    try:
                        vllm_experts = vllm_fused_moe.make_experts(*weights, "silu", args.dtype,
                                                                   args.device)
                    except Exception as e:  # noqa: BLE001 (argon's rows still come)
                        traceback.print_exc()
                        records.append(dict(op="vllm_side_by_side_error", config=cfg_name, T=0,
                                            impl=VLLM, error=f"{type(e).__name__}: {e}"))
                else:
                    records.append(dict(op="vllm_side_by_side_error", config=cfg_name, T=0,
                                        impl=VLLM, error=why))
                for T in args.T:
                    if time.time() - start > args.budget_s:
                        records.append(dict(op="vllm_side_by_side_error", config=cfg_name, T=T,
                                            impl="-", error=f"skipped: past --budget-s "
                                                            f"{args.budget_s:.0f} s"))
                        continue
                    try:
                        bench_point(args, cfg_name, cfg, T, weights, vllm_experts, records)
                    except Exception as e:  # noqa: BLE001 (the other points still come)
                        traceback.print_exc()
                        records.append(dict(op="vllm_side_by_side_error", config=cfg_name, T=T,
                                            impl="-", error=f"{type(e).__name__}: {e}"))
                    save()
                del weights, vllm_experts
                if args.device == "cuda":
                    torch.cuda.empty_cache()
    finally:
        save()
        table(records)
        print(f"{len(records)} records written to {args.json}; total {time.time() - start:.0f} s")
    bad = any(r["op"] == "vllm_side_by_side_error" or "wrong" in r for r in records)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
