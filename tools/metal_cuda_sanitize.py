"""Calls every Metal kernel of the metal_cuda backend once (small shapes chosen to reach each
kernel), checking the results against the reference, or one of the sanitizer's deliberately wrong
control kernels (csrc/metal/cuda/sanitizer_selftest.metal). Meant to run under compute-sanitizer
(bench/h200_metal_cuda.sh), with PYTORCH_NO_CUDA_MEMORY_CACHING=1 so every tensor is its own
allocation (memcheck sees exact bounds, initcheck sees fresh memory).

    python tools/metal_cuda_sanitize.py ops               # exit 1 on a wrong result
    python tools/metal_cuda_sanitize.py control KERNEL    # sanitizer_ok, sanitizer_race, ...
"""
import sys

import torch


def ops():
    from torch_argon.testing import backends

    be, ref = backends.get("metal_cuda"), backends.get("reference").ops
    if not be.available:
        print(f"metal_cuda: {be.reason}")
        return 2
    g = torch.Generator().manual_seed(0)
    bad = []

    def check(what, got, want, exact=True, tol=1e-2):
        got = got.cpu()
        ok = torch.equal(got, want) if exact else bool(
            ((got.float() - want.float()).abs() <= tol * (1 + want.float().abs())).all())
        print(f"  {what:48s} {'ok' if ok else 'MISMATCH'}")
        if not ok:
            bad.append(what)

    # plan: plan_hist, plan_scan, plan_place (E <= 512: 1024-entry blocks; E = 1024: 512)
    for T, K, E, tm in ((700, 4, 64, 16), (300, 8, 1024, 32)):
        ids = torch.randint(-1, E, (T, K), generator=g, dtype=torch.int32)
        w = torch.rand(T, K, generator=g)
        got = be.ops.moe_plan(ids.cuda(), w.cuda(), E, tm)
        want = ref.moe_plan(ids, w, E, tm)
        for name in ("counts", "offsets", "sorted_token", "sorted_weight", "pos", "tile_expert", "meta"):
            check(f"plan T={T} K={K} E={E} tm={tm}: {name}", getattr(got, name), getattr(want, name))
    ids = torch.randint(0, 8, (96, 2), generator=g, dtype=torch.int32)
    plan = ref.moe_plan(ids, torch.rand(96, 2, generator=g), 8, 32)
    st = plan.sorted_token
    # gather: gather_copy16 (fp16, H % 4 == 0), gather_from_f32, gather_any (H odd)
    for src, dst, H in ((torch.float16, torch.float16, 64), (torch.float32, torch.bfloat16, 64),
                        (torch.bfloat16, torch.float32, 61)):
        x = torch.randn(96, H, generator=g).to(src)
        check(f"gather {src} -> {dst} H={H}", be.ops.moe_gather(x.cuda(), st.cuda(), out_dtype=dst),
              ref.moe_gather(x, st, out_dtype=dst))
    # moe_mm: moe_mm_rows (tm < 32) and moe_mm_simd (tm >= 32)
    for tm in (16, 32):
        p = ref.moe_plan(ids, torch.rand(96, 2, generator=g), 8, tm)
        xs = torch.randn(p.sorted_token.shape[0], 48, generator=g)
        w = torch.randn(8, 40, 48, generator=g)
        check(f"moe_mm tm={tm}", be.ops.moe_mm(xs.cuda(), w.cuda(), p.tile_expert.cuda(), tm),
              ref.moe_mm(xs, w, p.tile_expert, tm), exact=False, tol=1e-4)
    # swiglu (two inputs, and one fused input), combine (with shared and residual)
    gate, up = torch.randn(50, 72, generator=g), torch.randn(50, 72, generator=g)
    check("swiglu", be.ops.swiglu(gate.cuda(), up.cuda()), ref.swiglu(gate, up), exact=False, tol=1e-5)
    fused = torch.randn(50, 144, generator=g, dtype=torch.float32).half()
    check("swiglu fused fp16 gelu", be.ops.swiglu(fused.cuda(), activation="gelu"),
          ref.swiglu(fused, activation="gelu"), exact=False, tol=2e-3)
    y = torch.randn(plan.sorted_token.shape[0], 64, generator=g)
    tw = torch.rand(96, 2, generator=g)
    shared, res = torch.randn(96, 64, generator=g), torch.randn(96, 64, generator=g)
    check("combine + shared + residual",
          be.ops.moe_combine(y.cuda(), plan.pos.cuda(), tw.cuda(), shared=shared.cuda(),
                             residual=res.cuda()),
          ref.moe_combine(y, plan.pos, tw, shared=shared, residual=res))
    # the quantized family: dequantize_<format> and moe_qmm_<format>
    from torch_argon.quant import FORMATS, random_quantized

    p = ref.moe_plan(ids, torch.rand(96, 2, generator=g), 8, 32)
    xs = torch.randn(p.sorted_token.shape[0], 256, generator=g)
    for fmt in (f for f in FORMATS.values() if not f.is_float):
        w_q = random_quantized(fmt.name, 40, 256, leading=(8,), generator=g)
        check(f"dequantize {fmt.name}", be.ops.dequantize(w_q.cuda(), fmt.name, 256),
              ref.dequantize(w_q, fmt.name, 256))
        check(f"moe_qmm {fmt.name}", be.ops.moe_qmm(xs.cuda(), w_q.cuda(), fmt.name, 256,
                                                    p.tile_expert.cuda(), 32),
              ref.moe_qmm(xs, w_q, fmt.name, 256, p.tile_expert, 32), exact=False, tol=2e-2)
    # the negative control: right, so clean under every tool. Its input is copied from the host:
    # initcheck, filtered to our kernels, does not see torch's kernels write memory.
    out = torch.zeros(256, dtype=torch.int32, device="cuda")
    torch.ops.argon_metal_cuda.sanitizer_selftest("sanitizer_ok", out,
                                                  torch.arange(256, dtype=torch.int32).cuda(), 256)
    check("sanitizer_ok", out, (torch.arange(256, dtype=torch.int32) + 1) % 256 + 1)
    torch.cuda.synchronize()
    print(f"metal_cuda ops: {'all results match' if not bad else f'{len(bad)} MISMATCHES'}")
    return 1 if bad else 0


def control(kernel):
    import torch_argon  # noqa: F401  (registers argon_metal_cuda)

    n = 256
    # the uninitialised-read control reads fresh, never written memory
    inp = (torch.empty(n, dtype=torch.int32, device="cuda") if kernel == "sanitizer_uninitialised_read"
           else torch.arange(n, dtype=torch.int32).cuda())
    # out last: memcheck knows allocations, not which one a pointer came from, so a write past
    # out must not land in inp (the script also pads every allocation where it can)
    out = torch.zeros(n, dtype=torch.int32, device="cuda")
    torch.ops.argon_metal_cuda.sanitizer_selftest(kernel, out, inp, n)
    torch.cuda.synchronize()
    print(f"control {kernel}: ran")
    return 0


def main(argv):
    if argv[:1] == ["ops"]:
        return ops()
    if argv[:1] == ["control"] and len(argv) == 2:
        return control(argv[1])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
