"""Quantized experts on CUDA through the Triton grouped GEMM that dequantizes its weight tiles in
registers (torch_argon/triton_ops/moe_qmm_kernel.py), with the gather fused in. Gate and up of
one format are one byte-concatenated tensor: one GEMM with the SwiGLU in its epilogue. Of two
formats, two gathered GEMMs and the swiglu op; so too for other activations than silu (the
kernel's epilogue is silu only). Block shapes and tile_m: triton_ops/quant_configs.py."""
from .. import triton_ops
from .base import Experts
from .triton_dense import HALF_DTYPES, triton_refusal


class TritonQuantized(Experts):
    name = "triton_quantized"
    path = "triton"
    kind = "quantized"
    fuses_gather = True

    def supports(self, call):
        return triton_refusal(call) or self.dtype_refusal(call)

    @staticmethod
    def dtype_refusal(call):
        if call.x.dtype not in HALF_DTYPES:
            return "the quantized Triton GEMMs need fp16 / bf16 activations"
        return ""

    def default_tile_m(self, call, n_entries):
        return triton_ops.quant_layer_tile_m(n_entries, call.weights.n_experts)

    def apply(self, call, x, xs, plan, workspace):
        w, ops = call.weights, call.ops
        tables = triton_ops.quant_tables(x.device)

        def qmm(a, part, sorted_token=None, swiglu=False):
            op = (triton_ops.moe_gate_up_swiglu_qmm_triton_op if swiglu
                  else triton_ops.moe_qmm_triton_op)
            return op(a, part.data, part.qtype.type_id, part.n_in, tables, plan.tile_expert,
                      plan.meta, plan.tile_m, sorted_token, False)

        if w.fused and call.activation == "silu":
            h = qmm(x, w.gate_up, plan.sorted_token, swiglu=True)
        else:
            if w.fused:
                gate, up = qmm(x, w.gate_up, plan.sorted_token), None
            else:
                gate, up = qmm(x, w.gate, plan.sorted_token), qmm(x, w.up, plan.sorted_token)
            h = ops.swiglu(gate, up, activation=call.activation)
        return qmm(h, w.down)
