"""The main job: run one MoE prefill layer on the best available device, check it against the
reference, and time each stage against the plain-torch ways of doing it.

    python -m torch_argon                 # mps, then cuda, then cpu
    python -m torch_argon --device cpu --T 1024

Prints a table, writes it as JSON (and a PNG where matplotlib is installed).
"""
import argparse
import json
import os
import platform

import torch

from . import reference
from . import triton_ops
from .paths import choose_experts_path
from .weights import DenseExperts
from .routing import route
from .testing import backends, baselines
from .testing.timing import median_us

# Qwen3-Next-sized by default; the CPU default is smaller so it finishes in seconds.
DEFAULTS = {
    "gpu": dict(T=2048, E=512, K=10, hidden=2048, inter=512, dtype="bfloat16"),
    "cpu": dict(T=512, E=128, K=8, hidden=1024, inter=256, dtype="float32"),
}
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m torch_argon", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="auto", choices=["auto", "mps", "cuda", "cpu"])
    p.add_argument("--T", type=int, help="tokens")
    p.add_argument("--E", type=int, help="experts")
    p.add_argument("--K", type=int, help="experts per token")
    p.add_argument("--hidden", type=int)
    p.add_argument("--inter", type=int, help="expert width (intermediate size)")
    p.add_argument("--dtype", choices=list(DTYPES))
    p.add_argument("--tile-m", type=int, help="rows per GEMM tile (default: what the layer picks: "
                   "from T*K/E on the CUDA Triton path, else 16 on GPUs and 1 on the CPU)")
    p.add_argument("--repeat", type=int, default=10, help="timed calls per stage (median)")
    p.add_argument("--no-loop", action="store_true", help="skip the slow per-expert loop")
    p.add_argument("--json", default="argon_report.json")
    p.add_argument("--plot", default="argon_report.png")
    args = p.parse_args(argv)
    if args.device == "auto":
        args.device = backends.best_device()
    for key, value in DEFAULTS["cpu" if args.device == "cpu" else "gpu"].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def make_layer(args, device):
    g = torch.Generator(device="cpu").manual_seed(0)
    dt = DTYPES[args.dtype]
    H, I, E = args.hidden, args.inter, args.E

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(device=device, dtype=dt)

    return dict(x=rand(args.T, H), router_weight=rand(E, H, scale=H ** -0.5),
                w_gate_up=rand(E, 2 * I, H, scale=H ** -0.5), w_down=rand(E, H, I, scale=I ** -0.5))


def check_parity(args, layer, ops, out):
    """Plan bit for bit against the reference; the layer against float64 per-expert math."""
    ids, w = route(layer["x"], layer["router_weight"], args.K)
    got = ops.moe_plan(ids, w, args.E, args.tile_m)
    want = reference.moe_plan(ids.cpu(), w.cpu(), args.E, args.tile_m)
    plan_ok = all(torch.equal(a.cpu(), b) for a, b in zip(got.tensors(), want.tensors()))
    ref = reference.moe_layer(layer["x"], layer["router_weight"],
                              (layer["w_gate_up"], layer["w_down"]), args.K, topk_ids=ids,
                              topk_weights=w)
    rel = float((out.double() - ref.double()).norm() / ref.double().norm())
    return plan_ok, rel


def pick_path(args, layer, ops):
    """The path and tile_m the layer itself takes (paths.choose_experts_path), so the stages
    timed below are the ones moe_layer runs. Returns (tile_m, path name)."""
    experts = DenseExperts(layer["w_gate_up"], layer["w_down"])
    chosen = choose_experts_path(layer["x"], experts, ops, n_entries=args.T * args.K,
                                 tile_m=args.tile_m)
    return chosen.tile_m, chosen.name


def time_stages(args, layer, ops, device):
    """Median microseconds of each stage of the path moe_layer takes (args.path), and of the
    argsort + grouped_mm path."""
    x, rw, wgu, wd = (layer[k] for k in ("x", "router_weight", "w_gate_up", "w_down"))
    K, E, tm, T = args.K, args.E, args.tile_m, args.T
    t = lambda fn: median_us(fn, device, repeat=args.repeat)  # noqa: E731

    ids, w = route(x, rw, K)
    plan = ops.moe_plan(ids, w, E, tm)
    argon = {"route": t(lambda: route(x, rw, K)), "plan": t(lambda: ops.moe_plan(ids, w, E, tm))}
    if args.path == "triton":  # the gather and SwiGLU run inside the gate/up GEMM
        gate_up = triton_ops.moe_gate_up_swiglu_triton
        h = gate_up(x, wgu, plan.tile_expert, plan.meta, tm, plan.sorted_token, zero_unused=False)
        y = triton_ops.moe_mm_triton(h, wd, plan.tile_expert, plan.meta, tm, zero_unused=False,
                                     row_token=plan.sorted_token)
        argon["gather + gate/up GEMM + SwiGLU"] = t(lambda: gate_up(
            x, wgu, plan.tile_expert, plan.meta, tm, plan.sorted_token, zero_unused=False))
        argon["down GEMM"] = t(lambda: triton_ops.moe_mm_triton(
            h, wd, plan.tile_expert, plan.meta, tm, zero_unused=False,
            row_token=plan.sorted_token))
    else:
        xs = ops.moe_gather(x, plan)
        gu = ops.moe_mm(xs, wgu, plan)
        h = ops.swiglu(gu)
        y = ops.moe_mm(h, wd, plan)
        argon["gather"] = t(lambda: ops.moe_gather(x, plan))
        argon["gate/up GEMM"] = t(lambda: ops.moe_mm(xs, wgu, plan))
        argon["SwiGLU"] = t(lambda: ops.swiglu(gu))
        argon["down GEMM"] = t(lambda: ops.moe_mm(h, wd, plan))
    argon["combine"] = t(lambda: ops.moe_combine(y, plan, w, out_dtype=x.dtype))
    from .layer import moe_layer
    argon["whole layer"] = t(lambda: moe_layer(x, rw, (wgu, wd), K, tile_m=tm, ops=ops))

    torch_path = {"route": argon["route"]}
    order, ends = baselines.argsort_plan(ids, E)
    torch_path["plan"] = t(lambda: baselines.argsort_plan(ids, E))
    torch_path["gather"] = t(lambda: baselines.argsort_gather(x, order, K))
    if baselines.has_grouped_mm(device, x.dtype):
        xs_u = baselines.argsort_gather(x, order, K)
        gu_u = baselines.grouped_mm(xs_u, wgu, ends)
        h_u = baselines.swiglu_torch(gu_u)
        y_u = baselines.grouped_mm(h_u, wd, ends)
        torch_path["gate/up GEMM"] = t(lambda: baselines.grouped_mm(xs_u, wgu, ends))
        torch_path["SwiGLU"] = t(lambda: baselines.swiglu_torch(gu_u))
        torch_path["down GEMM"] = t(lambda: baselines.grouped_mm(h_u, wd, ends))
        torch_path["gather + gate/up GEMM + SwiGLU"] = (
            torch_path["gather"] + torch_path["gate/up GEMM"] + torch_path["SwiGLU"])
        torch_path["combine"] = t(lambda: baselines.argsort_combine(y_u, order, w, K, T))
        torch_path["whole layer"] = t(lambda: baselines.layer_argsort_grouped_mm(x, rw, wgu, wd, K))
    loop = None
    if not args.no_loop:
        loop = median_us(lambda: baselines.layer_per_expert_loop(x, rw, wgu, wd, K), device,
                         warmup=1, repeat=3)
    return argon, torch_path, loop


def render(args, device_name, argon, torch_path, loop, plan_ok, rel):
    lines = [
        f"torch_argon MoE prefill layer on {device_name}: T={args.T} E={args.E} K={args.K} "
        f"hidden={args.hidden} inter={args.inter} {args.dtype} tile_m={args.tile_m} "
        f"({args.path} path)",
        f"parity: plan bit-exact vs reference: {'yes' if plan_ok else 'NO'}; "
        f"layer rel. error vs float64 reference: {rel:.2e}",
        "",
        "| stage | argon (us) | argsort + grouped_mm (us) | speedup |",
        "|---|---:|---:|---:|",
    ]
    for stage, us in argon.items():
        base = torch_path.get(stage)
        ratio = f"{base / us:.2f}x" if base else "-"
        lines.append(f"| {stage} | {us:.1f} | {base:.1f} | {ratio} |" if base
                     else f"| {stage} | {us:.1f} | - | - |")
    if loop is not None:
        lines.append(f"| whole layer vs per-expert Python loop | {argon['whole layer']:.1f} | "
                     f"{loop:.1f} (loop) | {loop / argon['whole layer']:.1f}x |")
    return "\n".join(lines)


def plot(path, title, argon, torch_path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    stages = list(argon)
    fig, ax = plt.subplots(figsize=(8, 4))
    ys = range(len(stages))
    ax.barh([y + 0.2 for y in ys], [argon[s] for s in stages], height=0.4, label="argon")
    ax.barh([y - 0.2 for y in ys], [torch_path.get(s, 0) for s in stages], height=0.4,
            label="argsort + grouped_mm")
    ax.set_yticks(list(ys), stages)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("median time per call (us, log scale)")
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    ops = backends.get(args.device).ops
    torch.manual_seed(0)
    with torch.inference_mode():
        layer = make_layer(args, device)
        args.tile_m, args.path = pick_path(args, layer, ops)
        from .layer import moe_layer
        out = moe_layer(layer["x"], layer["router_weight"], (layer["w_gate_up"], layer["w_down"]),
                        args.K, tile_m=args.tile_m, ops=ops)
        plan_ok, rel = check_parity(args, layer, ops, out)
        argon, torch_path, loop = time_stages(args, layer, ops, device)
    device_name = args.device
    if device.type == "cuda":
        device_name = torch.cuda.get_device_name(device)
    elif device.type == "cpu":
        device_name = f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    table = render(args, device_name, argon, torch_path, loop, plan_ok, rel)
    print(table)
    report = dict(device=device_name, config={k: getattr(args, k) for k in
                  ("T", "E", "K", "hidden", "inter", "dtype", "tile_m", "path")},
                  parity=dict(plan_bit_exact=plan_ok, layer_rel_error=rel),
                  argon_us=argon, argsort_grouped_mm_us=torch_path, per_expert_loop_us=loop)
    with open(args.json, "w") as f:
        json.dump(report, f, indent=1)
    print(f"\nwrote {os.path.abspath(args.json)}")
    if plot(args.plot, table.splitlines()[0], argon, torch_path):
        print(f"wrote {os.path.abspath(args.plot)}")
    tol = {"float32": 1e-4, "float16": 5e-3, "bfloat16": 2e-2}[args.dtype]
    if not plan_ok or not rel < tol:
        raise SystemExit(f"parity FAILED (plan bit-exact: {plan_ok}, layer rel error {rel:.2e} "
                         f">= {tol:.0e})")


if __name__ == "__main__":
    main()
