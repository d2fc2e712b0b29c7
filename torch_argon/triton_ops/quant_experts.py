"""The routed experts on the Triton path with quantized weights: plan -> fused gather + gate/up
GEMM + SwiGLU -> down GEMM -> the argon combine, each GEMM dequantizing its weight tiles in
registers (moe_qmm_kernel.py). Gate and up of one format are one byte-concatenated tensor, one
GEMM with the SwiGLU in its epilogue; of two formats, two gathered GEMMs and the swiglu op.
Other gated activations than silu (GeGLU) run the gathered gate/up GEMM and the swiglu op with
that activation (the kernel's epilogue is silu only)."""

from ..quant.formats import qformat
from .quant_blocks import device_tables
from .quant_ops import moe_gate_up_swiglu_qmm_triton_op, moe_qmm_triton_op


def _qmm(a, w, tables, plan, tile_m, sorted_token=None, swiglu=False):
    op = moe_gate_up_swiglu_qmm_triton_op if swiglu else moe_qmm_triton_op
    return op(a, w.data, qformat(w.qtype).type_id, w.n_in, tables, plan.tile_expert, plan.meta,
              tile_m, sorted_token, False)


def moe_experts_triton_quant(x, topk_ids, topk_weights, experts, *, tile_m, shared=None,
                             residual=None, ops, activation="silu", out_dtype=None):
    """Same contract as layer.moe_experts, for quantized experts.

    experts: an object with `down` and either `gate_up` (gate rows, then up rows, one format) or
    `gate` and `up` (None or absent for the other form); each a quantized weight with `.data`
    uint8 [E, N, row_bytes], `.qtype` (a QFormat, a GGUF type name or id) and `.n_in`
    (torch_argon.quant's QuantizedExperts and QuantizedWeight).
    x: fp16 / bf16 [T, H]. tile_m: a power of two (quant_configs.quant_layer_tile_m picks it).
    activation: the gate's ("silu" fused into the GEMM; others through ops.swiglu).
    Returns [T, H] in out_dtype (default x's).
    """
    down = experts.down
    plan = ops.moe_plan(topk_ids, topk_weights, down.data.shape[0], tile_m)
    tables = device_tables(x.device)
    gate_up = getattr(experts, "gate_up", None)
    if gate_up is not None and activation == "silu":
        h = _qmm(x, gate_up, tables, plan, tile_m, plan.sorted_token, swiglu=True)
    else:
        if gate_up is not None:
            gate, up = _qmm(x, gate_up, tables, plan, tile_m, plan.sorted_token), None
        else:
            gate = _qmm(x, experts.gate, tables, plan, tile_m, plan.sorted_token)
            up = _qmm(x, experts.up, tables, plan, tile_m, plan.sorted_token)
        h = (ops.swiglu(gate, up) if activation == "silu"
             else ops.swiglu(gate, up, activation=activation))
    y = _qmm(h, down, tables, plan, tile_m)
    return ops.moe_combine(y, plan, topk_weights, shared=shared, residual=residual,
                           out_dtype=out_dtype or x.dtype)
