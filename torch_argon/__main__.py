"""The main job: run one MoE prefill layer on the best available device, check it against the
reference, and time each stage against the plain-torch ways of doing it.

    python -m torch_argon                 # mps, then cuda, then cpu
    python -m torch_argon --device cpu --T 1024
    python -m torch_argon --quant Q4_K        # + the layer with Q4_K experts beside the dense one
    python -m torch_argon --quant all         # every format this build has kernels for
    python -m torch_argon --gguf model.gguf --layers 2   # the MoE layers of a GGUF file

Prints a table, writes it as JSON (and a PNG where matplotlib is installed). Every stage is
timed once per round, the rounds one after another, so a burst of load elsewhere hits all stages
alike; the table gives each stage's median over the rounds. When the rounds disagree by more than
{spread:.0%}, a stage reads slower than the whole layer that contains it, or the load average says
other work shares the CPU, the machine was busy while timing: a note above the table says so,
and the figures are not to be trusted.

--quant FMT[,FMT...] builds the same layer's experts as synthetic GGUF blocks of each format
(random quant bits, finite scales, the dense weights' standard deviation; there is no quantizer in
torch_argon to quantize the dense weights themselves), times the whole layer with them beside the
dense layer, and gives both layers' expert weight bytes. Each quantized layer is checked against
the float64 per-expert layer on its own dequantized weights, with the same routing.

--gguf FILE runs the MoE blocks of a GGUF file (torch_argon.gguf) on T random tokens of the
file's width instead of the synthetic layer: each block's time and expert bytes, and the first
block checked against the float64 per-expert layer on its dequantized weights.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import textwrap
import time

import torch

from . import _C
from .quant import qformat
from .testing import backends
from .testing.layers import (STAGE_LABELS, experts_path, float64_block_error, float64_error,
                             layer_baselines, make_layer, plan_matches_reference,
                             quantized_experts, run_layer, argon_stages, torch_layer_stages)
from .testing.timing import SPREAD_LIMIT, busy_notes, median_us, rounds_us

# Qwen3-Next-sized by default; the CPU default is smaller so it finishes in seconds.
DEFAULTS = {
    "gpu": dict(T=2048, E=512, K=10, hidden=2048, inter=512, dtype="bfloat16"),
    "cpu": dict(T=512, E=128, K=8, hidden=1024, inter=256, dtype="float32"),
}
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
TOLERANCE = {"float32": 1e-4, "float16": 5e-3, "bfloat16": 2e-2}  # layer rel. error vs float64
# The layer with quantized experts against the float64 layer on the dequantized weights (as
# tests/test_quant_layer.py): the kernels accumulate in fp32 and round x, h and the output to the
# activation dtype; the Metal kernels hold dequantized weight tiles as half, hence fp32 on mps.
QUANT_TOLERANCE = {"float32": 1e-4, "float16": 5e-3, "bfloat16": 3e-2}
METAL_FP32_QUANT_TOLERANCE = 1e-3
# q8 against the float64 layer on the same 8-bit activations: a code at a rounding tie of h can
# flip between the two (each GEMM alone is held to 1e-5 in tests/test_qmm_q8_cpu.py)
Q8_TOLERANCE = {"float32": 2e-3, "float16": 6e-3, "bfloat16": 3e-2}
__doc__ = __doc__.format(spread=SPREAD_LIMIT)

ARGON, TORCH, LOOP = "argon", "argsort + grouped_mm", "per-expert loop"
QUANT, GGUF = "argon, quantized experts", "argon, GGUF block"
PROG = "python -m torch_argon"


class ArgumentParser(argparse.ArgumentParser):
    """argparse's, with its errors on one line (no usage block above them)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (--help lists the flags)\n")


def parse_args(argv=None):
    p = ArgumentParser(prog=PROG, description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)

    def shape_default(key):
        cpu, gpu = DEFAULTS["cpu"][key], DEFAULTS["gpu"][key]
        return f"(default: {cpu} on the CPU, {gpu} on GPUs)"

    p.add_argument("--device", default="auto", choices=["auto", "mps", "cuda", "cpu"],
                   help="(default: auto: mps, then cuda, then cpu)")
    p.add_argument("--T", type=int, help="tokens " + shape_default("T"))
    p.add_argument("--E", type=int, help="experts " + shape_default("E"))
    p.add_argument("--K", type=int, help="experts per token " + shape_default("K"))
    p.add_argument("--hidden", type=int, help="model width " + shape_default("hidden"))
    p.add_argument("--inter", type=int, help="expert width (intermediate size) "
                   + shape_default("inter"))
    p.add_argument("--dtype", choices=list(DTYPES), help=shape_default("dtype"))
    p.add_argument("--tile-m", type=int, help="rows per GEMM tile, a power of two in [1, 4096] "
                   "(default: what the layer picks: from T*K/E on the CUDA Triton path, else 16 "
                   "on GPUs and 1 on the CPU)")
    p.add_argument("--rounds", type=int, default=3,
                   help="timing rounds, every stage once per round (default: %(default)s)")
    p.add_argument("--repeat", type=int, default=3,
                   help="timed calls per stage and round, their median kept (default: %(default)s)")
    p.add_argument("--no-loop", action="store_true", help="skip the slow per-expert loop")
    p.add_argument("--quant", metavar="FMT[,FMT...]",
                   help="also run the layer with its experts in these GGUF formats (or 'all': "
                   f"every format with kernels: {', '.join(kernel_formats())})")
    p.add_argument("--gguf", metavar="FILE",
                   help="run the MoE blocks of this GGUF file instead of the synthetic layer "
                   "(E, K, hidden and inter come from the file)")
    p.add_argument("--layers", type=int, metavar="N",
                   help="with --gguf: run only the first N MoE blocks (default: all; more than "
                   "the file has is an error)")
    p.add_argument("--json", default="argon_report.json", help="(default: %(default)s)")
    p.add_argument("--plot", default="argon_report.png",
                   help="(default: %(default)s, written where matplotlib is installed)")
    args = p.parse_args(argv)
    check_args(p, args)
    if args.device == "auto":
        args.device = backends.best_device()
    for key, value in DEFAULTS["cpu" if args.device == "cpu" else "gpu"].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if not 1 <= args.K <= args.E:  # after the defaults: K and E may come one from each
        p.error(f"K must be in [1, E]: got K={args.K}, E={args.E} (--K, --E: each token picks "
                "K of the E experts)")
    args.quant_formats = parse_quant(p, args)
    return args


def kernel_formats():
    """The GGUF formats the quantized ops have kernels for in this build (the C++ op table;
    the Metal and Triton kernels cover the same block formats). The plain float types F32, F16
    and BF16 are GGUF types too, but take no quantized kernel."""
    return [name for name, _id, _elems, _bytes, has_kernels in _C.quant_formats() if has_kernels]


def parse_quant(p, args):
    """--quant as a list of format names (empty without the flag), each one with kernels here
    and whose block divides hidden and inter (the input widths of the two GEMMs)."""
    if args.quant is None:
        return []
    have = kernel_formats()
    names = [n.strip() for n in args.quant.split(",") if n.strip()]
    if [n.lower() for n in names] == ["all"]:
        names = have
    if not names:
        p.error(f"--quant needs a format: one of {', '.join(have)}, or all")
    formats = []
    for name in names:
        try:
            fmt = qformat(name)
        except ValueError as e:
            p.error(f"--quant {name}: {e}")
        if fmt.name not in have:
            p.error(f"--quant {fmt.name}: no quantized kernels for this format on "
                    f"{args.device} (formats with kernels: {', '.join(have)})")
        if args.hidden % fmt.block_elems or args.inter % fmt.block_elems:
            p.error(f"--quant {fmt.name}: its blocks hold {fmt.block_elems} values, so --hidden "
                    f"and --inter must be multiples of {fmt.block_elems}, got hidden="
                    f"{args.hidden}, inter={args.inter}")
        if fmt.name not in formats:
            formats.append(fmt.name)
    return formats


def check_args(p, args):
    """One argparse error line (and exit status 2) for a flag the job cannot run with, before
    any of its work."""
    if args.device != "auto":
        backend = backends.get(args.device)
        if not backend.available:
            p.error(f"--device {args.device}: {backend.reason}")
    for flag, low in (("T", 0), ("E", 1), ("K", 1), ("hidden", 1), ("inter", 1)):
        value = getattr(args, flag)
        if value is not None and value < low:
            p.error(f"--{flag} must be >= {low}, got {value}")
    tm = args.tile_m
    if tm is not None and not (1 <= tm <= 4096 and tm & (tm - 1) == 0):
        p.error(f"--tile-m must be a power of two in [1, 4096], got {tm}")
    for flag in ("rounds", "repeat"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag} must be >= 1, got {getattr(args, flag)}")
    check_writable(p, "json", args.json)
    if args.gguf is None:
        check_writable(p, "plot", args.plot)
        if args.layers is not None:
            p.error("--layers N picks the blocks of a GGUF file: pass --gguf FILE too")
        return
    if not os.path.isfile(args.gguf):
        p.error(f"--gguf {args.gguf}: no such file")
    if args.quant is not None:
        p.error("--gguf runs a file's own quantized experts: drop --quant (a separate run)")
    from_file = [f"--{k}" for k in ("E", "K", "hidden", "inter") if getattr(args, k) is not None]
    if from_file:
        p.error(f"--gguf takes E, K, hidden and inter from the file: drop {', '.join(from_file)}")
    if args.layers is not None and args.layers < 1:
        p.error(f"--layers must be >= 1, got {args.layers}")


def check_writable(p, flag, path):
    """An output path the job could not write is an error now, not after the job: the file is
    opened for appending (which leaves an existing one as it is), and removed if this made it."""
    existed = os.path.exists(path)
    try:
        with open(path, "ab"):
            pass
    except OSError as e:
        p.error(f"--{flag} {path}: cannot write it ({e.strerror})")
    if not existed:
        os.remove(path)


def say(*parts):
    print(*parts, flush=True)


def describe_device(device):
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "cpu":
        return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    return device.type


def quant_tolerance(args, activation_quant="none"):
    """The quantized layer's tolerance against the float64 layer on its dequantized weights
    (with the activations quantized as it quantized them, for q8)."""
    if activation_quant == "q8":
        return Q8_TOLERANCE[args.dtype]
    if args.device == "mps" and args.dtype == "float32":
        return METAL_FP32_QUANT_TOLERANCE
    return QUANT_TOLERANCE[args.dtype]


def mib(n_bytes):
    return f"{n_bytes / 2 ** 20:.2f} MiB"


def ratio(base, us):
    return f"{base / us:.2f}x" if us > 0 else "-"


def measure(calls, device, rounds, repeat):
    """{(table, stage): [median us of each round]}: every call once per round, interleaved
    (timing.rounds_us), after one warm-up call in the first round (the harness has run each once
    already). The per-expert loop, up to seconds a call, is called once a round."""
    say(f"timing {len(calls)} calls: {rounds} rounds, each call {repeat} times a round "
        "(--rounds, --repeat)")
    first, last = next(iter(calls)), list(calls)[-1]
    started = {}

    def time_call(key, fn, r):
        if key == first:
            started[r] = time.perf_counter()
            print(f"  round {r + 1}/{rounds} ", end="", flush=True)
        us = median_us(fn, device, warmup=int(r == 0), repeat=1 if key[0] == LOOP else repeat)
        print(".", end="", flush=True)
        if key == last:
            say(f" {time.perf_counter() - started[r]:.1f} s")
        return us

    return rounds_us(calls, rounds, time_call)


def medians(runs, table):
    """{stage: median over the rounds (us)} of one table of `runs`."""
    return {stage: statistics.median(r) for (t, stage), r in runs.items() if t == table}


def summarize(runs):
    """(argon, torch_path, loop): each stage's median over the rounds (us) on the two paths, and
    the per-expert loop's (None when skipped)."""
    argon, torch_path = medians(runs, ARGON), medians(runs, TORCH)
    torch_path = {"route": argon["route"], **torch_path}  # one router for both paths
    fused = STAGE_LABELS["gate_up_swiglu"]
    if "gate/up GEMM" in torch_path and fused in argon:
        torch_path[fused] = (torch_path["gather"] + torch_path["gate/up GEMM"]
                             + torch_path["SwiGLU"])
    return argon, torch_path, medians(runs, LOOP).get("whole layer")


def timing_notes(device, runs, tables):
    """timing.busy_notes, this job's own threads being torch's on the CPU (one elsewhere)."""
    own = torch.get_num_threads() if device.type == "cpu" else 1
    return busy_notes(tables, runs, own_threads=own)


def timing_report(args, runs, notes):
    return dict(rounds=args.rounds, repeat=args.repeat, busy_notes=notes,
                round_medians_us={f"{t}/{s}": r for (t, s), r in runs.items()})


def run_dense(args, device, ops, device_name):
    """The synthetic layer: parity, each stage timed against the plain-torch path, and the layer
    with each --quant format's experts beside it."""
    with torch.inference_mode():
        say(f"building the layer: T={args.T} E={args.E} K={args.K} hidden={args.hidden} "
            f"inter={args.inter} {args.dtype}")
        layer = make_layer(args.T, args.E, args.K, args.hidden, args.inter, DTYPES[args.dtype],
                           device)
        chosen = experts_path(layer.x, layer.experts, ops, top_k=args.K, tile_m=args.tile_m)
        args.tile_m, args.path = chosen.tile_m, chosen.name
        args.declined = chosen.declined
        say(f"running it ({args.path} path, tile_m={args.tile_m}"
            + "".join(f"; not {name}: {why}" for name, why in args.declined.items())
            + ") and checking it against the reference")
        out = run_layer(layer, ops, args.path, args.tile_m)
        plan_ok = plan_matches_reference(layer, ops, args.tile_m)
        rel = float64_error(layer, out)
        quantized, checked = {}, {}
        if args.quant_formats:
            say(f"building the quantized experts ({', '.join(args.quant_formats)}: synthetic "
                "blocks), running each and checking it against the float64 layer on its "
                "dequantized weights")
        for name in args.quant_formats:
            quantized[name] = q = quantized_experts(layer, name,
                                                    seed=1000 + qformat(name).type_id)
            say(f"  {name}: {mib(q.nbytes)} of blocks")
            path = experts_path(layer.x, q, ops, top_k=args.K, tile_m=args.tile_m_flag)
            q_out = run_layer(layer, ops, "auto", args.tile_m_flag, experts=q)
            checked[name] = (path.name, path.tile_m, path.activation_quant,
                             float64_error(layer, q_out, experts=q, float64_x=True,
                                           activation_quant=path.activation_quant))
        calls = {(ARGON, STAGE_LABELS[s]): stage.call
                 for s, stage in argon_stages(layer, ops, args.path, args.tile_m).items()}
        calls.update({(TORCH, STAGE_LABELS[s]): call
                      for s, call in torch_layer_stages(layer).items()})
        if not args.no_loop:
            calls[(LOOP, "whole layer")] = layer_baselines(layer)["layer_per_expert_loop"]
        for name, q in quantized.items():
            calls[(QUANT, name)] = (lambda q: lambda: run_layer(layer, ops, "auto",
                                                                args.tile_m_flag,
                                                                experts=q))(q)
        runs = measure(calls, device, args.rounds, args.repeat)
    argon, torch_path, loop = summarize(runs)
    notes = timing_notes(device, runs, {ARGON: argon, TORCH: torch_path})
    table = render(args, device_name, argon, torch_path, loop, plan_ok, rel, notes)
    records = []
    if quantized:
        records = quant_records(args, layer, quantized, checked, argon["whole layer"],
                                medians(runs, QUANT), rel)
        table += "\n\n" + render_quant(records)
    say("\n" + table)
    report = dict(device=device_name, config={k: getattr(args, k) for k in
                  ("T", "E", "K", "hidden", "inter", "dtype", "tile_m", "path", "declined")},
                  parity=dict(plan_bit_exact=plan_ok, layer_rel_error=rel),
                  argon_us=argon, argsort_grouped_mm_us=torch_path, per_expert_loop_us=loop,
                  timing=timing_report(args, runs, notes))
    if records:
        report["quantized"] = records
    write_json(args, report)
    title = table.splitlines()[:1] + (["BUSY MACHINE while timing: these times are not reliable "
                                       f"({os.path.basename(args.json)}: timing.busy_notes)"]
                                      if notes else [])
    bars = dict(argon, **{f"whole layer, {r['format']} experts": r["median_us"]
                          for r in records[1:]})
    if plot(args.plot, title, bars, torch_path, loop):
        say(f"wrote {os.path.abspath(args.plot)}")
    tol = TOLERANCE[args.dtype]
    bad_quant = [f"{r['format']} rel error {r['rel_error']:.2e} >= {r['tolerance']:.0e}"
                 for r in records[1:] if not r["ok"]]
    if not plan_ok or not rel < tol or bad_quant:
        raise SystemExit(f"parity FAILED (plan bit-exact: {plan_ok}, layer rel error {rel:.2e} "
                         f"{'<' if rel < tol else '>='} {tol:.0e}"
                         + "".join(f"; quantized {b}" for b in bad_quant) + ")")


def quant_records(args, layer, quantized, checked, dense_us, quant_us, rel):
    """The JSON records of the dense layer and of each quantized one: op, format, path,
    weight_bytes (the expert stacks), median_us (the whole layer), rel_error and what it is
    against, the tolerance and whether the check passed."""
    records = [dict(op="moe_layer", format=args.dtype, path=args.path, tile_m=args.tile_m,
                    weight_bytes=layer.weight_bytes, bits_per_weight=8 *
                    DTYPES[args.dtype].itemsize, median_us=dense_us, rel_error=rel,
                    compared_to="float64 per-expert layer on the same weights",
                    tolerance=TOLERANCE[args.dtype], ok=rel < TOLERANCE[args.dtype])]
    for name, experts in quantized.items():
        path, tile_m, mode, err = checked[name]
        tol = quant_tolerance(args, mode)
        against = "float64 per-expert layer on the dequantized weights" + (
            " and the q8 activations" if mode == "q8" else "")
        records.append(dict(op="moe_layer_quant", format=name, path=path, tile_m=tile_m,
                            activation_quant=mode, weight_bytes=experts.nbytes,
                            bits_per_weight=qformat(name).bits_per_weight,
                            median_us=quant_us[name], rel_error=err, compared_to=against,
                            tolerance=tol, ok=err < tol))
    return records


def busy_lines(notes):
    if not notes:
        return []
    return (["BUSY MACHINE: the times below are not reliable (rerun on a quiet machine):"]
            + [f"  - {n}" for n in notes])


def render(args, device_name, argon, torch_path, loop, plan_ok, rel, notes):
    lines = [
        f"torch_argon MoE prefill layer on {device_name}: T={args.T} E={args.E} K={args.K} "
        f"hidden={args.hidden} inter={args.inter} {args.dtype} tile_m={args.tile_m} "
        f"({args.path} path)",
        f"parity: plan bit-exact vs reference: {'yes' if plan_ok else 'NO'}; "
        f"layer rel. error vs float64 reference: {rel:.2e}",
        f"timing: each stage's median over {args.rounds} rounds of {args.repeat} calls",
    ] + busy_lines(notes)
    lines += ["", "| stage | argon (us) | argsort + grouped_mm (us) | speedup |",
              "|---|---:|---:|---:|"]
    for stage, us in argon.items():
        base = torch_path.get(stage)
        lines.append(f"| {stage} | {us:.1f} | {base:.1f} | {ratio(base, us)} |" if base is not None
                     else f"| {stage} | {us:.1f} | - | - |")
    if loop is not None:
        lines.append(f"| whole layer vs per-expert Python loop | {argon['whole layer']:.1f} | "
                     f"{loop:.1f} (loop) | {ratio(loop, argon['whole layer'])} |")
    return "\n".join(lines)


def render_quant(records):
    """The dense layer against each quantized one: time, expert weight bytes, error."""
    dense = records[0]
    lines = ["quantized experts (--quant): the same layer shape, its experts as synthetic GGUF "
             "blocks (random quant bits, finite scales, the dense weights' std); each layer's "
             "rel. error is against the float64 per-expert layer on its own weights (the "
             "quantized ones dequantized; for activations quant q8 also its activations "
             "quantized as q8 does), same routing",
             "", "| experts | path | whole layer (us) | speedup vs dense | expert weights | "
             "weights vs dense | rel. error (tolerance) |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in records:
        label = (f"{r['format']} (dense)" if r["op"] == "moe_layer"
                 else f"{r['format']} ({r['bits_per_weight']:g} bits/weight)")
        check = f"{r['rel_error']:.2e} (< {r['tolerance']:.0e})" if r["ok"] else \
            f"{r['rel_error']:.2e} FAILED (>= {r['tolerance']:.0e})"
        path = r["path"] + (f", {r['activation_quant']}" if r.get("activation_quant") else "")
        lines.append(f"| {label} | {path} | {r['median_us']:.1f} | "
                     f"{ratio(dense['median_us'], r['median_us'])} | {mib(r['weight_bytes'])} | "
                     f"{r['weight_bytes'] / dense['weight_bytes']:.3f}x | {check} |")
    return "\n".join(lines)


def make_figure(title_lines, argon, torch_path, loop):
    """Horizontal bars per stage (log scale): argon against the argsort + grouped_mm path, and
    the per-expert loop beside the whole layer; the title wrapped to the figure's width."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stages = list(argon)
    title = "\n".join(textwrap.fill(line, 95) for line in title_lines)
    fig, ax = plt.subplots(figsize=(9, 2 + 0.45 * len(stages) + 0.15 * title.count("\n")))
    ys = range(len(stages))
    ax.barh([y - 0.27 for y in ys], [argon[s] for s in stages], height=0.27, label=ARGON)
    ax.barh(list(ys), [torch_path.get(s, 0) for s in stages], height=0.27, label=TORCH)
    if loop is not None:
        ax.barh([stages.index("whole layer") + 0.27], [loop], height=0.27,
                label="per-expert Python loop")
    ax.set_yticks(list(ys), stages)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("median time per call (us, log scale)")
    ax.set_title(title, fontsize=8, loc="left")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, frameon=False)
    fig.tight_layout()
    return fig


def plot(path, title_lines, argon, torch_path, loop):
    """make_figure saved as a PNG; False where matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    fig = make_figure(title_lines, argon, torch_path, loop)
    fig.savefig(path, dpi=120)
    import matplotlib.pyplot as plt
    plt.close(fig)
    return True


def write_json(args, report, note=""):
    with open(args.json, "w") as f:
        json.dump(report, f, indent=1)
    say(f"\nwrote {os.path.abspath(args.json)}{note}")


# ---- --gguf --------------------------------------------------------------------------------

def expert_parts(experts):
    """{part: QuantizedWeight} of quantized experts: gate_up (or gate and up) and down."""
    return {part: getattr(experts, part) for part in ("gate_up", "gate", "up", "down")
            if getattr(experts, part) is not None}


def open_gguf(args, device):
    """The file's config and {block: nn.MoE} of its first --layers MoE blocks (all without the
    flag) on `device`. A file it cannot run (GGUFError: not GGUF, not an MoE architecture, a
    missing or misshapen tensor; an expert format without kernels), and --layers above the
    file's MoE blocks (the table would silently time fewer blocks than asked), are one error
    line."""
    from .gguf import GGUFError, GGUFMoE
    try:
        moe_file = GGUFMoE(args.gguf)
        blocks = moe_file.config.moe_blocks
        if args.layers is not None and args.layers > len(blocks):
            fail(f"--layers {args.layers}: {args.gguf} has {len(blocks)} MoE block"
                 f"{'s' if len(blocks) != 1 else ''} (blocks {', '.join(map(str, blocks))})")
        layers = moe_file.moe_layers(device=device, dtype=DTYPES[args.dtype],
                                     blocks=blocks[:args.layers], tile_m=args.tile_m_flag)
    except (GGUFError, ImportError) as e:
        fail(str(e))
    have = kernel_formats()
    for block, moe in layers.items():
        for part, w in expert_parts(moe.experts.expert_weights()).items():
            if w.qtype.name not in have:
                fail(f"{args.gguf}: blk.{block} {part} experts are stored as {w.qtype.name}, "
                     f"which the quantized kernels do not take (formats with kernels: "
                     f"{', '.join(have)})")
    return moe_file.config, layers


def describe_config(c):
    shared = f"shared expert inter={c.shared_inter}" if c.shared_inter else "no shared expert"
    return (f"{c.arch}: {c.n_blocks} blocks, {len(c.moe_blocks)} with experts; E={c.n_experts} "
            f"top-{c.top_k} hidden={c.hidden} inter={c.inter}; {shared}; {c.scoring} routing"
            f"{', top-k weights renormalized' if c.renormalize else ''}")


def render_gguf(args, device_name, config, records, parity, notes):
    lines = [f"torch_argon GGUF MoE blocks on {device_name}: {args.gguf}",
             f"config: {describe_config(config)}",
             f"run: T={args.T} random tokens (std 1) of width {config.hidden}; {args.dtype} "
             "activations and dense weights (router, shared expert); experts in their GGUF "
             "blocks",
             f"parity: block {parity['block']} rel. error vs the float64 per-expert layer on its "
             f"dequantized weights (same routing): {parity['rel_error']:.2e} "
             f"({'<' if parity['ok'] else '>='} {parity['tolerance']:.0e})",
             f"timing: each block's median over {args.rounds} rounds of {args.repeat} calls"]
    lines += busy_lines(notes)
    lines += ["", f"| block | experts | path | whole layer (us) | expert weights | weights vs "
              f"dense {args.dtype} |", "|---:|---|---|---:|---:|---:|"]
    for r in records:
        formats = ", ".join(f"{part.replace('_', '/')} {name}"
                            for part, name in r["formats"].items())
        lines.append(f"| {r['block']} | {formats} | {r['path']} | {r['median_us']:.1f} | "
                     f"{mib(r['weight_bytes'])} | "
                     f"{r['weight_bytes'] / r['dense_weight_bytes']:.3f}x |")
    return "\n".join(lines)


def run_gguf(args, device, ops, device_name):
    """--gguf: the file's MoE blocks on T random tokens: parity of the first, each one timed."""
    import dataclasses
    with torch.inference_mode():
        say(f"reading {args.gguf}")
        config, layers = open_gguf(args, device)
        args.E, args.K, args.hidden, args.inter = (config.n_experts, config.top_k,
                                                   config.hidden, config.inter)
        say(f"config: {describe_config(config)}")
        g = torch.Generator(device="cpu").manual_seed(0)
        x = torch.randn(args.T, config.hidden, generator=g).to(device=device,
                                                               dtype=DTYPES[args.dtype])
        first = next(iter(layers))
        say(f"running block {first} and checking it against the float64 layer on its "
            "dequantized weights")
        moe = layers[first]
        mode = experts_path(x, moe.experts.expert_weights(), ops, top_k=config.top_k,
                            tile_m=args.tile_m_flag).activation_quant
        rel, tol = float64_block_error(moe, x, mode), quant_tolerance(args, mode)
        parity = dict(block=first, rel_error=rel, tolerance=tol, ok=rel < tol,
                      activation_quant=mode,
                      compared_to="float64 per-expert layer on the dequantized weights" + (
                          " and the q8 activations" if mode == "q8" else ""))
        calls = {(GGUF, str(b)): (lambda moe: lambda: moe(x))(moe) for b, moe in layers.items()}
        runs = measure(calls, device, args.rounds, args.repeat)
    times = medians(runs, GGUF)
    records = []
    dense_per_expert = 3 * config.hidden * config.inter * DTYPES[args.dtype].itemsize
    for b, moe in layers.items():
        experts = moe.experts.expert_weights()
        chosen = experts_path(x, experts, ops, top_k=config.top_k, tile_m=args.tile_m_flag)
        records.append(dict(op="moe_layer_gguf", block=b, path=chosen.name,
                            tile_m=chosen.tile_m, median_us=times[str(b)],
                            formats={p: w.qtype.name for p, w in expert_parts(experts).items()},
                            weight_bytes=experts.nbytes,
                            dense_weight_bytes=config.n_experts * dense_per_expert))
    notes = timing_notes(device, runs, {})
    say("\n" + render_gguf(args, device_name, config, records, parity, notes))
    write_json(args, dict(device=device_name, gguf=os.path.abspath(args.gguf),
                          config=dataclasses.asdict(config),
                          run=dict(T=args.T, dtype=args.dtype, tile_m=args.tile_m_flag),
                          parity=parity, layers=records, timing=timing_report(args, runs, notes)),
               note=" (no plot with --gguf)")
    if not parity["ok"]:
        raise SystemExit(f"parity FAILED (block {first} rel error {rel:.2e} >= {tol:.0e})")


def fail(message):
    """One error line, as argparse's, and exit status 2: for what only shows once the job reads
    its input (a GGUF file it cannot run)."""
    sys.stderr.write(f"{PROG}: error: {message}\n")
    raise SystemExit(2)


def run(argv=None):
    args = parse_args(argv)
    args.tile_m_flag = args.tile_m  # the user's; args.tile_m becomes the dense layer's choice
    device = torch.device(args.device)
    ops = backends.get(args.device).ops
    device_name = describe_device(device)
    torch.manual_seed(0)
    say(f"torch_argon main job on {device_name}")
    if args.gguf is not None:
        return run_gguf(args, device, ops, device_name)
    return run_dense(args, device, ops, device_name)


def main(argv=None):
    """The job. Ctrl-C ends it with one line and exit status 130 (128 + SIGINT), as a shell
    reports an interrupted command; a reader that closes its end of the pipe (`| head`) ends it
    quietly with status 141 (128 + SIGPIPE), as for any command. Neither with a traceback."""
    try:
        return run(argv)
    except KeyboardInterrupt:
        print(flush=True)  # ends the progress line the interrupt cut
        sys.stderr.write(f"{PROG}: interrupted\n")
        raise SystemExit(130) from None
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at nothing so that flush cannot fail.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(141) from None


if __name__ == "__main__":
    main()
