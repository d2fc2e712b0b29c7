"""gpuq's GEMMs at each plan tile_m on a CUDA GPU (issue 43, small T): is the layer's rule
(gpuq.layer_tile_m with scaled=True, as the layer calls it for bf16 in mode "none": 1.5x the mean
rows per expert rounded up to 8, 16 or 32) the fastest choice?

    python bench/lab/gpuq_tile_m.py --json $OUT/gpuq_tile_m.json
    python bench/lab/gpuq_tile_m.py --formats Q4_K --configs E128 --T 128
    TRITON_INTERPRET=1 python bench/lab/gpuq_tile_m.py --device cpu --tiny
                                  # the logic at toy sizes on the CPU (the gpuq emulation)

The question (bench/quant_gpuq_notes.md): an expert with more rows than tile_m takes two tiles
and has its weights decoded twice; a larger tile decodes them once, but its 16-token warps take
the scaled path (each weight rounded to bf16, the Triton kernels' tolerance) and part of their
MMA columns are padding. "rule_tile_m" in the records is the layer's choice.

What is timed: the gate/up GEMM (gathered, SiLU epilogue) + the down GEMM of the layer's call
(plain K loop, activation_quant "none"), one plan per tile_m, the CUDA graphs replayed in turns
(testing/timing.py's interleaved_graphs_us); the floor: the format's weight bytes over the copy
bandwidth measured in the run. Each tile_m's output is checked against tile_m 8's on the routed
rows (relative error, the scaled path's tolerance 1.5e-2).

Records (JSON list): {"op": "gpuq_tile_m", "config", "E", "K", "H", "I", "T", "quant",
"rule_tile_m", "us": {tile_m: us}, "best_tile_m", "floor_us", "rel_err": {tile_m: err},
"device"}, {"op": "copy_bw", ...}, {"op": "gpuq_tile_m_error", "config", "T", "quant",
"error"}.
"""
import os
import sys
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpuq_loops import ROOT, gpuq_gemms, lab_calls, lab_main, lab_weights  # noqa: E402

sys.path.insert(0, ROOT)
TILE_MS = (8, 16, 32)
FORMATS = ("Q4_K", "IQ4_XS", "Q8_0", "IQ2_XS")
T_LIST = (128, 256, 512)
REL_TOL = 1.5e-2  # the scaled path's (tests/test_gpuq.py)


def routed_rel_err(got, want, plan_got, plan_want):
    """Relative error of got against want over the routed entries (each plan's rows of them)."""
    a = got[plan_got.pos.flatten().clamp(min=0)].float()
    b = want[plan_want.pos.flatten().clamp(min=0)].float()
    ok = (plan_want.pos.flatten() >= 0)
    return ((a[ok] - b[ok]).norm() / b[ok].norm().clamp(min=1e-30)).item()


def bench_config(device, cfg_name, cfg, names, Ts, bw, records, save):
    from torch_argon import reference
    from torch_argon.gpuq import ops as gpuq
    from torch_argon.testing.timing import interleaved_graphs_us
    E, K, H, I = cfg["E"], cfg["K"], cfg["H"], cfg["I"]
    g = torch.Generator(device=device).manual_seed(1)
    calls = lab_calls(device, cfg, Ts, g)
    for name in names:
        wq = lab_weights(device, name, cfg)
        qbytes = wq[0].numel() + wq[1].numel()
        for T, (x, ids, w) in calls.items():
            try:
                plans = {tm: reference.moe_plan(ids, w, E, tm) for tm in TILE_MS}
                fns = {tm: gpuq_gemms("plain", name, cfg, x, plans[tm], tm, wq)
                       for tm in TILE_MS}
                outs = {tm: fn() for tm, fn in fns.items()}
                errs = {tm: routed_rel_err(outs[tm], outs[8], plans[tm], plans[8])
                        for tm in TILE_MS}
                del outs
                us = interleaved_graphs_us(fns, device)
            except Exception as e:  # noqa: BLE001 (one failing case keeps the other rows)
                traceback.print_exc()
                records.append(dict(op="gpuq_tile_m_error", config=cfg_name, T=T, quant=name,
                                    error=f"{type(e).__name__}: {str(e)[:500]}"))
                continue
            floor = qbytes / bw / 1e6
            best = min(us, key=us.get)
            rec = dict(op="gpuq_tile_m", config=cfg_name, E=E, K=K, H=H, I=I, T=T, quant=name,
                       rule_tile_m=gpuq.layer_tile_m(T * K, E, scaled=True),
                       us={str(tm): round(v, 2) for tm, v in us.items()}, best_tile_m=best,
                       floor_us=round(floor, 2),
                       rel_err={str(tm): round(v, 5) for tm, v in errs.items()},
                       device=torch.cuda.get_device_name() if device == "cuda" else device)
            records.append(rec)
            print(f"{cfg_name} {name:7s} T={T:5d} rule tm={rec['rule_tile_m']:2d} | "
                  + " | ".join(f"tm={tm:2d} {us[tm]:8.1f} ({us[tm] / floor:.2f}x floor, "
                               f"err {errs[tm]:.1e})" for tm in TILE_MS)
                  + f" | best tm={best}", flush=True)
        save()
        del wq
        if device == "cuda":
            torch.cuda.empty_cache()


def main(argv=None):
    return lab_main(argv, "gpuq_tile_m.py", "gpuq_tile_m", bench_config, doc=__doc__,
                    formats=FORMATS, t_list=T_LIST,
                    failed=lambda r: max(r["rel_err"].values()) > REL_TOL)


if __name__ == "__main__":
    sys.exit(main())
