"""Dense experts on Hopper GPUs (compute capability 9.0) through the padded-plan GEMM
(argon::hopper_padded_mm, csrc/hopper/hopper_padded_gemm.cuh): CUTLASS 3's warp-specialized TMA
kernel with one tensor map per operand, walking the plan's used 128-row tiles with the expert of
each tile as the L coordinate of the weight stack. Per call: the flow's plan (tile_m 128) and
gather (xs: every expert's rows padded to whole tiles, the padding rows zero), the gate/up GEMM
into [R, 2I], the activation op (argon's swiglu), the down GEMM into y [R, H], then the flow's
combine. Every row of a used tile is computed (padding included, zeros in and out; the combine
never reads them); tiles past the plan's used count are not. No host sync: the used-tile count
is read on the device, so CUDA graphs capture the call.

Why beside cuda_hopper_dense: the ptr-array grouped GEMM that one runs rewrites its tensor maps
whenever a CTA's next tile belongs to another expert; this kernel has nothing per expert to
rewrite, at the price of the padding rows (each expert's rows rounded up to 128), and runs one
expert's problem 1.2-1.3x faster. Where the experts have few rows each the padding costs more
than it wins (at E=512 K=10 T=8192, 160 rows per expert, it computes 130816 rows for 81920).
Measured on an H100 (bf16, 2026-12-06; bench/hopper_gemm_notes.md): above 320 mean rows per
expert the path took 0.81-0.88x triton_dense's time (E=128 T = 6144 / 8192 / 16384), at or
below it 0.97-1.47x (up to 1.60x with the tile order's windows of 4 before the per-launch
window); so path="auto" takes it there and only there (hopper/configs.py PADDED_MEASURED: a
band of None rows up to 320), and on GPUs or dtypes the table lacks declines it ("not yet
measured on a GPU"). path="cuda_hopper_padded" runs it wherever it can run.

The activation in the gate/up GEMM's epilogue (argon::hopper_padded_act_mm, csrc/hopper/
hopper_padded_act_epilogue.cuh): the GEMM writes h [R, I] = act(gate) * up straight from its
accumulators, bit for bit the unfused GEMM + swiglu, so gu [R, 2I] is neither written nor read
back (at E=128 K=8 H=2048 I=768 T=8192, about 73.7k padded rows: gu is 226 MB, written and
read again, ~450 MB of traffic, plus the swiglu launch; h's 113 MB are written either way).
It reads the gate/up stack with gate and up rows interleaved in blocks of 8
(hopper.interleave_gate_up), made once per stack at its first fused call and kept beside it
(_INTERLEAVED, a derived_cache.DerivedCache: per stack and view, re-interleaved after an
in-place change or a replaced .data, into the same buffer, so a CUDA graph that captured it
reads the new weights once an eager call has refreshed it; cuda_quantized_dequant's decoded
workspace never takes it): a second copy of gate_up in
device memory (E * 2I * H values: 805 MB in bf16 at E=128 H=2048 I=768, per layer), the price
of a kernel whose mainloop is the plain GEMM's (a 5-D tensor map that reads the original stack
in the interleaved order would remove it; not built). Status: built and checked on the host,
not yet run on a GPU; until its GPU tests pass (hopper/configs.py
FUSED_ACTIVATION_PASSED_GPU_TESTS), and while it needs the copy (FUSED_ACTIVATION_NEEDS_A_COPY:
the memory is the caller's choice), the path runs the unfused stages by default, and
hopper.configs.FUSE_ACTIVATION (a module switch: True / False / None) forces either for the
tests and the benchmark. Where the fused GEMM cannot run (fused_gate_up_refusal: under
torch.compile tracing, whose graph cannot read the cache; inside a CUDA graph capture before
the stack's first eager fused call, which would capture the interleaving copy; a build without
its units) the path runs the unfused stages, with the same result.
"""

import torch

from .. import hopper
from . import cuda_hopper_dense as dense
from .derived_cache import DerivedCache


class CudaHopperPadded(dense.CudaHopperDense):
    """cuda_hopper_dense's requirements (device, dtypes, contiguous stacks, H and I multiples
    of 8, no autograd) and stages (apply), and a plan of tile_m 128; its own GEMM (gemm) and
    tuned table (choose_configs)."""

    name = "cuda_hopper_padded"
    kernel = "padded Hopper GEMM"
    table_name = "PADDED_MEASURED"
    table = hopper.configs.PADDED_MEASURED
    measured_slower = hopper.configs.PADDED_MEASURED_SLOWER

    def supports(self, call):
        why = super().supports(call)
        if why:
            return why
        if call.tile_m is not None and call.tile_m != hopper.configs.PADDED_TILE_M:
            return (f"tile_m={call.tile_m}: the padded Hopper GEMM runs plans of tile_m "
                    f"{hopper.configs.PADDED_TILE_M} (its M tile)")
        return ""

    def default_tile_m(self, call, n_entries):
        """128: the GEMM's M tile, so that every tile holds one expert's rows."""
        return hopper.configs.PADDED_TILE_M

    def choose_configs(self, rows_per_expert, gpu, dtype):
        return hopper.configs.choose_padded(rows_per_expert, gpu, dtype)

    def gemm(self, a, w, plan, config, out=None):
        """Every used tile of the plan (padding rows included), its expert from tile_expert."""
        return hopper.padded_mm(a, w, plan.tile_expert, plan.meta, config, out=out)

    # Whether gate_up_act may take the fused GEMM, whose interleaved stack is cached per weight
    # tensor: cuda_quantized_dequant's instance turns it off (its stacks are a workspace decoded
    # in place at every call).
    fuses_activation = True

    def gate_up_act(self, call, xs, plan, config):
        """h [R, I]: the gate/up GEMM with the activation in its epilogue where
        hopper.configs.fuse_activation() asks for it and the call allows it, else the unfused
        stages (the same bits)."""
        if (not self.fuses_activation or not hopper.configs.fuse_activation()
                or fused_gate_up_refusal(call)):
            return super().gate_up_act(call, xs, plan, config)
        w = call.weights
        h = xs.new_empty((xs.shape[0], w.inter))
        return hopper.padded_act_mm(xs, interleaved(w.gate_up), plan.tile_expert,
                                    plan.meta, config, call.activation, out=h)


FUSED_ACTIVATIONS = ("silu", "gelu", "gelu_tanh")  # every activation swiglu takes


def fused_gate_up_refusal(call) -> str:
    """Why the gate/up GEMM with the activation fused cannot run this call ("" where it can)."""
    if call.activation not in FUSED_ACTIVATIONS:
        return f"activation {call.activation!r}: the fused epilogue computes {FUSED_ACTIVATIONS}"
    if call.weights.inter % hopper.padded_ops.INTERLEAVE:
        return (f"I={call.weights.inter}: the interleaved stack needs I a multiple of "
                f"{hopper.padded_ops.INTERLEAVE}")
    if torch.compiler.is_compiling():
        return ("under torch.compile tracing the interleaved stack's cache cannot be read (the "
                "graph would interleave the weights at every call)")
    if (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
            and not _INTERLEAVED.has((call.weights.gate_up,))):
        return ("inside a CUDA graph capture before the stack's first fused call: its "
                "interleaving cannot be captured (run the layer once before capturing)")
    return hopper.padded_ops.act_refusal(call.x.device)


# The interleaved copy of each gate/up stack the fused GEMM has run (derived_cache's doc: kept
# per stack and view, refreshed in place after an in-place change)
_INTERLEAVED = DerivedCache()


def interleaved(gate_up):
    """interleave_gate_up(gate_up), made at the first fused call for this stack (and
    version)."""
    return _INTERLEAVED.get((gate_up,), lambda: hopper.interleave_gate_up(gate_up))
