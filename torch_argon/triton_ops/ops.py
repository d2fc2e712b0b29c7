"""The Triton grouped GEMMs as torch ops (argon namespace), so torch.compile(fullgraph=True)
traces them and CUDA graphs capture them:

  argon::moe_mm_triton(a, w, tile_expert, meta, tile_m, sorted_token=None, zero_unused=True,
                       row_token=None)
      C [R, N] = A[rows] @ W[e]^T over the plan's tiles. With sorted_token, `a` is x [T, Kd]
      and row r reads x[sorted_token[r]] (zeros where -1): moe_gather fused into the GEMM.
      row_token (only with a row-ordered `a`): the plan's sorted_token, read only to know
      which rows are padding (-1): their outputs are zeros (zero_unused) or may be left
      unwritten, and a kernel may skip computing them (moe_mm_tma_kernel.py's SKIP_PADDING).
  argon::moe_gate_up_swiglu_triton(a, w_gate_up, tile_expert, meta, tile_m,
                                   sorted_token=None, zero_unused=True, activation="silu")
      h [R, I] = act(A @ W_gate^T) * (A @ W_up^T) with w_gate_up [E, 2I, Kd]: the gate/up
      GEMM and swiglu in one kernel (act: "silu", "gelu" or "gelu_tanh").
  argon::topk_triton(scores, k)
      torch.topk(scores, k, dim=-1) for router scores, same choice and order (topk_kernel.py).

R = sorted_token's length when given, else a's rows. zero_unused: write zeros into rows of
unused tiles (the moe_mm contract); False leaves them unwritten (the layer never reads them).
With zero_unused=False, padding rows of used tiles may be left unwritten too.

Which kernel and block shape run a call: configs.py (a measured table per device, dtype and
shape, else the default rules); the Hopper kernel (moe_mm_tma_kernel.py) only on NVIDIA sm_90+
(the capability read once per device and cached) and only where its descriptors fit the
tensors (tma_refusal), else the portable kernel (moe_mm_kernel.py).
The fake (meta) impl is the function itself: torch.library.triton_op runs it on fake tensors,
where the kernel launch is a no-op.
"""
import functools
import os
from typing import Optional

import torch
from torch.library import triton_op, wrap_triton

import triton

from .. import _C
from .._shapes import META_N_TILES, META_SIZE
from ..activations import code as activation_code
from ..ops import refuse_gradients
from . import configs
from .configs import MMConfig, block_m_for, config_for, mean_rows_per_expert
from .moe_mm_kernel import moe_mm_kernel
from .moe_mm_tma_kernel import moe_mm_tma_kernel
from .topk_kernel import topk_rows_kernel


def check_plan_arguments(a, a_name, tile_expert, meta, tile_m, sorted_token, row_token=None):
    """The plan's tensors of a Triton GEMM call, one check for the dense and the quantized ones:
    meta, sorted_token and row_token as moe_plan returns them, on a's device, and the rows
    (sorted_token's when the gather is fused in, else a's) against tile_expert and tile_m by the
    ops' own check (csrc/checks.cpp: check_tile_plan). Returns the row count."""
    for name, t in (("meta", meta), ("sorted_token", sorted_token), ("row_token", row_token)):
        if t is None:
            continue
        if t.dtype != torch.int32 or t.dim() != 1:
            raise ValueError(f"{name} must be a 1-D int32 tensor from moe_plan, got {t.dtype} of "
                             f"shape {tuple(t.shape)}")
        if t.device != a.device:
            raise ValueError(f"{name} must be on {a.device} like {a_name}, got {t.device}")
    if meta is not None and meta.shape[0] < META_SIZE:
        raise ValueError(f"meta must hold moe_plan's {META_SIZE} counters, got {meta.shape[0]}")
    if row_token is not None and sorted_token is not None:
        raise ValueError(f"row_token is for a row-ordered {a_name}; with sorted_token the rows "
                         "are gathered (pass one of the two)")
    rows, rows_name = (sorted_token, "sorted_token") if sorted_token is not None else (a, a_name)
    _C.checks.tile_plan(rows, rows_name, tile_expert, tile_m)
    if row_token is not None and row_token.shape[0] != rows.shape[0]:
        raise ValueError(f"row_token must be the plan's sorted_token of {rows.shape[0]} rows, got "
                         f"{row_token.shape[0]}")
    return rows.shape[0]


def _check(a, w, tile_expert, meta, tile_m, sorted_token, swiglu, row_token=None):
    """Raises a ValueError naming the first argument that does not fit; returns the row count."""
    op = "moe_gate_up_swiglu_triton" if swiglu else "moe_mm_triton"
    block_m_for(tile_m)
    if a.dtype not in (torch.float16, torch.bfloat16) or w.dtype != a.dtype:
        raise ValueError(f"{op}: a and w must both be fp16 or bf16, got {a.dtype} and {w.dtype}")
    if a.dim() != 2 or w.dim() != 3 or w.shape[2] != a.shape[1]:
        raise ValueError(f"{op}: a [rows, Kd] and w [E, N, Kd] do not fit: "
                         f"{tuple(a.shape)}, {tuple(w.shape)}")
    if swiglu and w.shape[1] % 2:
        raise ValueError(f"{op}: w must be [E, 2I, Kd], got {tuple(w.shape)}")
    if w.device != a.device:
        raise ValueError(f"{op}: w is on {w.device}, a on {a.device}")
    return check_plan_arguments(a, "a", tile_expert, meta, tile_m, sorted_token, row_token)


def launch_moe_mm(a, w, tile_expert, meta, tile_m, sorted_token, out, *, swiglu,
                  zero_unused, activation="silu", config: Optional[MMConfig] = None,
                  block_m=None, launcher=None, row_token=None):
    """Launches a grouped GEMM into `out` [R, N]. config / block_m override the choice of
    configs.py (the sweep and the tests); an explicit "tma" config that cannot run here raises
    ValueError, one from the table falls back to the default rule. launcher wraps the kernel
    (wrap_triton inside the ops, nothing outside). row_token: see moe_mm_triton."""
    block_m = block_m or block_m_for(tile_m)
    gather = sorted_token is not None
    tokens = sorted_token if gather else row_token
    rows_per_expert = mean_rows_per_expert(out.shape[0], w.shape[0], tile_m)
    cfg = config or choose_config(a, w, tile_m, swiglu, gather, rows_per_expert)
    if cfg.kernel == "tma":
        refusal = tma_refusal(a, w, out, block_m, cfg, tokens)
        if refusal and config is not None:
            raise ValueError(f"config {cfg.label()}: {refusal}")
        if refusal:
            cfg = config_for(swiglu, block_m, rows_per_expert)
    n_out = out.shape[1]
    kd = a.shape[1]
    block_k = min(cfg.block_k, max(16, triton_next_pow2(kd)))
    n_blocks = out.shape[0] // block_m * -(-n_out // cfg.block_n)
    wrap = launcher or (lambda k: k)
    common = dict(META_N_TILES=META_N_TILES, GATHER=gather, SWIGLU=swiglu,
                  ZERO_UNUSED=zero_unused, ACTIVATION=activation_code(activation),
                  EVEN_K=kd % block_k == 0, BLOCK_M=block_m, BLOCK_N=cfg.block_n,
                  BLOCK_K=block_k, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    if cfg.kernel == "classic":
        wrap(moe_mm_kernel)[(n_blocks,)](
            a, a.stride(0), a.stride(1),
            sorted_token if gather else tile_expert,  # any int32 tensor when unused
            w, w.stride(0), w.stride(1), w.stride(2),
            out, out.stride(0), out.stride(1),
            tile_expert, meta,
            n_out, kd, tile_m, w.shape[0], a.shape[0], **common)
        return out
    # A persistent grid strides by the programs it could have (a constant of the config and the
    # GPU: one compile for every shape) and launches no more programs than blocks.
    stride = cfg.persistent * multiprocessor_count(a.device) if cfg.persistent else 1
    n_programs = min(n_blocks, stride) if cfg.persistent else n_blocks
    if LAUNCHER is wrap_triton:
        triton.set_allocator(_descriptor_scratch)  # room for the kernel's TMA descriptors
    wrap(moe_mm_tma_kernel)[(n_programs,)](
        a, a.stride(0), a.stride(1),
        tokens if tokens is not None else tile_expert,  # any int32 tensor when unused
        w, w.stride(0), w.stride(1),
        out, out.stride(0), out.stride(1),
        tile_expert, meta,
        n_out, kd, tile_m, w.shape[0], a.shape[0], out.shape[0],
        A_TMA=not gather and _descriptor_fits(a), C_TMA=cfg.tma_store and _descriptor_fits(out),
        SKIP_PADDING=cfg.skip_padding,
        PERSISTENT=bool(cfg.persistent), NUM_PROGRAMS=stride, **common)
    return out


def choose_config(a, w, tile_m, swiglu, gather, rows_per_expert) -> MMConfig:
    """The table's config for this device, dtype, GEMM and shape (the gathered SwiGLU GEMM
    "gate_up" and the row-ordered plain one "down"), else the default rule."""
    kind = {(True, True): "gate_up", (False, False): "down"}.get((swiglu, gather))
    if kind:
        tuned = configs.tuned_config(device_name(a.device), a.dtype, kind, w.shape[0],
                                     w.shape[1], w.shape[2], tile_m, rows_per_expert)
        if tuned is not None:
            return tuned
    return config_for(swiglu, block_m_for(tile_m), rows_per_expert)


def _descriptor_fits(t) -> bool:
    """Whether a tensor descriptor can view t's last two dims: unit last stride, row stride
    and start 16-byte aligned (caching-allocator blocks are 512-byte aligned; the offset
    is read from the view, never from a pointer, so fake tensors answer too)."""
    es = t.element_size()
    return (t.stride(-1) == 1 and t.stride(-2) * es % 16 == 0
            and t.storage_offset() * es % 16 == 0)


def tma_refusal(a, w, out, block_m, cfg, tokens) -> str:
    """Why the Hopper kernel cannot run this call ("" when it can)."""
    if LAUNCHER is wrap_triton and not _is_sm90_nvidia(a.device):
        return "the tma kernel needs an NVIDIA GPU of compute capability 9.0 or newer"
    if not (_descriptor_fits(w) and w.stride(0) == w.shape[1] * w.stride(1)):
        return ("the tma kernel views W [E, N, Kd] as [E*N, Kd]: it needs W's experts as "
                "contiguous rows of unit last stride and 16-byte aligned rows")
    if w.shape[0] * w.shape[1] >= 2 ** 31:
        return "the tma kernel's descriptor rows must stay below 2^31"
    if cfg.skip_padding and (tokens is None or block_m < 32):
        return "skip_padding needs the plan's tokens (sorted_token or row_token) and tile_m >= 32"
    return ""


def _descriptor_scratch(size: int, alignment: int, stream):
    """Triton's global scratch allocator: device memory for the descriptors the tma kernel
    builds (128 bytes each per program), from torch's caching allocator (stream-ordered, and
    inside a CUDA graph capture from the graph's pool)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


# How the ops launch their kernels: through wrap_triton, so torch.compile sees them. Under the
# Triton interpreter (TRITON_INTERPRET=1, CPU tests) triton.jit makes InterpretedFunctions,
# which wrap_triton refuses in torch 2.11 (seen on the H200 image), and nothing traces the
# interpreter anyway: the kernels are launched as they are.
LAUNCHER = (lambda kernel: kernel) if os.environ.get("TRITON_INTERPRET") == "1" else wrap_triton


try:  # griddepcontrol in Triton (3.3 on); without it no kernel lets the next start early
    from triton.language.extra.cuda import gdc_launch_dependents  # noqa: F401
    HAS_GDC = True
except ImportError:
    HAS_GDC = False


@functools.lru_cache(maxsize=None)
def _cuda_properties(index: int):
    """(name, compute capability major, multiprocessors) of a CUDA device, read once."""
    p = torch.cuda.get_device_properties(index)
    return p.name, p.major, p.multi_processor_count


def _cuda_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def _sm90_or_newer(index: int) -> bool:
    return _cuda_properties(index)[1] >= 9


def _is_sm90_nvidia(device: torch.device) -> bool:
    return (device.type == "cuda" and torch.version.hip is None
            and _sm90_or_newer(_cuda_index(device)))


def device_name(device: torch.device) -> str:
    """The name the config table is keyed by ("NVIDIA H200"); "cpu" off CUDA."""
    return _cuda_properties(_cuda_index(device))[0] if device.type == "cuda" else device.type


def multiprocessor_count(device: torch.device) -> int:
    """Programs per 'SM' of a persistent grid: the GPU's multiprocessors (4 for the
    interpreter on the CPU, so its loops run several blocks per program)."""
    return _cuda_properties(_cuda_index(device))[2] if device.type == "cuda" else 4


def lets_next_kernel_start(device: torch.device) -> bool:
    """Whether a kernel on this device may let the next one start early (topk_kernel.py):
    NVIDIA sm_90+ (not ROCm, whose MI300 also reports major 9), compiled (not the
    interpreter), with a Triton that has griddepcontrol."""
    if (device.type != "cuda" or torch.version.hip is not None or LAUNCHER is not wrap_triton
            or not HAS_GDC):
        return False
    return _sm90_or_newer(_cuda_index(device))


def triton_next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _run(a, w, tile_expert, meta, tile_m, sorted_token, zero_unused, swiglu, activation="silu",
         row_token=None):
    rows = _check(a, w, tile_expert, meta, tile_m, sorted_token, swiglu, row_token)
    activation_code(activation)
    n_out = w.shape[1] // 2 if swiglu else w.shape[1]
    out = a.new_empty((rows, n_out))
    if rows and n_out:
        launch_moe_mm(a, w, tile_expert, meta, tile_m, sorted_token, out, swiglu=swiglu,
                      zero_unused=zero_unused, activation=activation, launcher=LAUNCHER,
                      row_token=row_token)
    return out


@triton_op("argon::moe_mm_triton", mutates_args=())
def moe_mm_triton(a: torch.Tensor, w: torch.Tensor, tile_expert: torch.Tensor,
                  meta: torch.Tensor, tile_m: int, sorted_token: Optional[torch.Tensor] = None,
                  zero_unused: bool = True,
                  row_token: Optional[torch.Tensor] = None) -> torch.Tensor:
    return _run(a, w, tile_expert, meta, tile_m, sorted_token, zero_unused, swiglu=False,
                row_token=row_token)


@triton_op("argon::moe_gate_up_swiglu_triton", mutates_args=())
def moe_gate_up_swiglu_triton(a: torch.Tensor, w_gate_up: torch.Tensor,
                              tile_expert: torch.Tensor, meta: torch.Tensor, tile_m: int,
                              sorted_token: Optional[torch.Tensor] = None,
                              zero_unused: bool = True, activation: str = "silu") -> torch.Tensor:
    return _run(a, w_gate_up, tile_expert, meta, tile_m, sorted_token, zero_unused, swiglu=True,
                activation=activation)


@triton_op("argon::topk_triton", mutates_args=())
def topk_triton(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, indices) = torch.topk(scores, k, dim=-1) for [T, E] float scores, with the same
    tie order (see topk_kernel.py; rows holding NaN excepted). values keep scores' dtype."""
    if scores.dim() != 2 or not scores.is_floating_point():
        raise ValueError(f"topk_triton: scores must be a [T, E] float tensor, got {scores.dtype} "
                         f"of shape {tuple(scores.shape)}")
    T, E = scores.shape
    if not 0 < k <= E or E > 8192:
        raise ValueError(f"topk_triton: need 0 < k <= E <= 8192, got k={k}, E={E}")
    values = scores.new_empty((T, k))
    indices = scores.new_empty((T, k), dtype=torch.int64)
    if T:
        block_e = triton_next_pow2(E)
        block_t = max(1, min(16, 4096 // block_e))
        LAUNCHER(topk_rows_kernel)[(-(-T // block_t),)](
            scores, scores.stride(0), scores.stride(1), values, indices, T, E,
            K=k, BLOCK_T=block_t, BLOCK_E=block_e,
            LET_NEXT_START=lets_next_kernel_start(scores.device), num_warps=4)
    return values, indices


for _op in (moe_mm_triton, moe_gate_up_swiglu_triton, topk_triton):
    refuse_gradients(_op)
