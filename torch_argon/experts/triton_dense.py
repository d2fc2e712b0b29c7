"""Dense experts on CUDA through the Triton grouped GEMMs (torch_argon/triton_ops): the gather
and the SwiGLU fused into the gate/up GEMM, then the down GEMM; two launches instead of gather,
gate/up moe_mm, swiglu and down moe_mm, and neither the gathered copy of x nor the [R, 2I]
gate/up intermediate is ever written. Block shapes come from triton_ops/configs.py (a measured
table per GPU and shape, else the default rules); so does tile_m."""
import torch

from .. import triton_ops
from .base import Experts, fused_call_refusal

HALF_DTYPES = (torch.float16, torch.bfloat16)


def triton_refusal(call) -> str:
    """What the Triton implementations need besides their weights: CUDA tensors with Triton
    importable, the argon op library (another OpSet means the caller wants its own ops), and a
    tile_m that is None or a power of two >= 16 (the kernels' smallest M tile)."""
    return triton_ops.refusal(call.x.device) or fused_call_refusal(call, min_tile_m=16)


class TritonDense(Experts):
    name = "triton_dense"
    path = "triton"
    kind = "dense"
    fuses_gather = True

    def supports(self, call):
        return triton_refusal(call) or self.dtype_refusal(call)

    @staticmethod
    def dtype_refusal(call):
        w, dtype = call.weights, call.x.dtype
        if dtype not in HALF_DTYPES or not w.gate_up.dtype == w.down.dtype == dtype:
            return "the Triton GEMMs need x and both weight stacks in the same fp16 / bf16 dtype"
        return ""

    def default_tile_m(self, call, n_entries):
        """The measured table's choice for this GPU, dtype and expert shape, nearest in load;
        else the default rule (configs.layer_tile_m)."""
        w, x = call.weights, call.x
        return triton_ops.layer_tile_m(n_entries, w.n_experts, hidden=w.hidden, inter=w.inter,
                                       dtype=x.dtype, device_name=triton_ops.device_name(x.device))

    def apply(self, call, x, xs, plan, workspace):
        w, tm = call.weights, plan.tile_m
        h = triton_ops.moe_gate_up_swiglu_triton(x, w.gate_up, plan.tile_expert, plan.meta, tm,
                                                 plan.sorted_token, zero_unused=False,
                                                 activation=call.activation)
        return triton_ops.moe_mm_triton(h, w.down, plan.tile_expert, plan.meta, tm,
                                        zero_unused=False,
                                        row_token=plan.sorted_token)  # padding rows may be skipped
