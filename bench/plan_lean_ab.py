"""Same-run A/B of the CUDA plan between two builds (issue 30: the lean plan against 18cadd2),
one side per process; bench/plan_lean_ab.sh runs the sides alternately and prints the table.

    PYTHONPATH=<a side's tree> python3 bench/plan_lean_ab.py run TAG --out DIR [options]
    python3 bench/plan_lean_ab.py table DIR [--base base --new new --flag 0.2]

run: for each config (E x K, tile_m 16), routing (uniform: top-k of random scores; zipf: Zipf(1.2)
expert popularity, K distinct experts per token) and T, the plan's GPU time per call under CUDA
graph replay (testing.timing.cuda_graph_us, best of --reps, after heat()), plans back to back
("b2b") and behind the Triton router top-k ("topk": graph of [top-k, plan] less graph of
[top-k], as bench_cuda.py's plan_after_topk); every plan, and what the timed replays left in the
outputs, checked bit for bit against torch_argon.reference. The routings and timers are this
checkout's (torch_argon/testing/routing.py and timing.py, loaded by path: they import torch
only), whichever tree is under test; of that tree only APIs both sides have are used
(torch.ops.argon.moe_plan / moe_plan_out, reference, triton_ops.topk_triton). Writes DIR/ab_TAG.json: {"meta": {...}, "points": {key: [us, exact]}},
key "E<E>K<K>/<routing>/<T>/<b2b|topk>".

table: the best of each side's runs (tags base1, base2, ... are side "base"), new minus base,
bit-exact when every run of both sides was; rows whose delta is above --flag are marked. Exits
1 if a point is missing or not bit-exact, 3 if a delta is above --flag, else 0.
"""
import argparse
import glob
import json
import os
import re
import sys

from checkout_modules import this_checkout

DEFAULT_T = "1,16,128,512,1024,2048,3072,4096,6144,8192,16384"
DEFAULT_CONFIGS = "512x10,128x8"  # E x K
TILE_M = 16


def parse_configs(text):
    configs = []
    for item in filter(None, text.split(",")):
        m = re.fullmatch(r"(\d+)x(\d+)", item.strip())
        if not m or int(m.group(2)) > int(m.group(1)):
            raise SystemExit(f"--configs: expected ExK with K <= E, e.g. 512x10, got {item!r}")
        configs.append((int(m.group(1)), int(m.group(2))))
    return configs


def parse_ts(text):
    try:
        ts = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise SystemExit(f"--T: expected comma-separated token counts, got {text!r}") from None
    if not ts or min(ts) < 1:
        raise SystemExit(f"--T: token counts must be >= 1, got {text!r}")
    return ts


def key(E, K, dist, T, timing):
    return f"E{E}K{K}/{dist}/{T}/{timing}"


def split_key(k):
    ek, dist, T, timing = k.split("/")
    return ek, dist, int(T), timing


# ---- run (one side, on the GPU) ------------------------------------------------------------

def run(args):
    import torch

    import torch_argon
    from torch_argon import reference
    routing = this_checkout("routing").routing
    timing = this_checkout("timing")
    cuda_graph_us, heat = timing.cuda_graph_us, timing.heat
    if not torch.cuda.is_available():
        raise SystemExit("plan_lean_ab.py run: torch sees no CUDA device")
    topk = None
    if not args.no_topk:
        from torch_argon import triton_ops
        if triton_ops.AVAILABLE:
            topk = triton_ops.topk_triton
        else:
            print(f"no top-k rows: {triton_ops.REASON}", flush=True)
    plan_op, plan_out_op = torch.ops.argon.moe_plan, torch.ops.argon.moe_plan_out
    print(f"{args.tag}: torch_argon from {os.path.dirname(os.path.abspath(torch_argon.__file__))}",
          flush=True)
    points = {}
    for E, K in parse_configs(args.configs):
        for dist in ("uniform", "zipf"):
            for T in parse_ts(args.T):
                ids, w = routing(T, E, K, dist, seed=T + E, device="cuda")
                out = plan_op(ids, w, E, TILE_M)
                want = tuple(reference.moe_plan(ids.cpu(), w.cpu(), E, TILE_M))[:7]

                def exact():
                    return all(torch.equal(a.cpu().view(torch.int32), b.view(torch.int32))
                               for a, b in zip(out, want))

                def plan():
                    plan_out_op(ids, w, E, TILE_M, *out)
                ok = exact()
                heat()
                b2b = min(cuda_graph_us(plan) for _ in range(args.reps))
                ok = ok and exact()  # what the timed replays wrote
                points[key(E, K, dist, T, "b2b")] = [b2b, ok]
                line = f"{args.tag} E={E} K={K} {dist:7s} T={T:6d} b2b {b2b:7.2f} us"
                if topk is not None:
                    scores = torch.rand(T, E, device="cuda")

                    def before():
                        topk(scores, K)

                    def chain():
                        before()
                        plan()
                    after = min(cuda_graph_us(chain) - cuda_graph_us(before)
                                for _ in range(args.reps))
                    ok_topk = exact()
                    points[key(E, K, dist, T, "topk")] = [after, ok_topk]
                    line += f"  behind top-k {after:7.2f} us"
                    ok = ok and ok_topk
                print(f"{line}  bit_exact={ok}", flush=True)
    tree = os.path.dirname(os.path.abspath(torch_argon.__file__))
    meta = dict(tag=args.tag, torch_argon=tree, device=torch.cuda.get_device_name(),
                torch=torch.__version__, reps=args.reps)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"ab_{args.tag}.json"), "w") as f:
        json.dump(dict(meta=meta, points=points), f, indent=0)


# ---- table (no GPU) ------------------------------------------------------------------------

def load_sides(folder):
    """{side: {key: (best us, every run bit-exact)}} from DIR/ab_<side><repeat>.json."""
    sides = {}
    for path in sorted(glob.glob(os.path.join(folder, "ab_*.json"))):
        side = re.sub(r"\d+$", "", os.path.basename(path)[len("ab_"):-len(".json")])
        with open(path) as f:
            points = json.load(f)["points"]
        for k, (us, exact) in points.items():
            best, all_exact = sides.setdefault(side, {}).get(k, (float("inf"), True))
            sides[side][k] = (min(best, us), all_exact and bool(exact))
    return sides


def table(folder, base="base", new="new", flag=0.2, out=sys.stdout):
    """Prints the table; returns the exit code (see the module's docstring)."""
    sides = load_sides(folder)
    missing_sides = [s for s in (base, new) if s not in sides]
    if missing_sides:
        print(f"no ab_<side>N.json for {missing_sides} in {folder} (found {sorted(sides)})",
              file=out)
        return 1
    def order(k):  # the largest E first, back to back before behind the top-k
        ek, dist, T, timing = split_key(k)
        return -int(re.match(r"E(\d+)", ek).group(1)), ek, timing, dist, T
    keys = sorted(set(sides[base]) | set(sides[new]), key=order)
    print(f"{'config':10s} {'timing':6s} {'routing':8s} {'T':>6s} {'base us':>8s} {'new us':>8s}"
          f" {'delta':>7s}  bit-exact", file=out)
    absent = (float("nan"), False)
    bad, flagged = [], []
    group = None
    for k in keys:
        ek, dist, T, timing = split_key(k)
        if (ek, timing) != group:
            if group is not None:
                print(file=out)
            group = (ek, timing)
        (a, a_ok), (b, b_ok) = sides[base].get(k, absent), sides[new].get(k, absent)
        ok = a_ok and b_ok
        delta = b - a
        mark = ""
        if not ok:
            bad.append(k)
            mark = "  <-- NOT BIT-EXACT" if a == a and b == b else "  <-- MISSING"
        elif delta > flag:
            flagged.append(k)
            mark = f"  <-- slower by more than {flag} us"
        print(f"{ek:10s} {timing:6s} {dist:8s} {T:6d} {a:8.2f} {b:8.2f} {delta:+7.2f}  "
              f"{'yes' if ok else 'NO'}{mark}", file=out)
    deltas = [sides[new][k][0] - sides[base][k][0] for k in keys
              if k in sides[base] and k in sides[new]] or [float("nan")]
    print(f"\n{len(keys)} points; delta new - base: min {min(deltas):+.2f}, max "
          f"{max(deltas):+.2f}, mean {sum(deltas) / len(deltas):+.3f} us; "
          f"{len(flagged)} above +{flag} us; {len(bad)} not bit-exact or missing", file=out)
    return 1 if bad else 3 if flagged else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="time one side (on the GPU)")
    r.add_argument("tag", help="the side and repeat, e.g. base1, new2 (trailing digits: repeat)")
    r.add_argument("--out", required=True, help="folder for ab_<tag>.json")
    r.add_argument("--T", default=DEFAULT_T, help="token counts, comma separated")
    r.add_argument("--configs", default=DEFAULT_CONFIGS, help="E x K, comma separated")
    r.add_argument("--reps", type=int, default=3, help="timings per point (the best is kept)")
    r.add_argument("--no-topk", action="store_true", help="plans back to back only")
    r.add_argument("--check-args", action="store_true",
                   help="only check the arguments (no GPU): for plan_lean_ab.sh")
    t = sub.add_parser("table", help="the table of a run's ab_*.json (no GPU)")
    t.add_argument("folder")
    t.add_argument("--base", default="base")
    t.add_argument("--new", default="new")
    t.add_argument("--flag", type=float, default=0.2, help="mark deltas above this (us)")
    args = p.parse_args()
    if args.cmd == "run":
        if not re.fullmatch(r"[A-Za-z_]+\d*", args.tag):
            raise SystemExit(f"tag: letters, then an optional repeat number; got {args.tag!r}")
        parse_configs(args.configs), parse_ts(args.T)  # bad arguments fail before the GPU work
        if not args.check_args:
            run(args)
        return 0
    return table(args.folder, args.base, args.new, args.flag)


if __name__ == "__main__":
    sys.exit(main())
