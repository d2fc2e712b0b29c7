"""Dense experts on Hopper GPUs (compute capability 9.0) through CUTLASS 3's warp-specialized
grouped GEMM (csrc/hopper; torch_argon/hopper): a TMA producer warp feeding consumer warpgroups
that issue wgmma, one persistent CTA per multiprocessor walking every expert's tiles. Per call:
the flow's gather (xs), the gate/up grouped GEMM into [R, 2I], the activation op (argon's
swiglu: act(gate) * up, rounded once), the down grouped GEMM into y [R, H], then the flow's
combine. The GEMMs read each expert's rows from the plan's offsets and counts on the device (no
host sync: CUDA graphs capture the call), so the plan's padding rows are neither computed nor
written.

Why it sits first, and why "auto" still passes it by: it is meant to run the dense experts at
large T where the Triton kernels (triton_dense, its fallback here and on every other GPU) stay
far from the tensor cores' rate; the layer's automatic choice takes it only for a GPU and dtype
whose tuned table (hopper/configs.py MEASURED) has rows, and on the GPUs measured so far (an
H200 and an H100, bf16, 2026-12-06) it was slower than triton_dense at every point measured
(1.12-1.26x and 1.03-1.16x; bench/hopper_gemm_notes.md), so the table has none and "auto"
declines it ("no measured win"; elsewhere "not yet measured on a GPU").
path="cuda_hopper_dense" runs it wherever it can run.
"""
import torch

from .. import hopper, triton_ops
from .base import Experts, fused_call_refusal
from .triton_dense import HALF_DTYPES

NOT_MEASURED = ("not yet measured on a GPU: the {what}'s tuned table "
                "(torch_argon/hopper/configs.py {table}) has no entry for {gpu} {dtype}; "
                "path='{name}' runs it")
NO_WIN = ("no measured win: on {gpu} {dtype} the path measured slower than triton_dense "
          "({run}; bench/hopper_gemm_notes.md); path='{name}' runs it")
NO_WIN_HERE = ("no measured win at {rows} rows per expert: on {gpu} {dtype} {why} ({run}; "
               "bench/hopper_gemm_notes.md); path='{name}' runs it")


class CudaHopperDense(Experts):
    name = "cuda_hopper_dense"
    path = "triton"
    kind = "dense"
    fuses_gather = False

    def supports(self, call):
        x, w = call.x, call.weights
        why = hopper.refusal(x.device) or fused_call_refusal(call)
        if why:
            return why
        if x.dtype not in HALF_DTYPES or not w.gate_up.dtype == w.down.dtype == x.dtype:
            return "the Hopper GEMM needs x and both weight stacks in the same fp16 / bf16 dtype"
        if not (w.gate_up.is_contiguous() and w.down.is_contiguous()):
            return ("the Hopper GEMM reads [E, N, K]-contiguous weight stacks; these are "
                    "strided views (a transposed checkpoint layout), which it would copy on "
                    "every call")
        if w.hidden % 8 or w.inter % 8:
            return (f"H={w.hidden} and I={w.inter} must be multiples of 8 (the GEMM's 16-byte "
                    "TMA rows)")
        return ""

    # The tuned table "auto" needs, and the runs that measured this path slower (the subclass
    # for the padded GEMM names its own)
    kernel = "Hopper grouped GEMM"
    table_name = "MEASURED"
    table = hopper.configs.MEASURED
    measured_slower = hopper.configs.MEASURED_SLOWER

    def auto_refusal(self, call):
        gpu, dtype = device_name(call.x.device), dtype_name(call.x.dtype)
        run = self.measured_slower.get((gpu, dtype))
        if self.table.get((gpu, dtype)):
            rows = call.rows_per_expert()
            why = hopper.configs.auto_decline(self.table, rows, gpu, dtype)
            if not why:
                return ""
            shown = "unknown (no n_entries)" if rows is None else f"{rows:g}"
            return NO_WIN_HERE.format(rows=shown, gpu=gpu, dtype=dtype, why=why,
                                      run=run or self.table_name, name=self.name)
        if run:
            return NO_WIN.format(gpu=gpu, dtype=dtype, run=run, name=self.name)
        return NOT_MEASURED.format(what=self.kernel, table=self.table_name, gpu=gpu,
                                   dtype=dtype, name=self.name)

    def default_tile_m(self, call, n_entries):
        """1: the GEMMs read counts[e] rows per expert whatever the plan's tile, so a larger
        tile_m would only add padding rows that the gather writes and the activation op runs
        over (E * (tile_m - 1) of them: at T=128, E=512, K=10 and tile_m 16, 7680 beside the
        1280 routed rows). Any row offset keeps TMA's 16-byte alignment, H and I being
        multiples of 8."""
        return 1

    def apply(self, call, x, xs, plan, workspace):
        w = call.weights
        rows = plan.pos.numel() / max(w.n_experts, 1)  # mean entries per expert, from shapes
        gate_up, down = self.choose_configs(rows, device_name(x.device), dtype_name(x.dtype))
        h = self.gate_up_act(call, xs, plan, gate_up)
        y = xs.new_empty((xs.shape[0], w.hidden))
        return self.gemm(h, w.down, plan, down, y)

    def gate_up_act(self, call, xs, plan, config):
        """h [R, I]: the gate/up GEMM into gu [R, 2I], then the activation op (argon's swiglu:
        act(gate) * up in fp32, rounded once)."""
        gu = xs.new_empty((xs.shape[0], 2 * call.weights.inter))
        self.gemm(xs, call.weights.gate_up, plan, config, gu)
        return call.ops.swiglu(gu, activation=call.activation)

    def choose_configs(self, rows_per_expert, gpu, dtype):
        """(gate_up config, down config) for a call of this many mean rows per expert."""
        return hopper.configs.choose(rows_per_expert, gpu, dtype)

    def gemm(self, a, w, plan, config, out=None):
        """out [R, N] = the plan's rows of a times their experts' w^T (the path's GEMM; a new
        tensor where out is None)."""
        return hopper.grouped_mm(a, w, plan.offsets, plan.counts, config, out=out)


def device_name(device: torch.device) -> str:
    """The name the tuned table is keyed by ("NVIDIA H200")."""
    return triton_ops.device_name(device)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")
