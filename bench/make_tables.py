"""Turn benchmark results into the README's tables.

    python bench/make_tables.py --raw PATH    # PATH: the JSON a bench/bench_ops.py run wrote
    python bench/make_tables.py               # the tables again from bench/results/*.json

With --raw, reads the pytest-benchmark JSON of bench/bench_ops.py (its run prints where it
went, by default outside the checkout: bench/conftest.py), keeps a copy as
bench/results/cpu_ops_raw.json and writes bench/results/cpu.json (records {"op", "backend", "T",
"E", "K", "tm", "dist", "median_us", "baseline", "baseline_median_us"}). Then, with or without
it, regenerates every table of README.md between its `<!-- table:NAME -->` markers from
bench/results/*.json. Tables are never typed by hand.
"""
import argparse
import json
import re
from pathlib import Path

from distributed_table import distributed_table

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def records_from_pytest_benchmark(raw):
    """One record per (op, device, baseline): argon's median against that baseline's."""
    by_key = {}
    for b in raw["benchmarks"]:
        info = b["extra_info"]
        by_key.setdefault((info["op"], info["device"]), {})[info["impl"]] = (b["stats"]["median"], info)
    records = []
    for (op, dev), impls in sorted(by_key.items()):
        if "argon" not in impls:
            continue
        argon_s, info = impls["argon"]
        for impl, (s, _) in sorted(impls.items()):
            if impl == "argon":
                continue
            records.append(dict(op=op, backend=dev, T=info["T"], E=info["E"], K=info["K"],
                                tm=info["tm"], dist=info["dist"], median_us=round(argon_s * 1e6, 2),
                                baseline=impl, baseline_median_us=round(s * 1e6, 2)))
    return records


def ops_table(records):
    rows = ["| op | backend | T | E | K | argon (us) | baseline | baseline (us) | speedup |",
            "|---|---|---:|---:|---:|---:|---|---:|---:|"]
    for r in records:
        if r["op"].startswith("moe_layer"):
            continue
        rows.append(f"| {r['op']} | {r['backend']} | {r['T']} | {r['E']} | {r['K']} | "
                    f"{r['median_us']:.1f} | {r['baseline']} | {r['baseline_median_us']:.1f} | "
                    f"{r['baseline_median_us'] / r['median_us']:.1f}x |")
    return "\n".join(rows)


CUDA_OPS = ("plan", "plan_after_kernel", "plan_after_topk", "plan_eager", "gather", "combine",
            "swiglu", "moe_mm")


def cuda_ops_table(records):
    """The H200 op records (bench/bench_cuda.py): each op against its plain-torch baseline."""
    rows = ["| op | T | routing | argon (us) | baseline | baseline (us) | speedup | timing |",
            "|---|---:|---|---:|---|---:|---:|---|"]
    for r in sorted((r for r in records if r["op"] in CUDA_OPS),
                    key=lambda r: (CUDA_OPS.index(r["op"]), "ids" in r, r["T"], r["dist"])):
        base = r.get("baseline_median_us")
        timing = r.get("timing", "eager")
        if r.get("baseline_timing", timing) != timing:
            timing += f" (baseline {r['baseline_timing']})"
        label = r["op"] + "".join(f" {r[k]}" for k in ("dtype", "api", "ids") if r.get(k))
        vs = f"{base:.1f} | {base / r['median_us']:.2f}x" if base else "- | -"
        rows.append(f"| {label} | {r['T']} | {r['dist']} | {r['median_us']:.1f} | "
                    f"{r.get('baseline') or '-'} | {vs} | {timing} |")
    return "\n".join(rows)


def layer_shape(r):
    """(E, K, H, I) of a layer record; records from before these were recorded are the E=512
    layer."""
    return tuple(r.get(k, d) for k, d in (("E", 512), ("K", 10), ("H", 2048), ("I", 512)))


def shape_label(shape):
    return "E={} K={} H={} I={}".format(*shape)


def layer_table(records):
    """The whole layer (bench/bench_layer.py) against each baseline and the floors, per layer
    config and T."""
    rows = ["| config | T | argon layer (us) | vs argon ops path (us) | "
            "vs argsort + grouped_mm (us) | vs per-expert loop (us) | weight-read floor (us) | "
            "matrix floor (us) | layer / larger floor |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    layer = {}
    for r in records:
        if r["op"] == "moe_layer":
            layer.setdefault((layer_shape(r), r["T"]), {})[r["baseline"]] = r
    for (shape, T), by_base in sorted(layer.items()):
        any_r = next(iter(by_base.values()))
        cells = []
        for name in ("layer_argon_ops_path", "layer_argsort_grouped_mm", "layer_per_expert_loop"):
            b = by_base.get(name)
            cells.append(f"{b['baseline_median_us']:.0f} ({b['baseline_median_us'] / b['median_us']:.1f}x)"
                         if b else "-")
        floor = any_r.get("weight_read_floor_us")
        matrix = any_r.get("matrix_floor_us")
        larger = max(floor or 0, matrix or 0)
        rows.append(f"| {shape_label(shape)} | {T} | {any_r['median_us']:.0f} | "
                    f"{' | '.join(cells)} | {floor:.0f} | {f'{matrix:.0f}' if matrix else '-'} | "
                    f"{any_r['median_us'] / larger:.2f} |")
    return "\n".join(rows)


def stage_table(records):
    """Each stage's time and share of the layer, with its baseline: a row per config and T."""
    stages = [r for r in records if r["op"].startswith("moe_layer/")]
    names = list(dict.fromkeys(r["op"].split("/", 1)[1] for r in stages))
    points = sorted({(layer_shape(r), r["T"]) for r in stages})
    rows = ["| config | T | " + " | ".join(f"{n}: us (share) / baseline us" for n in names) + " |",
            "|---|---:|" + "---:|" * len(names)]
    for shape, T in points:
        cells = []
        for name in names:
            r = next((r for r in stages if r["op"] == f"moe_layer/{name}" and r["T"] == T
                      and layer_shape(r) == shape), None)
            base = f" / {r['baseline_median_us']:.1f}" if r and r.get("baseline_median_us") else ""
            cells.append(f"{r['median_us']:.1f} ({r['share_of_layer'] * 100:.0f}%){base}" if r else "-")
        rows.append(f"| {shape_label(shape)} | {T} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def fill(readme, name, table):
    pattern = re.compile(rf"(<!-- table:{name} -->\n).*?(<!-- /table:{name} -->)", re.S)
    if not pattern.search(readme):
        return readme
    return pattern.sub(lambda m: m.group(1) + table + "\n" + m.group(2), readme)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--raw", type=Path, help="pytest-benchmark JSON of bench/bench_ops.py to "
                   "publish (without it, the tables are regenerated from bench/results as is)")
    args = p.parse_args()
    if args.raw is not None:
        if not args.raw.is_file():
            p.error(f"--raw {args.raw}: no such file")
        text = args.raw.read_text()
        raw = json.loads(text)
        records = records_from_pytest_benchmark(raw)
        machine = raw.get("machine_info", {})
        kept = RESULTS / "cpu_ops_raw.json"
        if args.raw.resolve() != kept.resolve():
            kept.write_text(text)
        (RESULTS / "cpu.json").write_text(json.dumps(records, indent=1) + "\n")
        print(f"wrote {RESULTS / 'cpu.json'} ({len(records)} records) and {kept} from {args.raw}"
              f" on {machine.get('cpu', {}).get('brand_raw', 'unknown cpu')}")
    readme_path = ROOT / "README.md"
    readme = readme_path.read_text()
    sources = {"cpu": (RESULTS / "cpu.json", ops_table),
               "h200": (RESULTS / "h200.json", cuda_ops_table),
               "h200-layer": (RESULTS / "h200.json", layer_table),
               "h200-stages": (RESULTS / "h200.json", stage_table),
               "cpu_distributed": (RESULTS / "cpu_distributed.json", distributed_table),
               "h200x2": (RESULTS / "h200x2.json", distributed_table)}
    for name, (path, make) in sources.items():
        if path.exists():
            readme = fill(readme, name, make(json.loads(path.read_text())))
    readme_path.write_text(readme)
    print(f"updated {readme_path}")


if __name__ == "__main__":
    main()
