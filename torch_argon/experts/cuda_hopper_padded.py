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
whenever a CTA's next tile belongs to another expert, which was the suspect for its 39-45 % of
the bf16 peak on the H200 at E = 512 (the H100 run since cleared it: its 128 x 128 tile is as
slow on one expert; bench/hopper_gemm_notes.md); this kernel has nothing per expert to
rewrite, at the price of the padding rows, and runs one expert's problem 1.2-1.3x faster. Measured on an H100 (bf16, 2026-12-06): correct; its
GEMMs (best configuration each) at 446-667 TFLOP/s on one expert and 514-572 at E=128 T=8192,
but at E=512 slower than the ptr-array kernel's; the path, with ping-pong 128 x 128 for both
GEMMs, beat triton_dense only at E=128 T >= 8192 (2-4 %). So path="auto" and path="triton"
decline it ("no measured win" there, "not yet measured on a GPU" elsewhere) until its tuned
table (hopper/configs.py PADDED_MEASURED) has rows for the GPU and dtype;
path="cuda_hopper_padded" runs it wherever it can run.
"""
from .. import hopper
from . import cuda_hopper_dense as dense


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
