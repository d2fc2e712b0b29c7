"""Quantized experts on CUDA at small T: gpuq's grouped GEMMs (csrc/gpuq) on the GGUF bytes as
stored. Each lane decodes its weight bytes into mma.sync's operand as integer codes and each
group's scale and min are applied to the fp32 partial sums: the exact-dequant product up to
float32 rounding at tiles of up to 8 rows; from 16 rows a warp the weights are rounded to bf16
once instead (the scaled path: the Triton quantized path's numerics). The gather and
act(gate) * up are fused into the gate/up GEMM (of one format; gate and up of two formats: two
GEMMs and the swiglu op).

activation_quant: "none" (the default: "auto" means "none") or "q8", the int8 MMA on the
activations' 8-bit blocks, which takes fp32 activations too. q8 measured no faster than "none"
on the H100 (bench/quant_gpuq_notes.md), so it is a choice, not the default.

Why first among the quantized implementations: up to a few dozen rows per expert the layer
reads weights more than it computes, and this path reads the GGUF bytes once per 8-32 rows;
it beats the bf16 GEMMs on most formats at T = 128 (0.64-0.97x bf16 at E=512 on the H100) and
the Triton quantized path on all. From the rows per expert of experts/quantized_crossover.py
("none" only) it declines for the path measured faster there where that one runs the call:
cuda_quantized_mixed (the formats of 32-value groups on sm_90), else cuda_quantized_dequant.
"""
from .. import gpuq
from .base import Experts, fused_call_refusal
from .cuda_quantized_dequant import CudaQuantizedDequant
from .cuda_quantized_mixed import CudaQuantizedMixed
from .ops_quantized import float_parts
from .quantized_crossover import dequant_from_rows
from .triton_dense import HALF_DTYPES

_DEQUANT = CudaQuantizedDequant()
_MIXED = CudaQuantizedMixed()


def gpuq_call_refusal(call) -> str:
    """Why gpuq's kernels cannot run `call` (its x off CUDA, a build or GPU without them, a flow
    the fused kernels do not take), "" where they can."""
    if call.x.device.type != "cuda":
        return "the gpuq kernels run on CUDA tensors"
    return gpuq.refusal(call.x.device) or fused_call_refusal(call)


class CudaQuantized(Experts):
    name = "cuda_quantized"
    path = "triton"
    kind = "quantized"
    fuses_gather = True
    activation_quant = ("none", "q8")

    def supports(self, call):
        x = call.x
        why = gpuq_call_refusal(call)
        if why:
            return why
        floats = float_parts(call.weights)
        if floats:
            return (f"{', '.join(floats)} stored as plain floats: the gpuq GEMMs take blocks of "
                    "the quantized formats")
        q8 = call.activation_quant == "q8"
        if not q8 and x.dtype not in HALF_DTYPES:
            return "the gpuq GEMMs need fp16 / bf16 activations (or activation_quant='q8')"
        rows = call.rows_per_expert()
        if q8 or rows is None:
            return ""
        # the paths measured faster from some rows per expert on, in registry order: the first
        # that runs the call is the one the automatic choice takes instead
        for faster, start in ((_MIXED, _MIXED.auto_from_rows(call.weights)),
                              (_DEQUANT, dequant_from_rows(call.weights))):
            if (start is not None and rows >= start and not faster.supports(call)
                    and not faster.auto_refusal(call)):
                return (f"{rows:.3g} rows per expert: from {start}, {faster.name} is faster "
                        "(experts/quantized_crossover.py)")
        return ""

    def default_tile_m(self, call, n_entries):
        scaled = gpuq.scaled_tiles(call.x.dtype, self.resolved_activation_quant(call))
        return gpuq.layer_tile_m(n_entries, call.weights.n_experts, scaled=scaled)

    def apply(self, call, x, xs, plan, workspace):
        tm = plan.tile_m
        mode = self.resolved_activation_quant(call)

        def qmm(a, part, **kwargs):
            return gpuq.qmm(a, part.data, part.qtype.type_id, part.n_in, plan.tile_expert, tm,
                            meta=plan.meta, activation_quant=mode, zero_unused=False, **kwargs)

        return gated_experts(call, x, plan, qmm)


def gated_experts(call, x, plan, qmm):
    """The experts' GEMMs over the plan by `qmm`(a, part, **gpuq options) (a GEMM of the gpuq
    family on one quantized part): gate/up gathered by sorted_token with act(gate) * up fused
    (of one format; gate and up of two formats: two GEMMs and the swiglu op), then down."""
    w = call.weights
    if w.fused:
        h = qmm(x, w.gate_up, row_token=plan.sorted_token, swiglu=True,
                activation=call.activation)
    else:
        h = call.ops.swiglu(qmm(x, w.gate, row_token=plan.sorted_token),
                            qmm(x, w.up, row_token=plan.sorted_token),
                            activation=call.activation)
    return qmm(h, w.down)
