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
