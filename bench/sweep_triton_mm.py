"""Choose the Triton grouped GEMM's block shapes and the layer's tile_m on the H200: time each
candidate config of the fused gate/up + SwiGLU kernel and of the down kernel at the layer's
shapes (bf16, E=512, K=10, H=2048, I=512), for the tile_m values that suit each T, next to
torch._grouped_mm on the same padded rows; check each kernel's output against torch; measure
the copy bandwidth (the weight-streaming ceiling) and the router's parts. The layer is
torch_argon.testing.layers.make_layer's, its plans torch_argon.reference's.

    python bench/sweep_triton_mm.py --out $OUT/sweep.json     # ~2-3 minutes

Prints, per T and tile_m, the best config of each kernel with its time and the weight bytes it
streamed per second; the winners go into torch_argon/triton_ops/configs.py by hand.
"""
import argparse
import json
import multiprocessing as mp
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from torch_argon import reference  # noqa: E402
from torch_argon.routing import route  # noqa: E402
from torch_argon.testing.layers import make_layer, relative_error  # noqa: E402
from torch_argon.testing.timing import cuda_graph_us as graph_us, median_us  # noqa: E402
from torch_argon.triton_ops.configs import MMConfig  # noqa: E402
from torch_argon.triton_ops.ops import launch_moe_mm, topk_triton  # noqa: E402

C = MMConfig
CANDIDATES = {  # (swiglu, BLOCK_M) -> configs (block_n, block_k, num_warps, num_stages)
    (True, 16): [C(64, 128, 4, 4), C(64, 128, 4, 5), C(32, 128, 4, 5), C(128, 64, 4, 4),
                 C(64, 256, 4, 3), C(128, 128, 4, 3)],
    (True, 64): [C(64, 64, 4, 4), C(64, 64, 4, 5), C(64, 128, 4, 3), C(128, 64, 8, 4),
                 C(128, 64, 8, 3), C(64, 64, 8, 4)],
    (True, 128): [C(64, 64, 8, 4), C(128, 64, 8, 3), C(64, 128, 8, 3), C(64, 64, 4, 4),
                  C(128, 64, 8, 4), C(64, 64, 8, 5)],
    (False, 16): [C(128, 128, 4, 4), C(64, 128, 4, 4), C(128, 64, 4, 5), C(256, 64, 4, 4),
                  C(128, 256, 4, 3), C(64, 256, 4, 3)],
    (False, 64): [C(128, 64, 4, 4), C(128, 128, 4, 3), C(64, 128, 4, 4), C(256, 64, 8, 3),
                  C(128, 64, 8, 4), C(128, 64, 4, 3)],
    (False, 128): [C(128, 64, 8, 4), C(128, 64, 8, 3), C(256, 64, 8, 3), C(128, 128, 8, 3),
                   C(64, 64, 4, 4), C(128, 64, 8, 5)],
}
CANDIDATES[(True, 32)] = CANDIDATES[(True, 16)]
CANDIDATES[(False, 32)] = CANDIDATES[(False, 16)]
TILE_MS = {128: [16], 512: [16, 32], 2048: [32, 64], 8192: [64, 128]}


def events_us(fn, inner=5, samples=7):
    """CUDA events around `inner` back-to-back calls (after one warm-up call), median."""
    return median_us(fn, "cuda", warmup=1, repeat=samples, inner=inner)


def problem(T, E=512, K=10, H=2048, I=512):
    """x, router, gate/up and down stacks of the layer (bf16, on the GPU)."""
    layer = make_layer(T, E, K, H, I, torch.bfloat16, "cuda")
    return layer.x, layer.router_weight, layer.w_gate_up, layer.w_down


def compile_worker(jobs):
    """Compile (and run once on small data) each (swiglu, block_m, config): fills the Triton
    cache so the timing process loads instead of compiling."""
    x, _, wgu, wd = problem(64, E=16, K=4)
    ids = torch.arange(64 * 4, device="cuda").view(64, 4) % 16
    for swiglu, bm, cfg in jobs:
        plan = reference.moe_plan(ids, torch.rand(64, 4, device="cuda"), 16, bm)
        R = plan.sorted_token.shape[0]
        try:
            if swiglu:
                out = torch.empty(R, 512, device="cuda", dtype=torch.bfloat16)
                launch_moe_mm(x, wgu, plan.tile_expert, plan.meta, bm, plan.sorted_token, out,
                              swiglu=True, zero_unused=False, config=cfg)
            else:
                a = torch.zeros(R, 512, device="cuda", dtype=torch.bfloat16)
                out = torch.empty(R, 2048, device="cuda", dtype=torch.bfloat16)
                launch_moe_mm(a, wd, plan.tile_expert, plan.meta, bm, None, out, swiglu=False,
                              zero_unused=False, config=cfg)
        except Exception as e:  # e.g. out of shared memory: the timing loop skips it too
            print(f"compile {swiglu} {bm} {cfg}: {type(e).__name__}", flush=True)
    torch.cuda.synchronize()


def precompile(n_proc):
    jobs = [(sw, bm, cfg) for (sw, bm), cfgs in CANDIDATES.items() for cfg in cfgs]
    ctx = mp.get_context("spawn")
    with ctx.Pool(n_proc) as pool:
        pool.map(compile_worker, [jobs[i::n_proc] for i in range(n_proc)])


def copy_tbps():
    a = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    us = events_us(lambda: b.copy_(a), inner=3, samples=5)
    return 2 * a.numel() / (us * 1e-6) / 1e12


def route_split(x, router, K):
    logits = torch.nn.functional.linear(x, router)
    scores = torch.softmax(logits, dim=-1, dtype=torch.float32)
    w, _ = torch.topk(scores, K, dim=-1)
    return {
        "route": graph_us(lambda: route(x, router, K)),
        "linear": graph_us(lambda: torch.nn.functional.linear(x, router)),
        "softmax": graph_us(lambda: torch.softmax(logits, dim=-1, dtype=torch.float32)),
        "topk": graph_us(lambda: torch.topk(scores, K, dim=-1)),
        "renorm": graph_us(lambda: w / w.sum(dim=-1, keepdim=True)),
    }


def topk_check(x, router, K):
    """topk_triton against torch.topk on the router's scores, on the same scores quantized to
    force ties, and on constant rows: mismatching rows (ids or values) of each; and times."""
    scores = torch.softmax(torch.nn.functional.linear(x, router), dim=-1, dtype=torch.float32)
    cases = {"scores": scores, "ties_1/64": (scores * 64 * scores.shape[1]).round() / 64,
             "ties_4": (torch.rand_like(scores) * 4).floor(),
             "constant": torch.full_like(scores, 0.5)}
    res = {}
    for name, s in cases.items():
        v, i = topk_triton(s, K)
        tv, ti = torch.topk(s, K, dim=-1)
        res[name + "_bad_id_rows"] = int((i != ti).any(1).sum())
        res[name + "_bad_value_rows"] = int((v != tv).any(1).sum())
        res[name + "_bad_set_rows"] = int((i.sort(1).values != ti.sort(1).values).any(1).sum())
    res["torch_topk_us"] = graph_us(lambda: torch.topk(scores, K, dim=-1))
    res["triton_topk_us"] = graph_us(lambda: topk_triton(scores, K))
    return res


def sweep_T(T, K=10, E=512, H=2048, I=512):
    x, router, wgu, wd = problem(T, E, K, H, I)
    ids, weights = route(x, router, K)
    out = {"T": T, "route_split_us": route_split(x, router, K), "topk": topk_check(x, router, K),
           "tile_m": {}}
    for tm in TILE_MS[T]:
        plan = reference.moe_plan(ids, weights, E, tm)
        n_rows = plan.n_rows
        R = plan.sorted_token.shape[0]
        touched = int((plan.counts > 0).sum())
        gu_bytes = touched * 2 * I * H * 2
        dn_bytes = touched * H * I * 2
        # torch on the same padded rows: the yardstick and the correctness reference.
        xs = reference.moe_gather(x, plan.sorted_token)
        ends = plan.offsets[1:]
        gu_t = torch._grouped_mm(xs, wgu.transpose(1, 2), offs=ends)
        h_t = reference.swiglu(gu_t)
        y_t = torch._grouped_mm(h_t, wd.transpose(1, 2), offs=ends)
        res = {"n_rows": n_rows, "experts_touched": touched,
               "grouped_mm_gate_up_us": events_us(
                   lambda: torch._grouped_mm(xs, wgu.transpose(1, 2), offs=ends)),
               "grouped_mm_down_us": events_us(
                   lambda: torch._grouped_mm(h_t, wd.transpose(1, 2), offs=ends)),
               "gate_up": [], "down": []}
        bm = min(tm, 128)
        for swiglu, name, nbytes in ((True, "gate_up", gu_bytes), (False, "down", dn_bytes)):
            for cfg in CANDIDATES[(swiglu, bm)]:
                if swiglu:
                    c = torch.full((R, I), float("nan"), device="cuda", dtype=torch.bfloat16)
                    call = lambda: launch_moe_mm(x, wgu, plan.tile_expert, plan.meta, tm,  # noqa
                                                 plan.sorted_token, c, swiglu=True,
                                                 zero_unused=False, config=cfg)
                    want = h_t
                else:
                    c = torch.full((R, H), float("nan"), device="cuda", dtype=torch.bfloat16)
                    call = lambda: launch_moe_mm(h_t, wd, plan.tile_expert, plan.meta, tm,  # noqa
                                                 None, c, swiglu=False, zero_unused=False,
                                                 config=cfg)
                    want = y_t
                try:
                    call()
                    err = relative_error(c[:n_rows], want[:n_rows])
                    us = events_us(call)
                except Exception as e:
                    res[name].append({"config": cfg.__dict__, "error": f"{type(e).__name__}: "
                                      f"{str(e)[:120]}"})
                    continue
                res[name].append({"config": cfg.__dict__, "us": us, "rel_err": err,
                                  "weight_tbps": nbytes / (us * 1e-6) / 1e12})
        out["tile_m"][tm] = res
    return out


def report(r):
    print(f"T={r['T']}: route split " + ", ".join(f"{k} {v:.1f}" for k, v in
                                                  r["route_split_us"].items()) + " us")
    print("  topk: " + ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                                 for k, v in r["topk"].items()))
    for tm, res in r["tile_m"].items():
        line = (f"  tm={tm} rows={res['n_rows']} experts={res['experts_touched']}  grouped_mm "
                f"gate_up {res['grouped_mm_gate_up_us']:.0f} down {res['grouped_mm_down_us']:.0f}")
        print(line)
        for name in ("gate_up", "down"):
            ok = [c for c in res[name] if "us" in c]
            bad = [c for c in res[name] if "us" not in c]
            for c in sorted(ok, key=lambda c: c["us"])[:3]:
                cf = c["config"]
                print(f"    {name:7} {c['us']:7.1f} us {c['weight_tbps']:.2f} TB/s err "
                      f"{c['rel_err']:.1e}  bn={cf['block_n']} bk={cf['block_k']} "
                      f"w={cf['num_warps']} s={cf['num_stages']}")
            for c in bad:
                print(f"    {name:7} failed {c['config']}: {c['error'][:80]}")
            errs = [c["rel_err"] for c in ok]
            if errs and max(errs) > 2e-2:
                print(f"    {name} MAX REL ERR {max(errs):.2e}  <-- wrong")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--T", default="2048,8192,512,128")
    p.add_argument("--out", default=None)
    p.add_argument("--procs", type=int, default=12)
    args = p.parse_args()
    if args.procs:
        precompile(args.procs)
    print(f"{torch.cuda.get_device_name()}: copy {copy_tbps():.2f} TB/s (read + write)")
    results = []
    for T in (int(t) for t in args.T.split(",")):
        r = sweep_T(T)
        report(r)
        results.append(r)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(results, f, indent=1)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
