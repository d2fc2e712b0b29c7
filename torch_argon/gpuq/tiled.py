"""The tile-decode GEMM of the gpuq family (csrc/gpuq/gpuq_tiled_kernel.h) from Python: the
wrapper over argon::gpuq_tiled_qmm (csrc/gpuq/gpuq_ops.cpp has its schema and contract) and the
op's fakes, for torch.compile and torch.library.opcheck.

A thread block owns one plan tile of 64 or 128 rows and 128 weight rows (gate/up: 64 gate and the
matching 64 up rows); each weight is decoded once per tile into shared memory and every warp
multiplies from there, so the decode is paid once per 64-128 tokens instead of once per 8-32
(gpuq's own GEMMs, ops.qmm). Numerics: each weight rounded once to the activations' dtype (bit
for bit ops.dequantize), the products summed in fp32. Where it runs: as ops.refusal says (the
same builds as gpuq's other kernels).

  tiled_qmm(a, w_q, qtype, n_in, tile_expert, tile_m, *, meta=None, row_token=None,
            swiglu=False, activation="silu", zero_unused=True, out=None) -> [R, N]
"""
import torch

from ..quant.formats import qformat
from .ops import _check_runs

TILE_M = (64, 128)  # the plan tile sizes the kernel takes


def tiled_qmm(a, w_q, qtype, n_in, tile_expert, tile_m, *, meta=None, row_token=None,
              swiglu=False, activation="silu", zero_unused=True, out=None):
    """out [R, N] = a[rows] @ dequantize(w_q[e])^T over the plan's tiles of tile_m (64 or 128)
    rows, as ops.qmm in mode "none" (argon::gpuq_tiled_qmm; into `out` where given)."""
    _check_runs(a.device)
    type_id = qformat(qtype).type_id
    if out is None:
        return torch.ops.argon.gpuq_tiled_qmm(a, w_q, type_id, n_in, tile_expert, tile_m, meta,
                                              row_token, swiglu, activation, zero_unused)
    torch.ops.argon.gpuq_tiled_qmm_out(a, w_q, type_id, n_in, tile_expert, tile_m, meta,
                                       row_token, swiglu, activation, zero_unused, out)
    return out


@torch.library.register_fake("argon::gpuq_tiled_qmm")
def _tiled_qmm_fake(a, w_q, qtype, n_in, tile_expert, tile_m, meta=None, row_token=None,
                    swiglu=False, activation="silu", zero_unused=True):
    n_out = w_q.shape[1] // 2 if swiglu else w_q.shape[1]
    return a.new_empty((tile_expert.shape[0] * tile_m, n_out))


@torch.library.register_fake("argon::gpuq_tiled_qmm_out")
def _tiled_qmm_out_fake(a, w_q, qtype, n_in, tile_expert, tile_m, meta, row_token, swiglu,
                        activation, zero_unused, out):
    return None
