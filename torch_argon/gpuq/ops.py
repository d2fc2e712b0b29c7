"""The gpuq kernels (csrc/gpuq) as Python functions over torch tensors: the quantized grouped
GEMM for every GGUF block format (exact-dequant bf16 / fp16 MMA, or activation_quant="q8": int8
MMA on the activations' 8-bit blocks), with the gather and the gated-activation epilogue fused
into the gate/up GEMM, and the q8 quantization of activations.

CUDA tensors run the CUDA library; CPU tensors run the same kernels through the host emulation
(library.py), which is how the tests check them without a GPU. The launches are asynchronous on
the current CUDA stream and take no host sync, so they can be captured in a CUDA graph.

Functions (every tensor on one device; the plan from torch_argon.moe_plan):

  quantize_q8(x) -> (q int8 [R, n], d float32 [R, n / 32])
  qmm(a, w_q, qtype, n_in, tile_expert, tile_m, *, meta=None, row_token=None, swiglu=False,
      activation="silu", activation_quant="none", zero_unused=True, a_q8=None) -> [R, N]
  moe_experts_gpuq(x, topk_ids, topk_weights, experts, *, ops, activation="silu",
                   activation_quant="none", tile_m=None) -> [T, H]
"""
import ctypes
from typing import Optional

import torch

from .._shapes import META_N_TILES
from ..quant.activation_q8 import Q8_BLOCK, check_activation_quant
from ..quant.formats import check_quantized, qformat
from .library import FORMAT_ALIGN, FORMAT_STRUCTS, GemmParams, load

ACTIVATIONS = {"silu": 0, "gelu": 1, "gelu_tanh": 2}
FORMATS = tuple(FORMAT_STRUCTS)
MAX_ROWS_PER_WARP = 32  # 4 token blocks of 8


def _target(device):
    if device.type == "cuda":
        return "cuda"
    if device.type == "cpu":
        return "host"
    raise ValueError(f"gpuq kernels run on CUDA (or the CPU emulation), not {device}")


def _stream(device):
    return torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else None


def _err_buffer():
    return ctypes.create_string_buffer(512)


def _ptr(t):
    return None if t is None else t.data_ptr()


def quantize_q8(x: torch.Tensor):
    """(q int8 [R, n], d float32 [R, n / 32]) of x [R, n] (bf16 / fp16 / fp32, n a multiple of
    32), bit for bit as torch_argon.quant.activation_q8.quantize_rows_q8 (finite x)."""
    kinds = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}
    if x.dtype not in kinds or x.dim() != 2 or x.shape[1] % Q8_BLOCK:
        raise ValueError(f"quantize_q8: x must be bf16 / fp16 / fp32 [R, n] with n a multiple "
                         f"of {Q8_BLOCK}, got {x.dtype} {tuple(x.shape)}")
    if x.stride(1) != 1:
        x = x.contiguous()
    R, n = x.shape
    q = torch.empty(R, n, dtype=torch.int8, device=x.device)
    d = torch.empty(R, n // Q8_BLOCK, dtype=torch.float32, device=x.device)
    lib = load(_target(x.device))
    err = _err_buffer()
    if lib.gpuq_quantize_q8(x.data_ptr(), x.stride(0), R, n, kinds[x.dtype], q.data_ptr(),
                            d.data_ptr(), _stream(x.device), err, len(err)):
        raise RuntimeError(f"quantize_q8: {err.value.decode()}")
    return q, d


def rows_per_warp(tile_m: int) -> int:
    """The plan rows one warp computes: the tile, at most 32 (a larger tile: several warps)."""
    return min(tile_m, MAX_ROWS_PER_WARP)


def token_blocks(rows: int) -> int:
    """8-token MMA blocks per warp for `rows` rows: 1, 2 or 4."""
    return 1 if rows <= 8 else 2 if rows <= 16 else 4


def _aligned(t, align):
    if t.data_ptr() % align == 0 and all((s * t.element_size()) % align == 0
                                         for s in t.stride()[:-1]) and t.stride(-1) == 1:
        return t
    return t.contiguous()


def qmm(a, w_q, qtype, n_in, tile_expert, tile_m, *, meta=None, row_token=None, swiglu=False,
        activation="silu", activation_quant="none", zero_unused=True, a_q8=None, out=None):
    """out [R, N] (N = w_q rows, or half of them with swiglu) = a[rows] @ dequantize(w_q[e])^T
    over the plan's tiles, R = tile_expert.shape[0] * tile_m.

    a: bf16 / fp16 activations [rows of a, n_in]; with row_token (the plan's sorted_token) row
    r reads a[row_token[r]] (zeros where -1 or out of range), else a[r].
    swiglu: w_q holds gate rows then up rows, out = act(a @ G^T) * (a @ U^T), act "silu",
    "gelu" or "gelu_tanh".
    meta: the plan's counters: tiles at or past meta[n_tiles] are unused (without meta, every
    tile whose expert is in [0, E)). Unused tiles' rows are zero, or left as they are if not
    zero_unused.
    activation_quant "q8": a is quantized to 8-bit blocks (or a_q8 = quantize_q8(a) is given),
    the MMA is int8; the result is the reference's q8 product."""
    fmt = qformat(qtype)
    if fmt.name not in FORMAT_STRUCTS:
        raise ValueError(f"qmm: gpuq has no kernel for {fmt.name}; formats: {', '.join(FORMATS)}")
    check_quantized(w_q, fmt, n_in, name="w_q")
    check_activation_quant(activation_quant)
    if activation not in ACTIVATIONS:
        raise ValueError(f"qmm: activation must be one of {tuple(ACTIVATIONS)}, got {activation!r}")
    if a.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"qmm: a must be bf16 / fp16, got {a.dtype}")
    if a.dim() != 2 or a.shape[1] != n_in or w_q.dim() != 3:
        raise ValueError(f"qmm: a [rows, n_in={n_in}] and w_q [E, N, row_bytes] do not fit: "
                         f"{tuple(a.shape)}, {tuple(w_q.shape)}")
    if swiglu and w_q.shape[1] % 2:
        raise ValueError(f"qmm: swiglu needs w_q [E, 2I, row_bytes], got {tuple(w_q.shape)}")
    if not isinstance(tile_m, int) or tile_m < 1 or tile_m & (tile_m - 1):
        raise ValueError(f"qmm: tile_m must be a power of two, got {tile_m}")
    for name, t in (("tile_expert", tile_expert), ("meta", meta), ("row_token", row_token)):
        if t is not None and (t.dtype != torch.int32 or t.dim() != 1 or t.device != a.device):
            raise ValueError(f"qmm: {name} must be a 1-D int32 tensor on {a.device}")
    if w_q.device != a.device:
        raise ValueError(f"qmm: w_q is on {w_q.device}, a on {a.device}")
    R = tile_expert.shape[0] * tile_m
    if row_token is not None and row_token.shape[0] != R:
        raise ValueError(f"qmm: row_token has {row_token.shape[0]} rows, the plan {R}")
    n_out = w_q.shape[1] // 2 if swiglu else w_q.shape[1]
    if out is None:
        out = torch.empty(R, n_out, dtype=a.dtype, device=a.device)
    if R == 0 or n_out == 0:
        return out
    w_q = _aligned(w_q, FORMAT_ALIGN[fmt.name])
    q8 = activation_quant == "q8"
    if q8:
        x_codes, x_scale = a_q8 if a_q8 is not None else quantize_q8(a)
        x_stride = x_codes.stride(0)
    else:
        x_codes, x_scale = _aligned(a, 16), None
        x_stride = x_codes.stride(0) * x_codes.element_size()
    rpw = rows_per_warp(tile_m)
    p = GemmParams(
        x=x_codes.data_ptr(), x_stride=x_stride, x_scale=_ptr(x_scale),
        x_scale_stride=x_scale.stride(0) if q8 else 0, row_token=_ptr(row_token),
        w=w_q.data_ptr(), w_stride_e=w_q.stride(0), w_stride_n=w_q.stride(1),
        out=out.data_ptr(), out_stride=out.stride(0), tile_expert=tile_expert.data_ptr(),
        meta=_ptr(meta), n_out=n_out, n_in=n_in, n_blocks=n_in // fmt.block_elems,
        tile_m=tile_m, rows_per_warp=rpw, n_expert=w_q.shape[0], n_a_rows=a.shape[0],
        n_tiles_all=tile_expert.shape[0], activation=ACTIVATIONS[activation],
        zero_unused=int(zero_unused), meta_n_tiles_index=META_N_TILES,
        out_bf16=int(a.dtype == torch.bfloat16))
    lib = load(_target(a.device))
    err = _err_buffer()
    fn = getattr(lib, f"gpuq_gemm_{fmt.name}")
    if fn(ctypes.byref(p), token_blocks(rpw), int(swiglu), int(q8),
          int(a.dtype == torch.bfloat16), _stream(a.device), err, len(err)):
        raise RuntimeError(f"qmm ({fmt.name}): {err.value.decode()}")
    return out


def layer_tile_m(n_entries: int, n_expert: int) -> int:
    """The plan's tile_m for the gpuq layer: the mean rows per expert rounded up to 8, 16 or 32
    (a warp then takes a whole tile: one decode of each weight per 8-32 tokens)."""
    rows = n_entries / max(n_expert, 1)
    return 8 if rows <= 8 else 16 if rows <= 16 else 32


def moe_experts_gpuq(x, topk_ids, topk_weights, experts, *, ops, activation="silu",
                     activation_quant="none", tile_m=None, out_dtype=None):
    """The routed experts with quantized weights on the gpuq kernels: plan, the gathered gate/up
    GEMM with the activation epilogue, the down GEMM, the combine (same contract as
    layer.moe_experts). experts: gate_up (gate rows, then up rows, one format) and down, each
    with .data / .qtype / .n_in (torch_argon.quant.QuantizedExperts)."""
    gate_up, down = experts.gate_up, experts.down
    E = down.data.shape[0]
    T, K = topk_ids.shape
    tm = tile_m or layer_tile_m(T * K, E)
    plan = ops.moe_plan(topk_ids, topk_weights, E, tm)
    q8 = activation_quant == "q8"
    x_q8 = quantize_q8(x) if q8 else None
    h = qmm(x, gate_up.data, gate_up.qtype, gate_up.n_in, plan.tile_expert, tm, meta=plan.meta,
            row_token=plan.sorted_token, swiglu=True, activation=activation,
            activation_quant=activation_quant, zero_unused=False, a_q8=x_q8)
    y = qmm(h, down.data, down.qtype, down.n_in, plan.tile_expert, tm, meta=plan.meta,
            activation_quant=activation_quant, zero_unused=False)
    return ops.moe_combine(y, plan, topk_weights, out_dtype=out_dtype or x.dtype)


# ---- as torch ops: traced by torch.compile(fullgraph=True), checked by opcheck ---------------

@torch.library.custom_op("argon::gpuq_qmm", mutates_args=())
def gpuq_qmm_op(a: torch.Tensor, w_q: torch.Tensor, qtype: int, n_in: int,
                tile_expert: torch.Tensor, tile_m: int, meta: Optional[torch.Tensor] = None,
                row_token: Optional[torch.Tensor] = None, swiglu: bool = False,
                activation: str = "silu", activation_quant: str = "none",
                zero_unused: bool = True) -> torch.Tensor:
    """qmm as an op: argon::gpuq_qmm (same arguments; qtype the GGML type id)."""
    return qmm(a, w_q, qtype, n_in, tile_expert, tile_m, meta=meta, row_token=row_token,
               swiglu=swiglu, activation=activation, activation_quant=activation_quant,
               zero_unused=zero_unused)


@gpuq_qmm_op.register_fake
def _gpuq_qmm_fake(a, w_q, qtype, n_in, tile_expert, tile_m, meta=None, row_token=None,
                   swiglu=False, activation="silu", activation_quant="none", zero_unused=True):
    n_out = w_q.shape[1] // 2 if swiglu else w_q.shape[1]
    return a.new_empty((tile_expert.shape[0] * tile_m, n_out))


@torch.library.custom_op("argon::gpuq_quantize_q8", mutates_args=())
def gpuq_quantize_q8_op(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """quantize_q8 as an op: argon::gpuq_quantize_q8."""
    return quantize_q8(x)


@gpuq_quantize_q8_op.register_fake
def _gpuq_quantize_q8_fake(x):
    return (x.new_empty(x.shape, dtype=torch.int8),
            x.new_empty((x.shape[0], x.shape[1] // Q8_BLOCK), dtype=torch.float32))
