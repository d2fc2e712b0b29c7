"""Dense experts on the argon ops, one op per stage: gate/up moe_mm, swiglu, down moe_mm over the
gathered rows. Runs on every device and OpSet (the reference, the host Metal runner included):
the fallback the registry lists last for dense weights."""
from .base import Experts, ops_tile_m


class OpsDense(Experts):
    name = "ops_dense"
    path = "ops"
    kind = "dense"

    def supports(self, call):
        return ""

    def default_tile_m(self, call, n_entries):
        return ops_tile_m(call.x.device)

    def apply(self, call, x, xs, plan, workspace):
        ops, w = call.ops, call.weights
        h = ops.swiglu(ops.moe_mm(xs, w.gate_up, plan), activation=call.activation)
        return ops.moe_mm(h, w.down, plan)
