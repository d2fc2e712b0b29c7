"""The quantized Triton kernels as torch ops.

Triton ops (argon namespace; torch.compile(fullgraph=True) traces them, CUDA graphs capture them):

  argon::moe_qmm_triton(a, w_q, qtype, n_in, tables, tile_expert, meta, tile_m,
                        sorted_token=None, zero_unused=True)
      C [R, N] = A[rows] @ dequantize(w_q[e])^T over the plan's tiles; w_q uint8 [E, N,
      row_bytes] of GGML type `qtype` (its id) for rows of n_in values. With sorted_token, `a`
      is x [T, n_in] and row r reads x[sorted_token[r]] (zeros where -1): the gather fused in.
  argon::moe_gate_up_swiglu_qmm_triton(a, w_gate_up_q, qtype, n_in, tables, tile_expert, meta,
                                       tile_m, sorted_token=None, zero_unused=True)
      h [R, I] = silu(A @ G^T) * (A @ U^T), w_gate_up_q [E, 2I, row_bytes]: the gate rows, then
      the up rows, one format (a byte concatenation).

`tables` is quant_blocks.device_tables(a.device) (the formats' lookup tables; an argument, so a
traced graph holds it as an input). moe_qmm_triton and moe_gate_up_swiglu_qmm_triton below are
the Python entry points: they take a type name or id and fill in the tables.
a: fp16 / bf16; fp32 accumulation, rounded once to a's dtype.

CUDA kernels of the op table's quantized ops (registered by register_cuda_kernels where the ops
exist and have no CUDA kernel yet):

  argon::dequantize_out(w_q, qtype, n_in, out)  float32 [..., N, n_in], bit-exact
  argon::moe_qmm_out(xs, w_q, qtype, n_in, tile_expert, tile_m, activation_quant, out)
      the grouped GEMM with row-ordered xs (fp16 / bf16 / fp32), rows of unused tiles zero: on
      the gpuq kernels where they run it (activation_quant "none" and "q8"), else on Triton's
      ("none" only).
"""
import os
from typing import Optional

import torch
from torch._subclasses.fake_tensor import is_fake
from torch.library import triton_op, wrap_triton

from .. import _C, gpuq
from .._shapes import META_N_TILES
from ..ops import refuse_gradients
from ..quant.activation_q8 import check_exact_activations_only
from ..quant.formats import check_quantized, qformat
from .configs import mean_rows_per_expert
from .ops import check_plan_arguments
from .dequantize_kernel import dequantize_kernel
from .moe_qmm_kernel import moe_qmm_kernel
from .quant_blocks import TABLE_SIZE, device_tables, words_ok
from .quant_configs import QMMConfig, qmm_block_m, qmm_config

# As ops.py: under the Triton interpreter the kernels are launched as they are (and not at all
# on the fake tensors of a trace, which the interpreter cannot read; compiled, wrap_triton makes
# that launch a traced no-op).
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
LAUNCHER = (lambda kernel: kernel) if INTERPRETED else wrap_triton

_FLOAT_BYTES = {"F32": 4, "F16": 2, "BF16": 2}


def block_layout(fmt, n_in):
    """(bytes per kernel block, 32-value chunks per block, blocks per row, mask past n_in) of a
    format for rows of n_in values. The float types are read in "blocks" of 32 values."""
    if fmt.is_float:
        return 32 * _FLOAT_BYTES[fmt.name], 1, -(-n_in // 32), n_in % 32 != 0
    return fmt.block_bytes, fmt.block_elems // 32, n_in // fmt.block_elems, False


def _step_blocks(wanted, subs, n_blocks):
    """Blocks per K-loop iteration: 1 for the 256-value formats (8 chunks already); else the
    largest power of two <= wanted that divides the row's blocks (no remainder loop)."""
    if subs > 1:
        return 1
    step = 1
    while step * 2 <= wanted and n_blocks % (step * 2) == 0:
        step *= 2
    return step


def _as_row_bytes_contiguous(w_q):
    return w_q if w_q.stride(-1) == 1 else w_q.contiguous()


def launch_moe_qmm(a, w_q, fmt, n_in, tables, tile_expert, meta, tile_m, sorted_token, out, *,
                   swiglu, zero_unused, config: Optional[QMMConfig] = None, block_m=None,
                   launcher=None):
    """Launches moe_qmm_kernel into `out` [R, N]. meta None: every tile with an expert in
    [0, E) runs. config / block_m override the table (for the sweep)."""
    w_q = _as_row_bytes_contiguous(w_q)
    block_m = block_m or qmm_block_m(tile_m)
    rows_per_prog = min(block_m, tile_m)
    R, n_out = out.shape
    cfg = config or qmm_config(fmt, swiglu, block_m, mean_rows_per_expert(R, w_q.shape[0], tile_m))
    block_bytes, subs, n_blocks, mask_k = block_layout(fmt, n_in)
    grid = (R // rows_per_prog * -(-n_out // cfg.block_n),)
    gather = sorted_token is not None
    kernel = (launcher or (lambda k: k))(moe_qmm_kernel)
    kernel[grid](
        a, a.stride(0), a.stride(1),
        sorted_token if gather else tile_expert,  # any int32 tensor when unused
        w_q, w_q.stride(0), w_q.stride(1),
        tables,
        out, out.stride(0), out.stride(1),
        tile_expert, meta if meta is not None else tile_expert,
        n_out, n_in, n_blocks, tile_m, w_q.shape[0], a.shape[0], tile_expert.shape[0],
        META_N_TILES=META_N_TILES, HAS_META=meta is not None,
        GATHER=gather, SWIGLU=swiglu, ZERO_UNUSED=zero_unused,
        QTYPE=fmt.type_id, BLOCK_BYTES=block_bytes, SUBS=subs,
        STEP_BLOCKS=_step_blocks(cfg.step_blocks, subs, n_blocks), MASK_K=mask_k,
        WORDS=words_ok(fmt, w_q, w_q.stride(0), w_q.stride(1)), ROWS=rows_per_prog,
        BLOCK_M=block_m, BLOCK_N=cfg.block_n,
        DOT_PRECISION="ieee" if a.dtype == torch.float32 else None, SWAP_AB=cfg.swap_ab,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    return out


# Rows per dequantize program, and blocks per program (32-value formats; 256-value: one).
DEQUANT_BLOCK_R = 64
DEQUANT_STEP_BLOCKS = 4


def launch_dequantize(w2d, fmt, n_in, out2d, tables, launcher=None):
    """Dequantizes w2d uint8 [rows, row_bytes] into out2d [rows, n_in] (float32: bit-exact;
    fp16 / bf16: rounded once), whose rows may be strided, its values contiguous."""
    w2d = _as_row_bytes_contiguous(w2d)
    rows = w2d.shape[0]
    if rows == 0 or n_in == 0:
        return out2d
    block_bytes, subs, n_blocks, mask_k = block_layout(fmt, n_in)
    step = _step_blocks(DEQUANT_STEP_BLOCKS, subs, n_blocks)
    grid = (-(-rows // DEQUANT_BLOCK_R), n_blocks // step)
    (launcher or (lambda k: k))(dequantize_kernel)[grid](
        w2d, w2d.stride(0), out2d, out2d.stride(0), rows, n_in, tables,
        QTYPE=fmt.type_id, BLOCK_BYTES=block_bytes, SUBS=subs, STEP_BLOCKS=step,
        MASK_K=mask_k, WORDS=words_ok(fmt, w2d, w2d.stride(0)), BLOCK_R=DEQUANT_BLOCK_R,
        num_warps=4,
        enable_fp_fusion=False,  # (d*sc)*q - dmin*m rounds twice, as the reference
    )
    return out2d


# ---- the triton ops of the layer -----------------------------------------------------------

def _check_qmm(op, a, w_q, qtype, n_in, tables, tile_expert, meta, tile_m, sorted_token,
               swiglu):
    """Raises a ValueError naming the first argument that does not fit; returns (format, R)."""
    fmt = qformat(qtype)
    try:
        check_quantized(w_q, fmt, n_in, name="w_q")
    except (TypeError, ValueError) as e:
        raise ValueError(f"{op}: {e}") from None
    if a.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"{op}: a must be float16 / bfloat16, got {a.dtype}")
    if a.dim() != 2 or a.shape[1] != n_in or w_q.dim() != 3:
        raise ValueError(f"{op}: a [rows, n_in={n_in}] and w_q [E, N, row_bytes] do not "
                         f"fit: {tuple(a.shape)}, {tuple(w_q.shape)}")
    if swiglu and w_q.shape[1] % 2:
        raise ValueError(f"{op}: w_q must be [E, 2I, row_bytes] (gate rows, then up rows), "
                         f"got {tuple(w_q.shape)}")
    if tables is not None and (tables.dtype != torch.float32
                               or tuple(tables.shape) != (TABLE_SIZE,)):
        raise ValueError(f"{op}: tables must be quant_blocks.device_tables(device) (float32 "
                         f"[{TABLE_SIZE}]), got {tables.dtype} of shape {tuple(tables.shape)}")
    for name, t in (("w_q", w_q), ("tables", tables)):
        if t is not None and t.device != a.device:
            raise ValueError(f"{op}: {name} is on {t.device}, a on {a.device}")
    rows = check_plan_arguments(a, "a", tile_expert, meta, tile_m, sorted_token)
    return fmt, rows


def _run_qmm(a, w_q, qtype, n_in, tables, tile_expert, meta, tile_m, sorted_token, zero_unused,
             swiglu):
    op = "moe_gate_up_swiglu_qmm_triton" if swiglu else "moe_qmm_triton"
    fmt, rows = _check_qmm(op, a, w_q, qtype, n_in, tables, tile_expert, meta, tile_m,
                           sorted_token, swiglu)
    n_out = w_q.shape[1] // 2 if swiglu else w_q.shape[1]
    out = a.new_empty((rows, n_out))
    if rows and n_out and not (INTERPRETED and is_fake(a)):
        launch_moe_qmm(a, w_q, fmt, n_in, tables, tile_expert, meta, tile_m, sorted_token, out,
                       swiglu=swiglu, zero_unused=zero_unused, launcher=LAUNCHER)
    return out


@triton_op("argon::moe_qmm_triton", mutates_args=())
def moe_qmm_triton_op(a: torch.Tensor, w_q: torch.Tensor, qtype: int, n_in: int,
                      tables: torch.Tensor, tile_expert: torch.Tensor, meta: torch.Tensor,
                      tile_m: int, sorted_token: Optional[torch.Tensor] = None,
                      zero_unused: bool = True) -> torch.Tensor:
    return _run_qmm(a, w_q, qtype, n_in, tables, tile_expert, meta, tile_m, sorted_token,
                    zero_unused, swiglu=False)


@triton_op("argon::moe_gate_up_swiglu_qmm_triton", mutates_args=())
def moe_gate_up_swiglu_qmm_triton_op(a: torch.Tensor, w_gate_up_q: torch.Tensor, qtype: int,
                                     n_in: int, tables: torch.Tensor, tile_expert: torch.Tensor,
                                     meta: torch.Tensor, tile_m: int,
                                     sorted_token: Optional[torch.Tensor] = None,
                                     zero_unused: bool = True) -> torch.Tensor:
    return _run_qmm(a, w_gate_up_q, qtype, n_in, tables, tile_expert, meta, tile_m,
                    sorted_token, zero_unused, swiglu=True)


def moe_qmm_triton(a, w_q, qtype, n_in, tile_expert, meta, tile_m, sorted_token=None,
                   zero_unused=True):
    """argon::moe_qmm_triton with qtype a GGUF type name, enum or id (the tables filled in)."""
    return moe_qmm_triton_op(a, w_q, qformat(qtype).type_id, n_in, device_tables(a.device),
                             tile_expert, meta, tile_m, sorted_token, zero_unused)


def moe_gate_up_swiglu_qmm_triton(a, w_gate_up_q, qtype, n_in, tile_expert, meta, tile_m,
                                  sorted_token=None, zero_unused=True):
    """argon::moe_gate_up_swiglu_qmm_triton with qtype a name, enum or id (tables filled in)."""
    return moe_gate_up_swiglu_qmm_triton_op(a, w_gate_up_q, qformat(qtype).type_id, n_in,
                                            device_tables(a.device), tile_expert, meta, tile_m,
                                            sorted_token, zero_unused)


# ---- CUDA kernels of the op table's dequantize_out and moe_qmm_out -------------------------

# Each runs the op's own checks first (csrc/checks.cpp, as every backend's kernel does): among
# them, out is contiguous of the exact shape and overlaps no input.

def dequantize_out_cuda(w_q, qtype, n_in, out):
    _C.meta.dequantize_out(w_q, qtype, n_in, out)
    if out.numel() == 0:
        return
    fmt = qformat(qtype)
    launch_dequantize(w_q.reshape(-1, w_q.shape[-1]), fmt, n_in, out.view(-1, n_in),
                      device_tables(w_q.device))


def dequantize_triton(w_q, qtype, n_in, out_dtype=torch.float32):
    """[..., N, n_in] of out_dtype from quantized blocks w_q [..., N, row_bytes] on a CUDA
    device (or any device under the Triton interpreter); float32 is bit-exact with
    torch_argon.quant.dequantize_reference. Not an op: for baselines and tests."""
    fmt = check_quantized(w_q, qtype, n_in, name="w_q")
    out = torch.empty((*w_q.shape[:-1], n_in), dtype=out_dtype, device=w_q.device)
    if out.numel():
        launch_dequantize(w_q.reshape(-1, w_q.shape[-1]), fmt, n_in, out.view(-1, n_in),
                          device_tables(w_q.device))
    return out


def moe_qmm_out_cuda(xs, w_q, qtype, n_in, tile_expert, tile_m, activation_quant, out):
    """The gpuq kernels (csrc/gpuq) where they run the call: bf16 / fp16 xs in both modes, fp32
    xs with q8 (they serve q8, which the Triton kernel has not, and read each weight once per
    up to 32 rows: bench/quant_gpuq_notes.md); else the Triton kernel, "none" only (fp32 xs; a
    build or GPU without gpuq)."""
    _C.meta.moe_qmm_out(xs, w_q, qtype, n_in, tile_expert, tile_m, activation_quant, out)
    if gpuq.moe_qmm_out(xs, w_q, qtype, n_in, tile_expert, tile_m, activation_quant, out):
        return
    check_exact_activations_only(activation_quant, "CUDA")
    if out.numel():
        launch_moe_qmm(xs, w_q, qformat(qtype), n_in, device_tables(xs.device), tile_expert, None,
                       tile_m, None, out, swiglu=False, zero_unused=True)


_libraries = {}  # namespace -> its IMPL torch.library.Library (must outlive the registrations)


def register_cuda_kernels(namespace="argon", dispatch_key="CUDA"):
    """Registers dequantize_out_cuda and moe_qmm_out_cuda as the `dispatch_key` kernels of
    `namespace`::dequantize_out / moe_qmm_out, for each op that exists (csrc/op_table.h) and has
    no kernel for that key yet. Returns the names registered."""
    ops = getattr(torch.ops, namespace)
    done = []
    for name, fn in (("dequantize_out", dequantize_out_cuda), ("moe_qmm_out", moe_qmm_out_cuda)):
        try:
            getattr(ops, name)
        except (AttributeError, RuntimeError):
            continue
        if torch._C._dispatch_has_kernel_for_dispatch_key(f"{namespace}::{name}", dispatch_key):
            continue
        if namespace not in _libraries:
            _libraries[namespace] = torch.library.Library(namespace, "IMPL")
        _libraries[namespace].impl(name, fn, dispatch_key)
        done.append(name)
    return done


__all__ = ["moe_qmm_triton", "moe_gate_up_swiglu_qmm_triton", "moe_qmm_triton_op",
           "moe_gate_up_swiglu_qmm_triton_op", "launch_moe_qmm", "launch_dequantize",
           "register_cuda_kernels", "device_tables"]


for _op in (moe_qmm_triton_op, moe_gate_up_swiglu_qmm_triton_op):
    refuse_gradients(_op)
