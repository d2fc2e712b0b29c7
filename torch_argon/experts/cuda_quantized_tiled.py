"""Quantized experts on CUDA at large T by the tile-decode GEMM (csrc/gpuq/gpuq_tiled_kernel.h,
torch_argon.gpuq.tiled): a thread block owns one plan tile of 64 or 128 rows and 128 weight
rows, decodes each weight of its tile once from the GGUF bytes into shared memory and every
warp multiplies from there (ldmatrix, mma.sync). The decode is paid once per 64-128 tokens
instead of once per 8-32 (cuda_quantized), and no decoded copy of the experts is written
(cuda_quantized_dequant writes E * 3 * H * I values per call). The gather and act(gate) * up are
fused into the gate/up GEMM (of one format; gate and up of two formats: two GEMMs and the swiglu
op).

Numerics: each weight rounded once to the activations' dtype (bit for bit the dequant path's
weights), the products summed in fp32: the dequant path's tolerance (1.5e-2 relative in bf16).

Selection: path="cuda_quantized_tiled" runs it wherever it supports the call. The automatic
choice (path="auto" / "triton") takes it only from quantized_crossover.TILED_FROM_ROWS's measured
rows for the call's formats, which hold none: on an H200 (2026-12-06, Q4_K and IQ4_XS) it took
0.65-1.01x gpuq's time from 128 rows per expert but lost to the layer's choice at every point
(bench/quant_gpuq_notes.md, "The tile-decode GEMM").
"""
from ..gpuq.tiled import TILE_M, tiled_qmm
from .base import Experts
from .cuda_quantized import gated_experts, gpuq_call_refusal
from .ops_quantized import float_parts
from .quantized_crossover import TILED_MEASURED_SLOWER, below_rows, tiled_from_rows
from .triton_dense import HALF_DTYPES


class CudaQuantizedTiled(Experts):
    name = "cuda_quantized_tiled"
    path = "triton"
    kind = "quantized"
    fuses_gather = True
    activation_quant = ("none",)

    def supports(self, call):
        x = call.x
        why = gpuq_call_refusal(call)
        if why:
            return why
        if call.tile_m is not None and call.tile_m not in TILE_M:
            return f"tile_m={call.tile_m}: its GEMM takes plan tiles of 64 or 128 rows"
        floats = float_parts(call.weights)
        if floats:
            return (f"{', '.join(floats)} stored as plain floats: the tile-decode GEMM takes "
                    "blocks of the quantized formats")
        if x.dtype not in HALF_DTYPES:
            return "the tile-decode GEMM needs fp16 / bf16 activations"
        return ""

    def auto_refusal(self, call):
        start = tiled_from_rows(call.weights)
        if start is None:
            formats = sorted({w.qtype.name for w in call.weights.parts().values()})
            unmeasured = [f for f in formats if f not in TILED_MEASURED_SLOWER]
            if unmeasured:
                return (f"not yet measured on a GPU for {', '.join(unmeasured)} "
                        "(experts/quantized_crossover.py has no rows for it): "
                        "path='cuda_quantized_tiled' runs it")
            return (f"no measured win for {', '.join(formats)}: it lost to the layer's choice "
                    f"at every measured point ({TILED_MEASURED_SLOWER[formats[0]]}; "
                    "bench/quant_gpuq_notes.md): path='cuda_quantized_tiled' runs it")
        return below_rows(call, start, f"it runs from {start} (experts/quantized_crossover.py)")

    def default_tile_m(self, call, n_entries):
        rows = n_entries / max(call.weights.n_experts, 1)
        return 128 if rows >= 128 else 64

    def apply(self, call, x, xs, plan, workspace):
        def mm(a, part, **kwargs):
            return tiled_qmm(a, part.data, part.qtype.type_id, part.n_in, plan.tile_expert,
                             plan.tile_m, meta=plan.meta, zero_unused=False, **kwargs)

        return gated_experts(call, x, plan, mm)
