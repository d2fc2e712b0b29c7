"""One side of an A/B of the CUDA plan: time moe_plan in the bench metric (GPU time per call
under CUDA graph replay, plans back to back, as bench_cuda.py's "plan" rows) and check every
plan against the CPU backend bit for bit. bench/plan_ab.sh runs it for two builds, alternately,
and bench/plan_ab_table.py compares them.

    PYTHONPATH=<build> python bench/plan_ab.py TAG --out DIR [--T 1,128,...] [--knobs k=v,...]

Each (dist, T) is timed three times and the lowest kept; the result goes to DIR/ab_TAG.json as
{"<dist>/<T>": [us, bit_exact]}. Unless --no-topk, each point is also timed behind the Triton
router top-k, as in a layer (bench_cuda.py's "plan_after_topk": graph replay of [top-k, plan]
less [top-k] alone, dependent launch as the launcher sets it), under "topk+<dist>/<T>": a plan
change can move that sequence differently from plans back to back (bench/plan_cuda_notes.md,
session 12). --knobs sets plan_tuning knobs by name for the run (see
torch_argon/testing/plan_tuning.py), e.g. --knobs grid_replicas=7,grid_cluster=16. --ids int32 times
the same routing with int32 ids (the keys stay the same, so two runs of one build, one with
int64 ids and one with int32, make an A/B of the ids' width).
"""
import argparse
import json
import os
import sys

import torch

# torch_argon from PYTHONPATH (the build under test), else this checkout; then bench_cuda.
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch_argon  # noqa: E402
from bench_cuda import E, K, TM, behind, behind_us, plan_bits_equal  # noqa: E402
from torch_argon.testing.plan_tuning import set_plan_knobs  # noqa: E402
from torch_argon.testing.routing import routing  # noqa: E402
from torch_argon.testing.timing import cuda_graph_us, heat  # noqa: E402

DEFAULT_T = "1,16,128,512,1024,2048,3072,4096,6144,8192"


def parse_knobs(text):
    knobs = {}
    for item in filter(None, text.split(",")):
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--knobs: expected name=value, got {item!r}")
        knobs[name] = int(value)
    return knobs


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("tag", help="name of this side, e.g. old1 or new1 (digits at the end are "
                               "the repeat: plan_ab_table.py keeps each tag's best)")
    p.add_argument("--out", required=True, help="folder for ab_<tag>.json")
    p.add_argument("--T", default=DEFAULT_T, help="token counts, comma separated")
    p.add_argument("--knobs", default="", help="plan_tuning knobs, name=value, comma separated")
    p.add_argument("--ids", choices=("int64", "int32"), default="int64",
                   help="the ids' dtype (the same routing either way; torch.topk gives int64)")
    p.add_argument("--no-topk", action="store_true",
                   help="time plans back to back only, not also behind the router top-k")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("plan_ab.py times the CUDA plan: torch sees no CUDA device")
    knobs = parse_knobs(args.knobs)
    if knobs:
        set_plan_knobs(**knobs)
    ops = torch_argon.argon_ops
    results = {}
    for dist in ("uniform", "zipf"):
        for T in (int(t) for t in args.T.split(",")):
            ids, w = routing(T, E, K, dist, seed=T, device="cuda")
            if args.ids == "int32":
                ids = ids.int()
            out = ops.moe_plan(ids, w, E, TM)
            exact = plan_bits_equal(out, ids, w)
            heat()  # clocks up (see torch_argon/testing/timing.py)
            def plan():
                ops.moe_plan(ids, w, E, TM, out=out)
            times = [cuda_graph_us(plan) for _ in range(3)]
            exact = exact and plan_bits_equal(out, ids, w)  # what the timed replays wrote
            results[f"{dist}/{T}"] = [min(times), exact]
            print(f"{args.tag} {dist:8s} T={T:6d} {min(times):6.2f} us "
                  f"({' '.join(f'{t:.2f}' for t in times)}) bit_exact={exact}", flush=True)
            topk = None if args.no_topk else behind(T).get("plan_after_topk")
            if topk is not None:  # (None without Triton)
                after = [behind_us(topk, plan) for _ in range(3)]
                exact = exact and plan_bits_equal(out, ids, w)
                results[f"topk+{dist}/{T}"] = [min(after), exact]
                print(f"{args.tag} {dist:8s} T={T:6d} behind top-k {min(after):6.2f} us "
                      f"({' '.join(f'{t:.2f}' for t in after)}) bit_exact={exact}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"ab_{args.tag}.json"), "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
