"""Same-run A/B of the whole layer between two trees: `torch_argon.moe_layer` as a user calls it
(the library's own path and tile_m), one side per process, sides alternating, so a refactor can
show that no figure moved by more than noise.

    python3 bench/layer_ab.py run TAG --tree DIR --out OUT [--T 128,8192] [--configs ...]
    python3 bench/layer_ab.py table OUT [--base base --new new]
    bash bench/layer_ab.sh OLD_TREE NEW_TREE OUT     # base1, new1, new2, base2, then the table

run: with DIR first on sys.path (that tree's torch_argon, built in place), for each config and T,
the layer's GPU time per call under CUDA graph replay (testing.timing.cuda_graph_replays_us of
THIS checkout, loaded by path, so both sides are timed alike; only moe_layer's public signature is
used of the tree under test); x, router and expert stacks drawn from seeded generators on the
device, the same on both sides, bf16. Writes OUT/ab_TAG.json: {"meta": {...}, "points": {key:
us}}, key "E<E>K<K>H<H>I<I>/<T>". Also the layer's output checksum per point, so the table can
say whether both sides computed the same bytes.

table: per point the best of each side's runs and new / base; exits 1 if a point is missing.
"""
import argparse
import glob
import json
import os
import re
import sys

from checkout_modules import this_checkout

DEFAULT_CONFIGS = "512x10x2048x512,128x8x2048x768"  # E x K x H x I


def parse_configs(text):
    return [tuple(int(v) for v in c.split("x")) for c in text.split(",") if c]


def run(args):
    timing = this_checkout("timing")
    sys.path.insert(0, os.path.abspath(args.tree))
    import torch
    import torch_argon

    dev = torch.device("cuda")
    points, sums = {}, {}
    for E, K, H, I in parse_configs(args.configs):
        g = torch.Generator(device=dev).manual_seed(0)
        wgu = (torch.randn(E, 2 * I, H, device=dev, generator=g) / H ** 0.5).bfloat16()
        wd = (torch.randn(E, H, I, device=dev, generator=g) / I ** 0.5).bfloat16()
        router = (torch.randn(E, H, device=dev, generator=g) / H ** 0.5).bfloat16()
        for T in (int(t) for t in args.T.split(",")):
            x = torch.randn(T, H, device=dev, generator=g).bfloat16()
            with torch.inference_mode():
                def layer():
                    return torch_argon.moe_layer(x, router, (wgu, wd), K, renormalize=True)
                out = layer()
                key = f"E{E}K{K}H{H}I{I}/{T}"
                sums[key] = float(out.float().sum())
                points[key] = timing.cuda_graph_replays_us(layer, samples=args.samples)
            print(f"{args.tag} {key}: {points[key]:.1f} us", flush=True)
            del x
        del wgu, wd, router
        torch.cuda.empty_cache()
    meta = dict(tree=os.path.abspath(args.tree), device=torch.cuda.get_device_name(dev),
                torch=torch.__version__)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"ab_{args.tag}.json"), "w") as f:
        json.dump(dict(meta=meta, points=points, checksums=sums), f, indent=1)


def table(args):
    runs = {}
    for path in sorted(glob.glob(os.path.join(args.out, "ab_*.json"))):
        tag = os.path.basename(path)[3:-5]
        runs[tag] = json.load(open(path))
    sides = {side: [r for t, r in runs.items() if re.fullmatch(f"{side}\\d*", t)]
             for side in (args.base, args.new)}
    if not all(sides.values()):
        sys.exit(f"no runs of {[s for s, r in sides.items() if not r]} in {args.out}")
    keys = sorted({k for r in runs.values() for k in r["points"]},
                  key=lambda k: (k.split("/")[0], int(k.split("/")[1])))
    device = next(iter(runs.values()))["meta"]["device"]
    print(f"layer A/B on {device}: best of {len(sides[args.base])} / {len(sides[args.new])} runs "
          "(us per call, CUDA graph replay)")
    print(f"| config / T | {args.base} | {args.new} | {args.new} / {args.base} | same output |")
    print("|---|---:|---:|---:|---|")
    missing = False
    for k in keys:
        best = {}
        for side, rs in sides.items():
            got = [r["points"][k] for r in rs if k in r["points"]]
            missing |= len(got) < len(rs)
            best[side] = min(got) if got else float("nan")
        same = len({round(r["checksums"][k], 3) for rs in sides.values() for r in rs
                    if k in r["checksums"]}) == 1
        print(f"| {k} | {best[args.base]:.1f} | {best[args.new]:.1f} | "
              f"{best[args.new] / best[args.base]:.3f} | {'yes' if same else 'no'} |")
    sys.exit(1 if missing else 0)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("tag")
    r.add_argument("--tree", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--T", default="128,8192")
    r.add_argument("--configs", default=DEFAULT_CONFIGS)
    r.add_argument("--samples", type=int, default=20)
    t = sub.add_parser("table")
    t.add_argument("out")
    t.add_argument("--base", default="base")
    t.add_argument("--new", default="new")
    args = p.parse_args()
    run(args) if args.cmd == "run" else table(args)


if __name__ == "__main__":
    main()
