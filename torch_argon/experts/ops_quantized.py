"""Quantized experts on the argon ops, one op per stage: moe_qmm for gate/up (one over the
concatenated rows when gate and up share a format, else one each), swiglu, moe_qmm for down, over
the gathered rows, the weights dequantized a tile at a time inside each kernel. Runs on every
device and OpSet; its kernels take blocks of the quantized formats only."""
from .base import Experts, ops_tile_m


def float_parts(weights) -> list:
    """Names of the parts of quantized experts stored as a plain float type (F32, F16, BF16)."""
    return [name for name, w in weights.parts().items() if w.qtype.is_float]


class OpsQuantized(Experts):
    name = "ops_quantized"
    path = "ops"
    kind = "quantized"

    def supports(self, call):
        floats = float_parts(call.weights)
        if floats:
            return (f"{', '.join(floats)} stored as plain floats: the quantized ops take blocks "
                    "of the quantized formats (experts whose parts are all F32 / F16 / BF16 "
                    "run as DenseExperts: torch_argon.quant.build_experts)")
        return ""

    def default_tile_m(self, call, n_entries):
        return ops_tile_m(call.x.device)

    def apply(self, call, x, xs, plan, workspace):
        ops, w = call.ops, call.weights

        def qmm(a, part):
            return ops.moe_qmm(a, part.data, part.qtype, part.n_in, plan)

        if w.fused:
            h = ops.swiglu(qmm(xs, w.gate_up), activation=call.activation)
        else:
            h = ops.swiglu(qmm(xs, w.gate), qmm(xs, w.up), activation=call.activation)
        return qmm(h, w.down)
