"""Compiles the vLLM baseline's Triton kernels for the H100/H200 (sm_90) without a GPU, through
Triton's bundled ptxas: vLLM's fused_moe_kernel at every config it would pick for the benchmark's
shapes (the staged tuned files for both devices and vLLM's default rule, gate/up and down GEMM,
bf16), and the glue kernels of vllm_glue.py. A check, before the one device call, that this
Triton compiles vLLM's kernel file and every config fits in shared memory; not a measurement.

    python bench/baselines/vllm_sm90_check.py             # prints one line per kernel
    python bench/baselines/vllm_sm90_check.py --quick     # one config per GEMM and the glue

Exit status 1 if anything failed to compile or is over the shared-memory limit.
"""
import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from bench.baselines import vllm_fused_moe, vllm_glue  # noqa: E402

SMEM_LIMIT = 232448  # bytes of shared memory one block may use on sm_90 (227 KB)
# (E, top_k, H, I) of the benchmark, and the device names whose tuned files it may read
SHAPES = ((512, 10, 2048, 512), (128, 8, 2048, 768))
DEVICES = ("NVIDIA H100 80GB HBM3", "NVIDIA H200")
T_LIST = (128, 512, 2048, 8192, 16384)


def compile_fn(fn, signature, constexprs, divisible, num_warps, num_stages, arch=90):
    """triton.compile of fn for sm_<arch>: signature {arg: type} (constexprs take their value),
    the pointers and the `divisible` integers marked multiples of 16 as Triton would."""
    names = list(fn.arg_names)
    sig = {k: ("constexpr" if k in constexprs else signature[k]) for k in names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, k in enumerate(names)
             if sig[k].startswith("*") or k in divisible}
    src = ASTSource(fn=fn, signature=sig, attrs=attrs,
                    constexprs={(names.index(k),): v for k, v in constexprs.items()})
    return triton.compile(src, target=GPUTarget("cuda", arch, 32),
                          options=dict(num_warps=num_warps, num_stages=num_stages))


def fused_moe_kernel_args(config, top_k, mul_routed_weight):
    """(signature, constexprs) of vLLM's launch of fused_moe_kernel for bf16 weights without
    quantization or bias (invoke_fused_moe_triton_kernel): unit strides and None pointers are
    constants, as Triton specializes them."""
    ptr = {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*bf16", "topk_weights_ptr": "*fp32",
           "sorted_token_ids_ptr": "*i32", "expert_ids_ptr": "*i32",
           "num_tokens_post_padded_ptr": "*i32"}
    ints = ("N", "K", "EM", "num_valid_tokens", "stride_am", "stride_be", "stride_bn",
            "stride_cm")
    signature = dict(ptr, **{k: "i32" for k in ints})
    constexprs = dict(
        b_bias_ptr=None, a_scale_ptr=None, b_scale_ptr=None, stride_ak=1, stride_bk=1,
        stride_cn=1, stride_asm=0, stride_ask=0, stride_bse=0, stride_bsk=0, stride_bsn=0,
        stride_bbe=0, stride_bbn=0, group_n=0, group_k=0, naive_block_assignment=False,
        MUL_ROUTED_WEIGHT=mul_routed_weight, top_k=top_k, compute_type=triton.language.bfloat16,
        use_fp8_w8a8=False, use_int8_w8a8=False, use_int8_w8a16=False, per_channel_quant=False,
        HAS_BIAS=False, SWAP_AB=False, USE_TD=False, SPLIT_K=1,
        **{k: config[k] for k in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K",
                                  "GROUP_SIZE_M")})
    return signature, constexprs


def vllm_configs(quick):
    """{(config as a tuple of items): where it is used} over the shapes, devices and T."""
    import torch
    seen = {}
    for E, K, H, I in SHAPES:
        w1 = torch.empty(E, 2 * I, H, device="meta")
        w2 = torch.empty(E, H, I, device="meta")
        for device in DEVICES:
            os.environ["ARGON_VLLM_DEVICE_NAME"] = device
            for T in T_LIST:
                config, source = vllm_fused_moe.chosen_config(w1, w2, K, torch.bfloat16, T)
                key = tuple(sorted(config.items()))
                seen.setdefault(key, []).append(f"E={E} T={T} {device.split()[1]} ({source})")
            vllm_fused_moe.kernel_module().get_moe_configs.cache_clear()
    os.environ.pop("ARGON_VLLM_DEVICE_NAME", None)
    items = list(seen.items())
    return dict(items[:1] if quick else items)


def check_vllm(quick, report):
    fm = vllm_fused_moe.kernel_module()
    for key, uses in vllm_configs(quick).items():
        config = dict(key)
        for gemm, mul, top_k in (("gate_up", False, 10), ("down", True, 1)):
            sig, consts = fused_moe_kernel_args(config, top_k, mul)
            label = (f"fused_moe_kernel {gemm} BM{config['BLOCK_SIZE_M']} "
                     f"BN{config['BLOCK_SIZE_N']} BK{config['BLOCK_SIZE_K']} "
                     f"G{config['GROUP_SIZE_M']} w{config['num_warps']} s{config['num_stages']}")
            report(label, lambda: compile_fn(
                fm.fused_moe_kernel, sig, consts, ("N", "K", "stride_am", "stride_be",
                                                   "stride_bn", "stride_cm"),
                config["num_warps"], config["num_stages"]), "; ".join(uses[:2])
                + (f" (+{len(uses) - 2})" if len(uses) > 2 else ""))


def check_glue(report):
    i32 = "*i32"
    report("glue _count_kernel", lambda: compile_fn(
        vllm_glue._count_kernel, {"ids_ptr": i32, "counts_ptr": i32, "n": "i32",
                                  "n_expert": "i32"}, {"BLOCK": 1024}, (), 4, 3))
    report("glue _runs_kernel", lambda: compile_fn(
        vllm_glue._runs_kernel, {"counts_ptr": i32, "starts_ptr": i32, "sorted_ids_ptr": i32,
                                 "expert_ids_ptr": i32, "total_ptr": i32, "n": "i32",
                                 "n_expert": "i32", "block_size": "i32"},
        {"E_POW2": 512, "PAD": 64, "FILL": 256}, (), 4, 3))
    report("glue _place_kernel", lambda: compile_fn(
        vllm_glue._place_kernel, {"ids_ptr": i32, "starts_ptr": i32, "cursor_ptr": i32,
                                  "sorted_ids_ptr": i32, "n": "i32", "n_expert": "i32"},
        {"BLOCK": 1024}, (), 4, 3))
    for act in range(len(vllm_glue.ACTIVATIONS)):
        report(f"glue _act_and_mul_kernel {vllm_glue.ACTIVATIONS[act]}", lambda act=act:
               compile_fn(vllm_glue._act_and_mul_kernel,
                          {"in_ptr": "*bf16", "out_ptr": "*bf16", "d": "i32",
                           "stride_in": "i32", "stride_out": "i32"},
                          {"ACT": act, "BLOCK": 512}, ("d", "stride_in", "stride_out"), 4, 3))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    os.environ.pop("TRITON_INTERPRET", None)
    why = vllm_fused_moe.staging_problem()
    if why:
        sys.exit(f"vllm_sm90_check: {why}")
    failed = []

    def report(label, build, uses=""):
        t0 = time.time()
        try:
            kernel = build()
        except Exception as e:  # noqa: BLE001 (reported; the others still compile)
            failed.append(label)
            print(f"{label:<58} FAILED {type(e).__name__}: {str(e).splitlines()[0][:200]}",
                  flush=True)
            return
        smem = kernel.metadata.shared
        over = smem > SMEM_LIMIT
        if over:
            failed.append(label)
        print(f"{label:<58} {time.time() - t0:5.1f} s  smem {smem / 1024:6.1f} KB"
              f"{'  OVER THE LIMIT' if over else ''}  {uses}", flush=True)

    check_glue(report)
    check_vllm(args.quick, report)
    print(f"vllm_sm90_check: {len(failed)} failed" + (f": {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
