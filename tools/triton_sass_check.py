"""Compiles the quantized Triton kernels for an NVIDIA target without a GPU (Triton's bundled
ptxas) and prints, per kernel variant, the compile time, registers, spills, shared memory and
the SASS instruction mix per dequantized weight value: a check that every format compiles for
the H200 (sm_90) and a static proxy for the dequant's cost, for when no GPU is at hand.

    python tools/triton_sass_check.py                    # every format, the layer's variants
    python tools/triton_sass_check.py Q4_K --block-m 16 64 128 --sass /tmp/q4k.sass
    python tools/triton_sass_check.py --dequantize       # the dequantize kernel too

"per value" divides the instructions of the whole kernel (prologue and epilogue included) by
the values a thread dequantizes in one K-loop iteration, so compare variants, not absolutes.
"""
import argparse
import os
import re
import subprocess
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from torch_argon.quant import FORMATS  # noqa: E402
from torch_argon.triton_ops.dequantize_kernel import dequantize_kernel  # noqa: E402
from torch_argon.triton_ops.moe_qmm_kernel import moe_qmm_kernel  # noqa: E402
from torch_argon.triton_ops.quant_blocks import WORD_FORMATS  # noqa: E402
from torch_argon.triton_ops.quant_configs import QMMConfig, qmm_config  # noqa: E402
from torch_argon.triton_ops.quant_ops import block_layout  # noqa: E402

BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
WORDS = True  # --no-words: read the quant bytes bytewise in every format
DIVISIBLE = ("stride_am", "stride_we", "stride_wn", "stride_cm", "stride_wr", "stride_or",
             "N", "n_in")  # multiples of 16 in the benchmark shapes, as Triton specializes them


def compile_kernel(fn, signature, constexprs, num_warps, num_stages, arch, **options):
    sig = dict(signature)
    sig.update({k: "constexpr" for k in constexprs})
    names = list(sig)
    attrs = {(i,): [["tt.divisibility", 16]] for i, k in enumerate(names)
             if k.endswith("_ptr") or k in DIVISIBLE}
    src = ASTSource(fn=fn, signature=sig, attrs=attrs,
                    constexprs={(names.index(k),): v for k, v in constexprs.items()})
    t0 = time.time()
    kernel = triton.compile(src, target=GPUTarget("cuda", arch, 32),
                            options=dict(num_warps=num_warps, num_stages=num_stages, **options))
    return kernel, time.time() - t0


def qmm_variant(name, block_m, swiglu, gather, dtype="bf16", arch=90, n_in=2048, override=None):
    fmt = FORMATS[name]
    cfg = qmm_config(fmt, swiglu, block_m, 0.0)
    if override:
        cfg = QMMConfig(**{**cfg.__dict__, **override})
    block_bytes, subs, n_blocks, _ = block_layout(fmt, n_in)
    step = 1 if subs > 1 else cfg.step_blocks
    sig = {"a_ptr": f"*{dtype}", "stride_am": "i32", "stride_ak": "i32", "row_token_ptr": "*i32",
           "w_ptr": "*u8", "stride_we": "i64", "stride_wn": "i32", "tab_ptr": "*fp32",
           "c_ptr": f"*{dtype}", "stride_cm": "i32", "stride_cn": "i32",
           "tile_expert_ptr": "*i32", "meta_ptr": "*i32", "N": "i32", "n_in": "i32",
           "n_blocks": "i32", "tile_m": "i32", "n_expert": "i32", "n_a_rows": "i32",
           "n_tiles_all": "i32"}
    consts = dict(META_N_TILES=1, HAS_META=True, GATHER=gather, SWIGLU=swiglu, ZERO_UNUSED=False,
                  QTYPE=fmt.type_id, BLOCK_BYTES=block_bytes, SUBS=subs, STEP_BLOCKS=step,
                  MASK_K=False, WORDS=WORDS and name in WORD_FORMATS, ROWS=block_m, BLOCK_M=block_m,
                  BLOCK_N=cfg.block_n, DOT_PRECISION=None, SWAP_AB=cfg.swap_ab)
    kernel, secs = compile_kernel(moe_qmm_kernel, sig, consts, cfg.num_warps, cfg.num_stages, arch)
    rows = 2 * cfg.block_n if swiglu else cfg.block_n
    values_per_thread = rows * 32 * step * subs / (32 * cfg.num_warps)
    return kernel, secs, values_per_thread, cfg


def dequantize_variant(name, arch=90, n_in=2048):
    fmt = FORMATS[name]
    block_bytes, subs, n_blocks, _ = block_layout(fmt, n_in)
    step = 1 if subs > 1 else 4
    sig = {"w_ptr": "*u8", "stride_wr": "i32", "out_ptr": "*fp32", "stride_or": "i32",
           "n_rows": "i32", "n_in": "i32", "tab_ptr": "*fp32"}
    consts = dict(QTYPE=fmt.type_id, BLOCK_BYTES=block_bytes, SUBS=subs, STEP_BLOCKS=step,
                  MASK_K=False, WORDS=WORDS and name in WORD_FORMATS, BLOCK_R=64)
    kernel, secs = compile_kernel(dequantize_kernel, sig, consts, 4, 1, arch,
                                  enable_fp_fusion=False)
    return kernel, secs, 64 * 32 * step * subs / 128


def resources(kernel):
    path = "/tmp/_triton_sass_check.cubin"
    with open(path, "wb") as f:
        f.write(kernel.asm["cubin"])
    usage = subprocess.run([os.path.join(BIN, "cuobjdump"), "-res-usage", path],
                           capture_output=True, text=True).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", usage)
    sass = subprocess.run([os.path.join(BIN, "cuobjdump"), "-sass", path],
                          capture_output=True, text=True).stdout
    ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", sass)
    regs, stack = (int(m.group(1)), int(m.group(2))) if m else (None, None)
    return regs, stack, Counter(o.split(".")[0] for o in ops), sass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("formats", nargs="*", default=[n for n in FORMATS])
    ap.add_argument("--block-m", type=int, nargs="+", default=[16, 128])
    ap.add_argument("--arch", type=int, default=90)
    ap.add_argument("--dequantize", action="store_true")
    ap.add_argument("--sass", help="write the last variant's SASS here")
    ap.add_argument("--top", type=int, default=8, help="instruction kinds to show")
    ap.add_argument("--block-n", type=int, help="override the config table's block_n")
    ap.add_argument("--warps", type=int, help="override num_warps")
    ap.add_argument("--stages", type=int, help="override num_stages")
    ap.add_argument("--only", choices=("swiglu", "down"), help="one of the two GEMMs")
    ap.add_argument("--swap-ab", type=int, choices=(0, 1), help="override swap_ab")
    ap.add_argument("--no-words", action="store_true", help="no int32-word reads of quant bytes")
    args = ap.parse_args()
    global WORDS
    WORDS = not args.no_words
    override = {k: v for k, v in (("block_n", args.block_n), ("num_warps", args.warps),
                                  ("num_stages", args.stages),
                                  ("swap_ab", None if args.swap_ab is None else bool(args.swap_ab)))
                if v is not None}
    failed = []
    print(f"{'variant':42s} {'s':>5s} {'regs':>4s} {'spill':>5s} {'smem':>6s} {'ins/val':>7s}  mix")
    for name in args.formats:
        gemms = {None: (True, False), "swiglu": (True,), "down": (False,)}[args.only]
        jobs = [(f"{name} qmm bm{bm} {'swiglu+gather' if sw else 'down'}",
                 lambda bm=bm, sw=sw: qmm_variant(name, bm, sw, sw, arch=args.arch,
                                                  override=override))
                for bm in args.block_m for sw in gemms]
        if args.dequantize:
            jobs.append((f"{name} dequantize", lambda: dequantize_variant(name, args.arch)))
        for label, job in jobs:
            try:
                out = job()
            except Exception as e:  # noqa: BLE001 (report every failing variant, then fail)
                failed.append(label)
                print(f"{label:42s} FAILED: {type(e).__name__}: {str(e)[:300]}")
                continue
            kernel, secs, per_thread = out[0], out[1], out[2]
            regs, stack, mix, sass = resources(kernel)
            total = sum(mix.values())
            top = " ".join(f"{k}:{v / per_thread:.2f}" for k, v in mix.most_common(args.top))
            print(f"{label:42s} {secs:5.1f} {regs:4d} {stack:5d} {kernel.metadata.shared:6d} "
                  f"{total / per_thread:7.2f}  {top}", flush=True)
            if args.sass:
                with open(args.sass, "w") as f:
                    f.write(sass)
    if failed:
        print(f"FAILED to compile: {', '.join(failed)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
