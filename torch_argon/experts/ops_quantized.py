"""Quantized experts on the argon ops, one op per stage: moe_qmm for gate/up (one over the
concatenated rows when gate and up share a format, else one each), swiglu, moe_qmm for down, over
the gathered rows, the weights dequantized a tile at a time inside each kernel. Runs on every
device and OpSet; its kernels take blocks of the quantized formats only.

activation_quant: "none" everywhere; "q8" (integer dot products on 8-bit activation blocks) where
the op has q8 kernels: the CPU, and CUDA where the gpuq kernels run. Its default ("auto") is
"q8" where the CPU kernels run on AVX-512 VNNI, which took 2.3-2.9x less time than "none" per GEMM on every format at 5e-3 relative
error (bench/cpu_isa_notes.md), and "none" elsewhere (on AVX2 q8 gained 1.1-1.4x against a
baseline measured with AVX-512 sgemm, and the portable kernels are slower than "none")."""
import torch

from .. import gpuq
from .base import Experts, ops_tile_m, runs_argon_library

# The CPU kernel variants (torch.ops.argon_cpu.isa()) on which "auto" means "q8".
Q8_BY_DEFAULT_ON = ("avx512",)


def float_parts(weights) -> list:
    """Names of the parts of quantized experts stored as a plain float type (F32, F16, BF16)."""
    return [name for name, w in weights.parts().items() if w.qtype.is_float]


def default_activation_quant(call) -> str:
    """"q8" where the argon library's CPU kernels run q8 on integer dot-product units, else
    "none" (see the module docstring)."""
    if call.x.device.type == "cpu" and runs_argon_library(call.ops):
        return "q8" if torch.ops.argon_cpu.isa() in Q8_BY_DEFAULT_ON else "none"
    return "none"


class OpsQuantized(Experts):
    name = "ops_quantized"
    path = "ops"
    kind = "quantized"
    activation_quant = ("none", "q8")

    def supports(self, call):
        floats = float_parts(call.weights)
        if floats:
            return (f"{', '.join(floats)} stored as plain floats: the quantized ops take blocks "
                    "of the quantized formats (experts whose parts are all F32 / F16 / BF16 "
                    "run as DenseExperts: torch_argon.quant.build_experts)")
        device = call.x.device
        if call.activation_quant == "q8" and device.type != "cpu" and (
                device.type != "cuda" or gpuq.refusal(device)):
            return (f"activation_quant='q8': moe_qmm has q8 kernels on the CPU and on CUDA "
                    f"(the gpuq kernels), these activations are on {device.type}")
        return ""

    def resolved_activation_quant(self, call):
        if call.activation_quant == "auto":
            return default_activation_quant(call)
        return call.activation_quant

    def default_tile_m(self, call, n_entries):
        return ops_tile_m(call.x.device)

    def apply(self, call, x, xs, plan, workspace):
        ops, w = call.ops, call.weights
        mode = self.resolved_activation_quant(call)

        def qmm(a, part):
            return ops.moe_qmm(a, part.data, part.qtype, part.n_in, plan, activation_quant=mode)

        if w.fused:
            h = ops.swiglu(qmm(xs, w.gate_up), activation=call.activation)
        else:
            h = ops.swiglu(qmm(xs, w.gate), qmm(xs, w.up), activation=call.activation)
        return qmm(h, w.down)
