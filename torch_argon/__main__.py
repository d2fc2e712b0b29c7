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
import math
import os
import platform
import statistics
import textwrap
import time

import torch

from . import _C
from . import reference
from . import triton_ops
from .layer import moe_layer
from .paths import choose_experts_path
from .quant import QuantizedExperts, QuantizedWeight, qformat, random_quantized
from .routing import route
from .testing import backends, baselines
from .testing.timing import median_us
from .weights import DenseExperts

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
SPREAD_LIMIT = 0.25  # (max - min) / median of a stage's round medians above this: a busy machine
SPREAD_FLOOR_US = 20.0  # ... when the gap is also above this many microseconds
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
                   help="with --gguf: run only the first N MoE blocks (default: all)")
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
    """One argparse error line (and exit status 2) for a flag the job cannot run with."""
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
    if args.gguf is None:
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


def say(*parts):
    print(*parts, flush=True)


def describe_device(device):
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "cpu":
        return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    return device.type


def build_layer(args, device):
    """The layer's inputs: x [T, H], router_weight [E, H], and the experts as an expert-weights
    object (torch_argon.weights), seeded so every run times the same layer."""
    g = torch.Generator(device="cpu").manual_seed(0)
    dt = DTYPES[args.dtype]
    H, I, E = args.hidden, args.inter, args.E

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(device=device, dtype=dt)

    x, router_weight = rand(args.T, H), rand(E, H, scale=H ** -0.5)
    experts = DenseExperts(rand(E, 2 * I, H, scale=H ** -0.5), rand(E, H, I, scale=I ** -0.5))
    return dict(x=x, router_weight=router_weight, experts=experts)


def build_quantized(args, layer, device):
    """{format: QuantizedExperts} of the layer's shape for each --quant format: synthetic blocks
    (random quant bits, finite scales) whose dequantized weights have the dense stacks' standard
    deviation (H^-1/2 for gate/up, I^-1/2 for down), seeded per format; gate and up as one
    [E, 2I, H] tensor (one GEMM), as the dense stack."""
    E, H, I = args.E, args.hidden, args.inter
    made = {}
    for name in args.quant_formats:
        g = torch.Generator(device="cpu").manual_seed(1000 + qformat(name).type_id)
        gate_up = random_quantized(name, 2 * I, H, leading=(E,), std=H ** -0.5, generator=g)
        down = random_quantized(name, H, I, leading=(E,), std=I ** -0.5, generator=g)
        made[name] = QuantizedExperts(down=QuantizedWeight(down, name, I),
                                      gate_up=QuantizedWeight(gate_up, name, H)).to(device)
        say(f"  {name}: {mib(made[name].nbytes)} of blocks")
    return made


def dense_bytes(experts):
    """Bytes of a DenseExperts' two stacks as stored."""
    return sum(t.numel() * t.element_size() for t in (experts.gate_up, experts.down))


def quant_tolerance(args):
    if args.device == "mps" and args.dtype == "float32":
        return METAL_FP32_QUANT_TOLERANCE
    return QUANT_TOLERANCE[args.dtype]


def check_quantized_layers(args, layer, quantized, ops):
    """{format: (path, tile_m, rel. error)}: each quantized layer run once (the path and tile_m
    moe_layer takes for it) against reference.moe_layer in float64 on the dequantized weights of
    the same blocks, with the routing of the layer (route on x as it is)."""
    x, rw = layer["x"], layer["router_weight"]
    ids, w = route(x, rw, args.K)
    checked = {}
    for name, experts in quantized.items():
        chosen = choose_experts_path(x, experts, ops, n_entries=args.T * args.K,
                                     tile_m=args.tile_m_flag)
        out = moe_layer(x, rw, experts, args.K, tile_m=args.tile_m_flag, ops=ops)
        ref = reference.moe_layer(x.double(), rw, experts, args.K, topk_ids=ids, topk_weights=w)
        checked[name] = (chosen.name, chosen.tile_m, relative_error(out, ref))
    return checked


def quant_timers(args, layer, quantized, ops):
    """(QUANT, format, the whole layer with those experts) for each --quant format."""
    x, rw = layer["x"], layer["router_weight"]

    def timer(experts):
        return lambda: moe_layer(x, rw, experts, args.K, tile_m=args.tile_m_flag, ops=ops)

    return [(QUANT, name, timer(experts)) for name, experts in quantized.items()]


def quant_records(args, layer, quantized, checked, argon, quant_us, rel):
    """The JSON records of the dense layer and of each quantized one: op, format, path,
    weight_bytes (the expert stacks), median_us (the whole layer), rel_error and what it is
    against, the tolerance and whether the check passed."""
    tol = quant_tolerance(args)
    records = [dict(op="moe_layer", format=args.dtype, path=args.path, tile_m=args.tile_m,
                    weight_bytes=dense_bytes(layer["experts"]), bits_per_weight=8 *
                    DTYPES[args.dtype].itemsize, median_us=argon["whole layer"], rel_error=rel,
                    compared_to="float64 per-expert layer on the same weights",
                    tolerance=TOLERANCE[args.dtype], ok=rel < TOLERANCE[args.dtype])]
    for name, experts in quantized.items():
        path, tile_m, err = checked[name]
        records.append(dict(op="moe_layer_quant", format=name, path=path, tile_m=tile_m,
                            weight_bytes=experts.nbytes,
                            bits_per_weight=qformat(name).bits_per_weight,
                            median_us=quant_us[name], rel_error=err,
                            compared_to="float64 per-expert layer on the dequantized weights",
                            tolerance=tol, ok=err < tol))
    return records


def mib(n_bytes):
    return f"{n_bytes / 2 ** 20:.2f} MiB"


def render_quant(records):
    """The dense layer against each quantized one: time, expert weight bytes, error."""
    dense = records[0]
    lines = ["quantized experts (--quant): the same layer shape, its experts as synthetic GGUF "
             "blocks (random quant bits, finite scales, the dense weights' std); each layer's "
             "rel. error is against the float64 per-expert layer on its own weights (the "
             "quantized ones dequantized), same routing",
             "", "| experts | path | whole layer (us) | speedup vs dense | expert weights | "
             "weights vs dense | rel. error (tolerance) |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in records:
        label = (f"{r['format']} (dense)" if r["op"] == "moe_layer"
                 else f"{r['format']} ({r['bits_per_weight']:g} bits/weight)")
        check = f"{r['rel_error']:.2e} (< {r['tolerance']:.0e})" if r["ok"] else \
            f"{r['rel_error']:.2e} FAILED (>= {r['tolerance']:.0e})"
        lines.append(f"| {label} | {r['path']} | {r['median_us']:.1f} | "
                     f"{ratio(dense['median_us'], r['median_us'])} | {mib(r['weight_bytes'])} | "
                     f"{r['weight_bytes'] / dense['weight_bytes']:.3f}x | {check} |")
    return "\n".join(lines)


def pick_path(args, layer, ops):
    """The path and tile_m the layer itself takes (paths.choose_experts_path), so the stages
    timed below are the ones moe_layer runs. Returns (tile_m, path name)."""
    chosen = choose_experts_path(layer["x"], layer["experts"], ops, n_entries=args.T * args.K,
                                 tile_m=args.tile_m)
    return chosen.tile_m, chosen.name


def run_layer(args, layer, ops):
    return moe_layer(layer["x"], layer["router_weight"], layer["experts"], args.K,
                     tile_m=args.tile_m, ops=ops)


def relative_error(out, ref):
    """||out - ref|| / ||ref|| in float64; 0 where both are empty or zero (T = 0), not 0/0."""
    diff = float((out.double() - ref.double()).norm())
    norm = float(ref.double().norm())
    if norm == 0:
        return 0.0 if diff == 0 else math.inf
    return diff / norm


def check_parity(args, layer, ops, out):
    """Plan bit for bit against the reference; the layer against float64 per-expert math."""
    ids, w = route(layer["x"], layer["router_weight"], args.K)
    got = ops.moe_plan(ids, w, args.E, args.tile_m)
    want = reference.moe_plan(ids.cpu(), w.cpu(), args.E, args.tile_m)
    plan_ok = all(torch.equal(a.cpu(), b) for a, b in zip(got.tensors(), want.tensors()))
    ref = reference.moe_layer(layer["x"], layer["router_weight"], layer["experts"], args.K,
                              topk_ids=ids, topk_weights=w)
    return plan_ok, relative_error(out, ref)


def stage_timers(args, layer, ops, device):
    """Every call the job times, as (table, stage, fn): argon's stages on the path moe_layer
    takes (args.path) and its whole layer, the argsort + grouped_mm path's, and the per-expert
    loop. Also runs each stage once, in order, to make the inputs of the next."""
    x, rw, experts = layer["x"], layer["router_weight"], layer["experts"]
    dense = experts.to_dense()
    wgu, wd = dense.gate_up, dense.down
    K, E, tm, T = args.K, args.E, args.tile_m, args.T
    ids, w = route(x, rw, K)
    plan = ops.moe_plan(ids, w, E, tm)
    timers = [(ARGON, "route", lambda: route(x, rw, K)),
              (ARGON, "plan", lambda: ops.moe_plan(ids, w, E, tm))]
    if args.path == "triton":  # the gather and SwiGLU run inside the gate/up GEMM
        gate_up = triton_ops.moe_gate_up_swiglu_triton
        h = gate_up(x, wgu, plan.tile_expert, plan.meta, tm, plan.sorted_token, zero_unused=False)
        y = triton_ops.moe_mm_triton(h, wd, plan.tile_expert, plan.meta, tm, zero_unused=False,
                                     row_token=plan.sorted_token)
        timers += [
            (ARGON, "gather + gate/up GEMM + SwiGLU", lambda: gate_up(
                x, wgu, plan.tile_expert, plan.meta, tm, plan.sorted_token, zero_unused=False)),
            (ARGON, "down GEMM", lambda: triton_ops.moe_mm_triton(
                h, wd, plan.tile_expert, plan.meta, tm, zero_unused=False,
                row_token=plan.sorted_token))]
    else:
        xs = ops.moe_gather(x, plan)
        gu = ops.moe_mm(xs, wgu, plan)
        h = ops.swiglu(gu)
        y = ops.moe_mm(h, wd, plan)
        timers += [(ARGON, "gather", lambda: ops.moe_gather(x, plan)),
                   (ARGON, "gate/up GEMM", lambda: ops.moe_mm(xs, wgu, plan)),
                   (ARGON, "SwiGLU", lambda: ops.swiglu(gu)),
                   (ARGON, "down GEMM", lambda: ops.moe_mm(h, wd, plan))]
    timers += [(ARGON, "combine", lambda: ops.moe_combine(y, plan, w, out_dtype=x.dtype)),
               (ARGON, "whole layer", lambda: run_layer(args, layer, ops))]

    order, ends = baselines.argsort_plan(ids, E)
    timers += [(TORCH, "plan", lambda: baselines.argsort_plan(ids, E)),
               (TORCH, "gather", lambda: baselines.argsort_gather(x, order, K))]
    if baselines.has_grouped_mm(device, x.dtype):
        xs_u = baselines.argsort_gather(x, order, K)
        gu_u = baselines.grouped_mm(xs_u, wgu, ends)
        h_u = baselines.swiglu_torch(gu_u)
        y_u = baselines.grouped_mm(h_u, wd, ends)
        timers += [
            (TORCH, "gate/up GEMM", lambda: baselines.grouped_mm(xs_u, wgu, ends)),
            (TORCH, "SwiGLU", lambda: baselines.swiglu_torch(gu_u)),
            (TORCH, "down GEMM", lambda: baselines.grouped_mm(h_u, wd, ends)),
            (TORCH, "combine", lambda: baselines.argsort_combine(y_u, order, w, K, T)),
            (TORCH, "whole layer", lambda: baselines.layer_argsort_grouped_mm(x, rw, wgu, wd, K))]
    if not args.no_loop:
        timers.append((LOOP, "whole layer",
                       lambda: baselines.layer_per_expert_loop(x, rw, wgu, wd, K)))
    return timers


def measure(timers, device, rounds, repeat):
    """{(table, stage): [median us of each round]}: every timer once per round, interleaved,
    after one warm-up call in the first round (stage_timers has run each once already). The
    per-expert loop, up to seconds a call, is called once a round."""
    runs = {(table, stage): [] for table, stage, _ in timers}
    say(f"timing {len(timers)} calls: {rounds} rounds, each call {repeat} times a round "
        "(--rounds, --repeat)")
    for r in range(rounds):
        t0 = time.perf_counter()
        print(f"  round {r + 1}/{rounds} ", end="", flush=True)
        for table, stage, fn in timers:
            n = 1 if table == LOOP else repeat
            runs[(table, stage)].append(median_us(fn, device, warmup=int(r == 0), repeat=n))
            print(".", end="", flush=True)
        say(f" {time.perf_counter() - t0:.1f} s")
    return runs


def summarize(runs):
    """(argon, torch_path, loop): each stage's median over the rounds (us) on the two paths, and
    the per-expert loop's (None when skipped)."""
    tables = {ARGON: {}, TORCH: {}, LOOP: {}}
    for (table, stage), rounds in runs.items():
        tables.setdefault(table, {})[stage] = statistics.median(rounds)
    argon, torch_path = tables[ARGON], tables[TORCH]
    torch_path = {"route": argon["route"], **torch_path}  # one router for both paths
    if "gate/up GEMM" in torch_path and "gather + gate/up GEMM + SwiGLU" in argon:
        torch_path["gather + gate/up GEMM + SwiGLU"] = (
            torch_path["gather"] + torch_path["gate/up GEMM"] + torch_path["SwiGLU"])
    return argon, torch_path, tables[LOOP].get("whole layer")


def medians(runs, table):
    """{stage: median over the rounds (us)} of one table of `runs`."""
    return {stage: statistics.median(r) for (t, stage), r in runs.items() if t == table}


def busy_notes(argon, torch_path, runs, *, load=None, cores=None, own_threads=1):
    """Why the timings cannot be trusted (empty when nothing says so): a stage slower than the
    whole layer that runs it; a stage whose round medians spread by more than SPREAD_LIMIT of
    their median and more than SPREAD_FLOOR_US (timer jitter of a few-us stage is no sign); a
    1-minute load average that, less this job's own threads, exceeds half the cores."""
    notes = []
    for name, times in ((ARGON, argon), (TORCH, torch_path)):
        whole = times.get("whole layer")
        slower = [s for s, us in times.items() if s != "whole layer" and whole and us > whole]
        if slower:
            notes.append(f"{name}: {', '.join(slower)} read slower than the whole layer "
                         f"({whole:.1f} us), which runs {'it' if len(slower) == 1 else 'them'}")
    wide = []
    for (table, stage), rounds in runs.items():
        mid, gap = statistics.median(rounds), max(rounds) - min(rounds)
        if gap > SPREAD_FLOOR_US and gap > SPREAD_LIMIT * mid:
            wide.append((gap / mid, f"{table} {stage} {gap / mid:.0%}"))
    if wide:
        wide = [text for _, text in sorted(wide, reverse=True)]
        more = f" and {len(wide) - 3} more stages" if len(wide) > 3 else ""
        notes.append(f"rounds disagree by more than {SPREAD_LIMIT:.0%}: "
                     + ", ".join(wide[:3]) + more)
    if load is None and hasattr(os, "getloadavg"):
        load = os.getloadavg()[0]
    cores = cores or os.cpu_count() or 1
    if load is not None and load - own_threads > cores / 2:
        notes.append(f"load average {load:.1f} on {cores} cores (this job's share is at most "
                     f"{own_threads}): other work shares the CPU")
    return notes


def render(args, device_name, argon, torch_path, loop, plan_ok, rel, notes):
    lines = [
        f"torch_argon MoE prefill layer on {device_name}: T={args.T} E={args.E} K={args.K} "
        f"hidden={args.hidden} inter={args.inter} {args.dtype} tile_m={args.tile_m} "
        f"({args.path} path)",
        f"parity: plan bit-exact vs reference: {'yes' if plan_ok else 'NO'}; "
        f"layer rel. error vs float64 reference: {rel:.2e}",
        f"timing: each stage's median over {args.rounds} rounds of {args.repeat} calls",
    ]
    if notes:
        lines.append("BUSY MACHINE: the times below are not reliable (rerun on a quiet machine):")
        lines += [f"  - {n}" for n in notes]
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


def ratio(base, us):
    return f"{base / us:.2f}x" if us > 0 else "-"


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


def expert_parts(experts):
    """{part: QuantizedWeight} of quantized experts: gate_up (or gate and up) and down."""
    return {part: getattr(experts, part) for part in ("gate_up", "gate", "up", "down")
            if getattr(experts, part) is not None}


def open_gguf(args, device):
    """The file's config and {block: nn.MoE} of its first --layers MoE blocks (all without the
    flag) on `device`; a file it cannot run (GGUFError: not GGUF, not an MoE architecture, a
    missing or misshapen tensor; an expert format without kernels) is one error line."""
    from .gguf import GGUFError, GGUFMoE
    try:
        moe_file = GGUFMoE(args.gguf)
        blocks = moe_file.config.moe_blocks[:args.layers]  # [:None] is all
        layers = moe_file.moe_layers(device=device, dtype=DTYPES[args.dtype], blocks=blocks,
                                     tile_m=args.tile_m_flag)
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


def check_gguf_layer(moe, x):
    """The relative error of MoE block `moe` on x against reference.moe_layer in float64 on its
    dequantized experts, with the block's own routing, plus its shared expert (if any) in
    float64 on the same dense weights."""
    _, weights, ids = moe.gate(x)
    act = reference.ACTIVATIONS[moe.activation]
    shared = None
    if moe.shared_expert is not None:
        s, xd = moe.shared_expert, x.double()
        h = act(xd @ s.gate_proj.weight.double().T) * (xd @ s.up_proj.weight.double().T)
        shared = h @ s.down_proj.weight.double().T
        if moe.shared_expert_gate is not None:
            shared = torch.sigmoid(xd @ moe.shared_expert_gate.weight.double().T) * shared
    ref = reference.moe_layer(x.double(), None, moe.experts.expert_weights(), ids.shape[1],
                              topk_ids=ids, topk_weights=weights, shared=shared,
                              activation=moe.activation)
    return relative_error(moe(x), ref)


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
    if notes:
        lines.append("BUSY MACHINE: the times below are not reliable (rerun on a quiet machine):")
        lines += [f"  - {n}" for n in notes]
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
        rel, tol = check_gguf_layer(layers[first], x), quant_tolerance(args)
        parity = dict(block=first, rel_error=rel, tolerance=tol, ok=rel < tol,
                      compared_to="float64 per-expert layer on the dequantized weights")
        timers = [(GGUF, str(b), (lambda moe: lambda: moe(x))(moe)) for b, moe in layers.items()]
        runs = measure(timers, device, args.rounds, args.repeat)
    times = medians(runs, GGUF)
    records = []
    dense_per_expert = 3 * config.hidden * config.inter * DTYPES[args.dtype].itemsize
    for b, moe in layers.items():
        experts = moe.experts.expert_weights()
        chosen = choose_experts_path(x, experts, ops, n_entries=args.T * config.top_k,
                                     tile_m=args.tile_m_flag)
        records.append(dict(op="moe_layer_gguf", block=b, path=chosen.name,
                            tile_m=chosen.tile_m, median_us=times[str(b)],
                            formats={p: w.qtype.name for p, w in expert_parts(experts).items()},
                            weight_bytes=experts.nbytes,
                            dense_weight_bytes=config.n_experts * dense_per_expert))
    notes = busy_notes({}, {}, runs,
                       own_threads=torch.get_num_threads() if device.type == "cpu" else 1)
    say("\n" + render_gguf(args, device_name, config, records, parity, notes))
    report = dict(device=device_name, gguf=os.path.abspath(args.gguf),
                  config=dataclasses.asdict(config),
                  run=dict(T=args.T, dtype=args.dtype, tile_m=args.tile_m_flag),
                  parity=parity, layers=records,
                  timing=dict(rounds=args.rounds, repeat=args.repeat, busy_notes=notes,
                              round_medians_us={f"{t}/{s}": r for (t, s), r in runs.items()}))
    with open(args.json, "w") as f:
        json.dump(report, f, indent=1)
    say(f"\nwrote {os.path.abspath(args.json)} (no plot with --gguf)")
    if not parity["ok"]:
        raise SystemExit(f"parity FAILED (block {first} rel error {rel:.2e} >= {tol:.0e})")


def fail(message):
    """One error line, as argparse's, and exit status 2: for what only shows once the job reads
    its input (a GGUF file it cannot run)."""
    import sys
    sys.stderr.write(f"{PROG}: error: {message}\n")
    raise SystemExit(2)


def main(argv=None):
    args = parse_args(argv)
    args.tile_m_flag = args.tile_m  # the user's; args.tile_m becomes the dense layer's choice
    device = torch.device(args.device)
    ops = backends.get(args.device).ops
    device_name = describe_device(device)
    torch.manual_seed(0)
    say(f"torch_argon main job on {device_name}")
    if args.gguf is not None:
        return run_gguf(args, device, ops, device_name)
    with torch.inference_mode():
        say(f"building the layer: T={args.T} E={args.E} K={args.K} hidden={args.hidden} "
            f"inter={args.inter} {args.dtype}")
        layer = build_layer(args, device)
        args.tile_m, args.path = pick_path(args, layer, ops)
        say(f"running it ({args.path} path, tile_m={args.tile_m}) and checking it against "
            "the reference")
        out = run_layer(args, layer, ops)
        plan_ok, rel = check_parity(args, layer, ops, out)
        quantized, checked = {}, {}
        if args.quant_formats:
            say(f"building the quantized experts ({', '.join(args.quant_formats)}: synthetic "
                "blocks), running each and checking it against the float64 layer on its "
                "dequantized weights")
            quantized = build_quantized(args, layer, device)
            checked = check_quantized_layers(args, layer, quantized, ops)
        timers = stage_timers(args, layer, ops, device) + quant_timers(args, layer, quantized,
                                                                       ops)
        runs = measure(timers, device, args.rounds, args.repeat)
    argon, torch_path, loop = summarize(runs)
    notes = busy_notes(argon, torch_path, runs,
                       own_threads=torch.get_num_threads() if device.type == "cpu" else 1)
    table = render(args, device_name, argon, torch_path, loop, plan_ok, rel, notes)
    records = []
    if quantized:
        records = quant_records(args, layer, quantized, checked, argon, medians(runs, QUANT),
                                rel)
        table += "\n\n" + render_quant(records)
    say("\n" + table)
    report = dict(device=device_name, config={k: getattr(args, k) for k in
                  ("T", "E", "K", "hidden", "inter", "dtype", "tile_m", "path")},
                  parity=dict(plan_bit_exact=plan_ok, layer_rel_error=rel),
                  argon_us=argon, argsort_grouped_mm_us=torch_path, per_expert_loop_us=loop,
                  timing=dict(rounds=args.rounds, repeat=args.repeat, busy_notes=notes,
                              round_medians_us={f"{t}/{s}": r for (t, s), r in runs.items()}))
    if records:
        report["quantized"] = records
    with open(args.json, "w") as f:
        json.dump(report, f, indent=1)
    say(f"\nwrote {os.path.abspath(args.json)}")
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


if __name__ == "__main__":
    main()
