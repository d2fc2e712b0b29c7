"""Compiles the dense grouped GEMM kernels (triton_ops/moe_mm_kernel.py and
moe_mm_tma_kernel.py) for the H200 (sm_90) without a GPU, through Triton's bundled ptxas, and
prints per candidate config: compile seconds, shared memory, registers and spills, and whether
the SASS holds the Hopper instructions the kernel is meant to use (HGMMA: wgmma; UTMALDG: TMA
tile loads; LDGSTS: cp.async pointer loads). A check that every candidate of
bench/h200_gemm_sweep.py compiles and fits before the one H200 run, and a look at what each
compiles to; not a measurement.

    python tools/triton_gemm_sm90_check.py                      # every sweep candidate
    python tools/triton_gemm_sm90_check.py --only "gate_up bm128" --sass /tmp/gemm_sass
"""
import argparse
import importlib.util
import os
import re
import subprocess
import sys
import time
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
SMEM_LIMIT = 232448  # bytes of shared memory one block may use on sm_90 (227 KB)
# Integers that are multiples of 16 in the sweep's shapes (Triton specializes them so) and
# those that are 1 (unit strides: Triton makes them constants).
DIVISIBLE = ("stride_am", "stride_we", "stride_wn", "stride_cm", "N", "Kd", "tile_m",
             "n_expert", "n_a_rows", "n_rows")
ONE = ("stride_ak", "stride_cn")


def sweep_module():
    spec = importlib.util.spec_from_file_location(
        "h200_gemm_sweep", os.path.join(ROOT, "bench", "h200_gemm_sweep.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def compile_candidate(kind, block_m, cfg, arch=90, dtype="bf16", kd=None):
    from torch_argon.triton_ops.moe_mm_kernel import moe_mm_kernel
    from torch_argon.triton_ops.moe_mm_tma_kernel import moe_mm_tma_kernel
    from torch_argon.triton_ops.ops import triton_next_pow2
    swiglu, gather = kind == "gate_up", kind == "gate_up"
    kd = kd or (2048 if kind == "gate_up" else 512)
    block_k = min(cfg.block_k, max(16, triton_next_pow2(kd)))
    consts = dict(META_N_TILES=1, GATHER=gather, SWIGLU=swiglu, ZERO_UNUSED=False, ACTIVATION=0,
                  EVEN_K=kd % block_k == 0, BLOCK_M=block_m, BLOCK_N=cfg.block_n,
                  BLOCK_K=block_k)
    if cfg.kernel == "classic":
        fn = moe_mm_kernel
        sig = {"a_ptr": f"*{dtype}", "stride_am": "i32", "stride_ak": "i32",
               "row_token_ptr": "*i32", "w_ptr": f"*{dtype}", "stride_we": "i32",
               "stride_wn": "i32", "stride_wk": "i32", "c_ptr": f"*{dtype}", "stride_cm": "i32",
               "stride_cn": "i32", "tile_expert_ptr": "*i32", "meta_ptr": "*i32", "N": "i32",
               "Kd": "i32", "tile_m": "i32", "n_expert": "i32", "n_a_rows": "i32"}
        ones = ONE + ("stride_wk",)
    else:
        fn = moe_mm_tma_kernel
        sig = {"a_ptr": f"*{dtype}", "stride_am": "i32", "stride_ak": "i32",
               "row_token_ptr": "*i32", "w_ptr": f"*{dtype}", "stride_we": "i32",
               "stride_wn": "i32", "c_ptr": f"*{dtype}", "stride_cm": "i32", "stride_cn": "i32",
               "tile_expert_ptr": "*i32", "meta_ptr": "*i32", "N": "i32", "Kd": "i32",
               "tile_m": "i32", "n_expert": "i32", "n_a_rows": "i32", "n_rows": "i32"}
        consts.update(A_TMA=not gather, C_TMA=cfg.tma_store, SKIP_PADDING=cfg.skip_padding,
                      PERSISTENT=bool(cfg.persistent), NUM_PROGRAMS=132 * max(cfg.persistent, 1))
        ones = ONE
    for k in ones:
        sig[k] = "constexpr"
        consts[k] = 1
    sig.update({k: "constexpr" for k in consts if k not in sig})
    names = list(fn.arg_names)  # indices below are the kernel's parameter positions
    assert set(names) == set(sig), set(names) ^ set(sig)
    sig = {k: sig[k] for k in names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, k in enumerate(names)
             if k.endswith("_ptr") or k in DIVISIBLE}
    src = ASTSource(fn=fn, signature=sig, attrs=attrs,
                    constexprs={(names.index(k),): v for k, v in consts.items()})
    t0 = time.time()
    kernel = triton.compile(src, target=GPUTarget("cuda", arch, 32),
                            options=dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages))
    return kernel, time.time() - t0


def blocks_per_sm(smem, regs, num_warps):
    """Blocks one sm_90 SM holds at once: 228 KB of shared memory (1 KB of it reserved per
    block), 64 K registers (allocated per warp in units of 256), 64 warps."""
    by_smem = 233472 // (smem + 1024)
    by_regs = 65536 // (num_warps * 32 * ((regs + 7) // 8 * 8))
    return max(0, min(by_smem, by_regs, 64 // num_warps, 32))


def sass_of(kernel, path):
    with open(path + ".cubin", "wb") as f:
        f.write(kernel.asm["cubin"])
    sass = subprocess.run([os.path.join(BIN, "cuobjdump"), "-sass", path + ".cubin"],
                          capture_output=True, text=True).stdout
    with open(path + ".sass", "w") as f:
        f.write(sass)
    res = subprocess.run([os.path.join(BIN, "cuobjdump"), "-res-usage", path + ".cubin"],
                         capture_output=True, text=True).stdout
    return sass, res


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", default="", help="candidates whose id contains this")
    p.add_argument("--sass", default="/tmp/gemm_sm90", help="folder for cubin / SASS files")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    args = p.parse_args()
    sweep = sweep_module()
    configs = sweep._import_configs()
    os.makedirs(args.sass, exist_ok=True)
    print(f"{'candidate':<46} {'s':>5} {'smem KB':>8} {'regs':>5} {'spill':>6} {'/SM':>4}  SASS")
    bad = 0
    for jid, kind, bm, cfg in sweep.all_jobs(configs):
        if args.only not in jid:
            continue
        try:
            kernel, secs = compile_candidate(kind, bm, cfg, dtype=args.dtype)
        except Exception as e:
            bad += 1
            print(f"{jid:<46} FAILED {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            continue
        sass, res = sass_of(kernel, os.path.join(args.sass, re.sub(r"\W+", "_", jid)))
        ops = Counter(m.group(1).split(".")[0] for m in
                      re.finditer(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", sass))
        regs = re.search(r"REG:(\d+)", res)
        spill = re.search(r"STACK:(\d+)", res)
        smem = kernel.metadata.shared
        n_regs = int(regs.group(1)) if regs else 255
        per_sm = blocks_per_sm(smem, n_regs, cfg.num_warps)
        flag = ("  OVER THE SHARED-MEMORY LIMIT" if smem > SMEM_LIMIT else
                f"  PERSISTENT p{cfg.persistent} > {per_sm} BLOCKS PER SM"
                if cfg.persistent > per_sm else "")
        bad += bool(flag)
        keys = ("HGMMA", "HMMA", "UTMALDG", "UTMASTG", "LDGSTS", "LDG")
        print(f"{jid:<46} {secs:5.1f} {smem / 1024:8.1f} {n_regs:>5} "
              f"{spill.group(1) if spill else '?':>6} {per_sm:>4}  " +
              " ".join(f"{k}:{ops[k]}" for k in keys if ops[k]) + flag, flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
