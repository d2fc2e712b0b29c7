"""One small call of every op (functional and _out forms) of a backend's library, for the tests
that run each op the same way: opcheck (test_opcheck.py), the Autograd-key kernels
(test_autograd_key.py)."""
import torch

from routing_cases import make_ids, make_weights
from torch_argon.ops import OP_NAMES as OPS  # noqa: F401 (the ops, in one list)
from torch_argon.quant import FORMATS, random_quantized

T, K, E, TM, H = 24, 3, 6, 8, 16
Q8_0, KQ = FORMATS["Q8_0"].type_id, 64  # the quantized ops' format and input width


def op_cases(backend):
    d = backend.device
    ns = backend.ops.ns
    ids, w = make_ids(T, K, E, "neg_some").to(d), make_weights(T, K).to(d)
    plan = backend.ops.moe_plan(ids, w, E, TM)
    R = plan.sorted_token.shape[0]
    x = torch.randn(T, H, device=d, dtype=torch.bfloat16)
    y = torch.randn(R, H, device=d, dtype=torch.bfloat16)
    W = torch.randn(E, 2 * H, H, device=d, dtype=torch.bfloat16)
    g = torch.randn(R, 2 * H, device=d, dtype=torch.bfloat16)
    empty = lambda *s, dt=torch.int32: torch.empty(*s, dtype=dt, device=d)  # noqa: E731
    plan_outs = [torch.empty_like(t) for t in plan.tensors()]
    w_q = random_quantized("Q8_0", H, KQ, leading=(E,), generator=torch.Generator().manual_seed(0),
                           device=d)
    xq = torch.randn(R, KQ, device=d, dtype=torch.bfloat16)
    dy = torch.randn(R, H, device=d, dtype=torch.float32)  # swiglu's output gradient
    dmm = torch.randn(R, 2 * H, device=d, dtype=torch.bfloat16)  # moe_mm's output gradient
    return {
        "moe_plan": (ns.moe_plan, (ids, w, E, TM)),
        "moe_plan_out": (ns.moe_plan_out, (ids, w, E, TM, *plan_outs)),
        "moe_gather": (ns.moe_gather, (x, plan.sorted_token, torch.float16)),
        "moe_gather_out": (ns.moe_gather_out, (x, plan.sorted_token, empty(R, H, dt=x.dtype))),
        "moe_combine": (ns.moe_combine, (y, plan.pos, w, x, None, None)),
        "moe_combine_out": (ns.moe_combine_out, (y, plan.pos, w, None, x, empty(T, H, dt=y.dtype))),
        "swiglu": (ns.swiglu, (g, None, None, "gelu_tanh")),
        "swiglu_out": (ns.swiglu_out, (g[:, :H], g[:, H:], "gelu", empty(R, H, dt=g.dtype))),
        "swiglu_backward": (ns.swiglu_backward, (dy, g, None, "silu")),
        "swiglu_backward_out": (ns.swiglu_backward_out, (dy, g[:, :H], g[:, H:], "gelu_tanh",
                                                         empty(R, 2 * H, dt=g.dtype))),
        "moe_mm_weight_grad": (ns.moe_mm_weight_grad, (y, dmm, plan.tile_expert, TM, E)),
        "moe_mm_weight_grad_out": (ns.moe_mm_weight_grad_out,
                                   (y, dmm, plan.tile_expert, TM, E, empty(E, 2 * H, H, dt=y.dtype))),
        "moe_mm": (ns.moe_mm, (y, W, plan.tile_expert, TM)),
        "moe_mm_out": (ns.moe_mm_out, (y, W, plan.tile_expert, TM, empty(R, 2 * H, dt=y.dtype))),
        "dequantize": (ns.dequantize, (w_q, Q8_0, KQ)),
        "dequantize_out": (ns.dequantize_out, (w_q, Q8_0, KQ, empty(E, H, KQ, dt=torch.float32))),
        "moe_qmm": (ns.moe_qmm, (xq, w_q, Q8_0, KQ, plan.tile_expert, TM)),
        "moe_qmm_out": (ns.moe_qmm_out, (xq, w_q, Q8_0, KQ, plan.tile_expert, TM, "none",
                                         empty(R, H, dt=xq.dtype))),
    }


def written_args(op):
    """The positions and names of the arguments op writes (Tensor(a!) in its schema)."""
    schema = getattr(op, "default", op)._schema
    return [(i, a.name) for i, a in enumerate(schema.arguments)
            if a.alias_info is not None and a.alias_info.is_write]
