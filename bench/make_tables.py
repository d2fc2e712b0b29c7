"""Turn benchmark results into the tables of README.md and bench/README.md.

    python bench/make_tables.py --raw PATH    # PATH: the JSON a bench/bench_ops.py run wrote
    python bench/make_tables.py               # the tables again from bench/results/*.json

With --raw, reads the pytest-benchmark JSON of bench/bench_ops.py (its run prints where it
went, by default outside the checkout: bench/conftest.py), keeps a copy as
bench/results/cpu_ops_raw.json and writes bench/results/cpu.json (records {"op", "backend", "T",
"E", "K", "tm", "dist", "median_us", "baseline", "baseline_median_us"}). Then, with or without
it, fills every `<!-- table:NAME -->` ... `<!-- /table:NAME -->` block of the documents in
DOCS from bench/results/*.json (TABLES says which results and which function make each one).
Tables are never typed by hand: a marker of an unknown name, or a table missing its marker, is
an error; a table whose results are not there yet says so in its block.
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


def _x(base, ours):
    """A baseline's time with how many times ours it is: '1581 (2.2x)'."""
    return f"{base:.0f} ({base / ours:.1f}x)"


def layer_table(records):
    """The whole layer (bench/bench_layer.py) against each baseline and the floors, per layer
    config and T."""
    rows = ["| config | T | argon layer (us) | argsort + grouped_mm (us) | argon ops path (us) | "
            "per-expert loop (us) | floors: weights / matrix (us) | layer / larger floor |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    layer = {}
    for r in records:
        if r["op"] == "moe_layer":
            layer.setdefault((layer_shape(r), r["T"]), {})[r["baseline"]] = r
    for (shape, T), by_base in sorted(layer.items()):
        any_r = next(iter(by_base.values()))
        cells = []
        for name in ("layer_argsort_grouped_mm", "layer_argon_ops_path", "layer_per_expert_loop"):
            b = by_base.get(name)
            cells.append(_x(b["baseline_median_us"], b["median_us"]) if b else "-")
        floor = any_r.get("weight_read_floor_us")
        matrix = any_r.get("matrix_floor_us")
        larger = max(floor or 0, matrix or 0)
        floors = " / ".join(f"{f:.0f}" if f else "-" for f in (floor, matrix))
        ratio = f"{any_r['median_us'] / larger:.2f}" if larger else "-"
        rows.append(f"| {shape_label(shape)} | {T} | {any_r['median_us']:.0f} | "
                    f"{' | '.join(cells)} | {floors} | {ratio} |")
    return "\n".join(rows)


def stage_table(records):
    """Each stage's time and share of the layer, with its baseline: a row per config and T."""
    stages = [r for r in records if r["op"].startswith("moe_layer/")]
    names = list(dict.fromkeys(r["op"].split("/", 1)[1] for r in stages))
    points = sorted({(layer_shape(r), r["T"]) for r in stages})
    rows = ["| config | T | " + " | ".join(f"{n}: us (share) / torch" for n in names) + " |",
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


def gemm_sweep_table(sweep):
    """bench/h200_gemm_sweep.py's experts records: the experts path (gate/up GEMM with gather and
    SwiGLU, down GEMM) with the configs before the sweep and the tuned ones, against
    torch._grouped_mm, the floors and the sweep's target."""
    rows = ["| config | T | tile_m old > new | old configs (us) | tuned (us) | "
            "torch._grouped_mm (us) | floors: weights / matrix (us) | target (us) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(sweep["experts"], key=lambda r: (-r["E"], r["T"])):
        target = r.get("target_us")
        met = "-" if target is None else f"{target} ({'met' if r['new_us'] <= target else 'not met'})"
        rows.append(f"| {shape_label(layer_shape(r))} | {r['T']} | {r['tile_m_old']} > "
                    f"{r['tile_m_new']} | {r['old_us']:.0f} | {r['new_us']:.0f} | "
                    f"{_x(r['torch_grouped_mm_us'], r['new_us'])} | "
                    f"{r['weight_read_floor_us']:.0f} / {r['matrix_floor_us']:.0f} | {met} |")
    return "\n".join(rows)


def _span(values, fmt="{:.1f}"):
    lo, hi = min(values), max(values)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}-{fmt.format(hi)}"


# bench/bench_quant.py's implementations: their letters in the README's cells, and the full
# table's columns ((implementation, activation_quant), heading)
QUANT_IMPLS = {"cuda_quantized": "G", "cuda_quantized_tiled": "L", "cuda_quantized_dequant": "D",
               "triton_quantized": "T"}
QUANT_COLUMNS = ((("cuda_quantized", "none"), "cuda_quantized"),
                 (("cuda_quantized", "q8"), "cuda_quantized q8"),
                 (("cuda_quantized_tiled", "none"), "cuda_quantized_tiled"),
                 (("cuda_quantized_dequant", "none"), "cuda_quantized_dequant"),
                 (("triton_quantized", "none"), "triton_quantized"))


def quant_cells(records):
    """{(format, (E, K, H, I), T): {(impl, mode): record}} of bench/bench_quant.py's experts
    records. Records from before it timed several implementations (op "moe_experts": the Triton
    quantized path, the layer's then) read as triton_quantized rows chosen by the layer, their
    bf16 time in bf16_us."""
    cells = {}
    for r in records:
        if r["op"] == "moe_experts":
            r = dict(r, impl="triton_quantized", mode="none", chosen=True,
                     bf16_us=r.get("baseline_median_us"))
        elif r["op"] != "quant_experts":
            continue
        key = (r["quant"], layer_shape(r), r["T"])
        cells.setdefault(key, {})[(r["impl"], r["mode"])] = r
    return cells


def _chosen(cell):
    return next((r for r in cell.values() if r.get("chosen")), None)


# The README's rows (the README stays under 12 KiB: bench/README.md has every format)
README_QUANT_FORMATS = ("Q4_K", "Q8_0", "IQ4_XS", "Q6_K", "IQ2_XS")


def quant_table(records, main_job):
    """The README's: per format, the layer's choice among the CUDA quantized implementations
    over the bf16 experts at each T on both layers (bench/bench_quant.py), then a line of the
    main job's whole layer with quantized experts (python -m torch_argon --quant)."""
    cells = quant_cells(records)
    Ts = sorted({T for _, _, T in cells})
    shapes = list(dict.fromkeys(s for _, s, _ in cells))
    rows = ["| format | " + " | ".join(f"T={T}" for T in Ts) + " |",
            "|---|" + "---:|" * len(Ts)]
    for fmt in [f for f in README_QUANT_FORMATS if any(k[0] == f for k in cells)]:
        out = []
        for T in Ts:
            parts = []
            for shape in shapes:
                r = _chosen(cells.get((fmt, shape, T), {}))
                ok = r is not None and r.get("bf16_us")
                parts.append(f"{r['median_us'] / r['bf16_us']:.2f}{QUANT_IMPLS[r['impl']]}"
                             if ok else "-")
            out.append("/".join(parts))
        rows.append(f"| {fmt} | " + " | ".join(out) + " |")
    dense = next(q for q in main_job["quantized"] if q["op"] == "moe_layer")
    layers = ", ".join(f"{q['format']} {q['median_us']:.0f} us ({q['median_us'] / dense['median_us']:.1f}x, "
                       f"{dense['weight_bytes'] / q['weight_bytes']:.1f}x fewer weight bytes)"
                       for q in main_job["quantized"] if q["op"] == "moe_layer_quant")
    c = main_job["config"]
    device = next((r["device"] for r in records if r.get("device")), "an unnamed GPU")
    rows += ["", f"Measured on an {device}. Time / bf16 experts' on " + " / ".join(
        f"E={s[0]} K={s[1]} I={s[3]}" for s in shapes) + ": G `cuda_quantized`, D "
             "`cuda_quantized_dequant`, T `triton_quantized` (all: bench/README.md). Main job "
             f"(`--quant`, whole layer, T={c['T']} E={c['E']} K={c['K']}; an H200 run of "
             "2026-12-02, before the CUDA C++ kernels): bf16 "
             f"{dense['median_us']:.0f} us, {layers}."]
    return "\n".join(rows)


def quant_all_table(records):
    """bench/README.md's: every implementation's time per format, layer and T, with the bf16
    experts', the floor and the layer's choice (bench/bench_quant.py)."""
    rows = ["| format | config | T | bf16 (us) | floor (us) | "
            + " | ".join(head for _, head in QUANT_COLUMNS)
            + " | the layer's choice | choice / bf16 | choice / floor | weights (MB) |",
            "|---|---|---:|---:|---:|" + "---:|" * len(QUANT_COLUMNS) + "---|---:|---:|---:|"]
    for (fmt, shape, T), cell in quant_cells(records).items():
        any_r = next(iter(cell.values()))
        r = _chosen(cell)
        base, floor = any_r.get("bf16_us"), any_r.get("floor_us")
        times = [f"{cell[k]['median_us']:.0f}" if k in cell else "-" for k, _ in QUANT_COLUMNS]
        over_base = f"{r['median_us'] / base:.2f}x" if r and base else "-"
        over_floor = f"{r['median_us'] / floor:.2f}x" if r and floor else "-"
        rows.append(f"| {fmt} | {shape_label(shape)} | {T} | {f'{base:.0f}' if base else '-'} | "
                    f"{f'{floor:.0f}' if floor else '-'} | " + " | ".join(times)
                    + f" | {r['impl'] if r else '-'} | {over_base} | {over_floor} | "
                    f"{any_r['weight_bytes'] / 1e6:.0f} |")
    return "\n".join(rows)


def gguf_table(*runs):
    """bench/bench_gguf.py: prefill of a GGUF model through from_gguf against transformers' GGUF
    loader, time and peak memory, one row per device and T."""
    rows = ["| device | dtype | T | argon (ms) | transformers (ms) | speed | argon peak (MB) | "
            "transformers peak (MB) | memory |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    notes = []
    for run in runs:
        for r in run:
            rows.append(f"| {r['device']} | {r['dtype']} | {r['T']} | {r['argon_ms']:.1f} | "
                        f"{r['transformers_ms']:.1f} | {r['transformers_ms'] / r['argon_ms']:.2f}x | "
                        f"{r['argon_peak_mb']:.0f} | {r['transformers_peak_mb']:.0f} | "
                        f"{r['argon_peak_mb'] / r['transformers_peak_mb']:.2f}x |")
            if r.get("note"):
                notes.append(f"{r['device']}: {r['note']}")
    notes = list(dict.fromkeys(notes))
    return "\n".join(rows + ([""] + [f"({n})" for n in notes] if notes else []))


def cpu_quant_table(records):
    """bench/bench_quant_cpu.py: the CPU quantized GEMM against dequantize-then-moe_mm, time and
    peak memory above the RSS before the call."""
    rows = ["| format | GEMM | T | threads | moe_qmm (us) | dequantize + moe_mm (us) | speed-up | "
            "peak memory ratio |",
            "|---|---|---:|---|---:|---:|---:|---:|"]
    for r in records:
        rows.append(f"| {r['quant']} | {r['gemm']} | {r['T']} | {r.get('threads') or 'all'} | "
                    f"{r['median_us']:.0f} | {r['baseline_median_us']:.0f} | "
                    f"{r['baseline_median_us'] / r['median_us']:.1f}x | {r['memory_ratio']:.2f} |")
    return "\n".join(rows)


def cpu_line(ops, quant):
    """One line of CPU figures for the README: the plan and combine against plain torch, the
    grouped GEMM against the per-expert loop, moe_qmm against dequantize-then-moe_mm."""
    def vs(op, baseline):
        r = next(r for r in ops if r["op"] == op and r["baseline"] == baseline)
        return f"{r['baseline_median_us'] / r['median_us']:.1f}x"
    plan = next(r for r in ops if r["op"] == "moe_plan")
    layer = [r for r in ops if r["op"] == "moe_layer" and r["baseline"] == "layer_per_expert_loop"]
    if layer:  # the whole layer (bench_layer.py) against the per-expert loop
        first = layer[0]
        experts = (f"the whole layer (E={first['E']} K={first['K']} H={first['H']} I={first['I']}, "
                   f"{'/'.join(dict.fromkeys(r['dtype'] for r in layer))}, T "
                   f"{'/'.join(str(t) for t in dict.fromkeys(r['T'] for r in layer))}) "
                   f"{_span([r['baseline_median_us'] / r['median_us'] for r in layer])}x faster "
                   f"than a per-expert loop")
    else:
        mm = next(r for r in ops if r["op"] == "moe_mm")
        experts = f"`moe_mm` (E={mm['E']}) {vs('moe_mm', 'torch_per_expert_loop')} a per-expert loop"
    return (f"CPU (T={plan['T']} E={plan['E']} K={plan['K']}; 2 shared cores of a loaded VM): "
            f"`moe_plan` {vs('moe_plan', 'torch_argsort')} a torch argsort plan, `moe_combine` "
            f"{vs('moe_combine', 'torch_gather_sum')} torch's gather + sum; {experts}; quantized `moe_qmm` "
            f"{_span([r['speedup'] for r in quant])}x faster than dequantize-then-`moe_mm` at "
            f"{_span([r['memory_ratio'] for r in quant], '{:.2f}')}x its peak memory "
            f"([all CPU tables](bench/README.md#cpu)).")


def formats_line():
    """The README's line on the quantized experts, from the format records
    (torch_argon/quant/formats.py), not from results: the quantized formats, and the expert
    weight bytes each saves against bf16 (16 bits against its bits per weight); whether the
    automatic choice takes the Hopper mixed-input GEMM (experts/quantized_crossover.py)."""
    from torch_argon.experts.quantized_crossover import MIXED_KERNEL_PASSED_GPU_TESTS
    from torch_argon.quant.formats import FORMATS
    mixed = ("" if MIXED_KERNEL_PASSED_GPU_TESTS else
             ", by name only until its current build passes its GPU tests")
    quantized = [f for f in FORMATS.values() if not f.is_float]
    saving = {f.name: 16 / f.bits_per_weight for f in quantized}
    low, high = min(saving, key=saving.get), max(saving, key=saving.get)
    shown = dict.fromkeys([low, "Q6_K", "Q4_K", high])
    return (f"- **Quantized experts** in {len(quantized)} GGUF block formats, kept as the "
            f"blocks (Hopper: a mixed-input GEMM for the 32-value-group formats{mixed}; elsewhere "
            f"CUDA at "
            f"large T decodes them into a bf16 workspace): "
            f"{saving[low]:.1f}-{saving[high]:.1f}x fewer weight bytes than bf16 ("
            + ", ".join(f"{n} {saving[n]:.1f}x" for n in shown) + ").")


def cpu_gguf_llamacpp_line(records):
    """bench/bench_gguf_llamacpp.py: GGUF prefill tokens/s against llama.cpp's best of repack
    on/off, per activation_quant, as one line (the README's size limit)."""
    parts = []
    for mode in dict.fromkeys(r["activation_quant"] for r in records):
        ratios = [r["argon_tokens_per_s"] / r["llamacpp_tokens_per_s"] for r in records
                  if r["activation_quant"] == mode]
        parts.append(f"{_span(ratios)}x ({mode})")
    names = ", ".join(dict.fromkeys(r["format"] for r in records))
    return (f"GGUF prefill vs llama.cpp ({names}; 2 threads): " + ", ".join(parts)
            + " its tokens/s.")


def train_table(records):
    """Forward + backward of the layer (bench/bench_train.py) against our forward and each
    plain-torch layer with torch's autograd, per layer config and T."""
    rows = ["| device | config | dtype | T | fwd + bwd (us) | timing | / our forward | "
            "per-expert loop (us) | argsort + grouped_mm (us) | grad rel err vs loop |",
            "|---|---|---|---:|---:|---|---:|---:|---:|---:|"]
    for r in sorted(records, key=lambda r: (layer_shape(r), r["dtype"], r["T"])):
        cells = []
        for name in ("layer_per_expert_loop", "layer_argsort_grouped_mm"):
            b = r["baselines"].get(name)
            cells.append(_x(b["median_us"], r["median_us"]) if b else "-")
            if b and b["timing"] != r["timing"]:
                cells[-1] += f" ({b['timing']})"
        rows.append(f"| {r.get('device', r['backend'])} | {shape_label(layer_shape(r))} | "
                    f"{r['dtype']} | {r['T']} | {r['median_us']:.0f} | {r['timing']} | "
                    f"{r['vs_forward']:.2f} | {' | '.join(cells)} | "
                    f"{r['max_grad_rel_err']:.1e} |")
    return "\n".join(rows)


# name: (the document holding its marker, its results files in bench/results, the function
# making it from their parsed JSON, in that order; no files: the function reads the library).
TABLES = {
    "formats-line": ("README.md", (), formats_line),
    "h200-layer": ("README.md", ("h200.json",), layer_table),
    "h200-stages": ("bench/README.md", ("h200.json",), stage_table),
    "cpu-line": ("README.md", ("cpu.json", "cpu_quant.json"), cpu_line),
    "cpu-llamacpp": ("README.md", ("cpu_gguf_llamacpp.json",), cpu_gguf_llamacpp_line),
    "h200-gemm-sweep": ("README.md", ("h200_gemm_sweep.json",), gemm_sweep_table),
    "h200-quant": ("README.md", ("h200_quant.json", "main_quant_h200.json"), quant_table),
    "h200-quant-all": ("bench/README.md", ("h200_quant.json",), quant_all_table),
    "gguf": ("README.md", ("cpu_gguf.json", "h200_gguf.json"), gguf_table),
    "cpu_distributed": ("bench/README.md", ("cpu_distributed.json",), distributed_table),
    "cpu": ("bench/README.md", ("cpu.json",), ops_table),
    "cpu-quant": ("bench/README.md", ("cpu_quant.json",), cpu_quant_table),
    "h200": ("bench/README.md", ("h200.json",), cuda_ops_table),
    "h200x2": ("bench/README.md", ("h200x2.json",), distributed_table),
    "cpu-train": ("bench/README.md", ("cpu_train.json",), train_table),
    "h200-train": ("bench/README.md", ("h200_train.json",), train_table),
}
DOCS = tuple(dict.fromkeys(doc for doc, _, _ in TABLES.values()))
MARKER = re.compile(r"<!-- table:([\w-]+) -->\n(.*?)<!-- /table:\1 -->", re.S)


def make_table(name, results=RESULTS):
    """The text of table `name` from the results files, or a line saying which are missing."""
    _, files, make = TABLES[name]
    missing = [f for f in files if not (results / f).is_file()]
    if missing:
        return "_No results yet: " + ", ".join(f"`bench/results/{f}`" for f in missing) + "._"
    return make(*(json.loads((results / f).read_text()) for f in files))


def render(doc, text, results=RESULTS):
    """`text` (the document `doc`, a path relative to the checkout) with every table block
    filled. Raises on a marker of an unknown name or of another document's table, and on a table
    of this document whose marker is missing."""
    found = [m.group(1) for m in MARKER.finditer(text)]
    wrong = [n for n in found if TABLES.get(n, (None,))[0] != doc]
    missing = [n for n, (d, _, _) in TABLES.items() if d == doc and n not in found]
    if wrong or missing:
        raise ValueError(f"{doc}: markers of unknown or other documents' tables {wrong}; "
                         f"tables without a marker {missing} (TABLES in bench/make_tables.py)")
    return MARKER.sub(lambda m: f"<!-- table:{m.group(1)} -->\n{make_table(m.group(1), results)}"
                      f"\n<!-- /table:{m.group(1)} -->", text)


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
    for doc in DOCS:
        path = ROOT / doc
        text = path.read_text()
        new = render(doc, text)
        if new != text:
            path.write_text(new)
        print(f"{doc}: {'updated' if new != text else 'unchanged'}, {len(new.encode())} bytes")


if __name__ == "__main__":
    main()
