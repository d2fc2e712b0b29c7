"""The Triton grouped GEMMs as torch ops (argon namespace), so torch.compile(fullgraph=True)
traces them and CUDA graphs capture them:

  argon::moe_mm_triton(a, w, tile_expert, meta, tile_m, sorted_token=None, zero_unused=True)
      C [R, N] = A[rows] @ W[e]^T over the plan's tiles. With sorted_token, `a` is x [T, Kd]
      and row r reads x[sorted_token[r]] (zeros where -1): moe_gather fused into the GEMM.
  argon::moe_gate_up_swiglu_triton(a, w_gate_up, tile_expert, meta, tile_m,
                                   sorted_token=None, zero_unused=True, activation="silu")
      h [R, I] = act(A @ W_gate^T) * (A @ W_up^T) with w_gate_up [E, 2I, Kd]: the gate/up
      GEMM and swiglu in one kernel (act: "silu", "gelu" or "gelu_tanh").
  argon::topk_triton(scores, k)
      torch.topk(scores, k, dim=-1) for router scores, same choice and order (topk_kernel.py).

R = sorted_token's length when given, else a's rows. zero_unused: write zeros into rows of
unused tiles (the moe_mm contract); False leaves them unwritten (the layer never reads them).
The fake (meta) impl is the function itself: torch.library.triton_op runs it on fake tensors,
where the kernel launch is a no-op.
"""
import functools
import os
from typing import Optional

import torch
from torch.library import triton_op, wrap_triton

from .._shapes import META_N_TILES
from .configs import MMConfig, block_m_for, config_for, mean_rows_per_expert
from .moe_mm_kernel import moe_mm_kernel
from .topk_kernel import topk_rows_kernel


def _check(a, w, tile_expert, meta, tile_m, sorted_token, swiglu):
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
    for name, t in (("tile_expert", tile_expert), ("meta", meta), ("sorted_token", sorted_token)):
        if t is not None and (t.dtype != torch.int32 or t.dim() != 1):
            raise ValueError(f"{op}: {name} must be a 1-D int32 tensor from moe_plan, got "
                             f"{t.dtype} of shape {tuple(t.shape)}")
    if meta.shape[0] < 4:
        raise ValueError(f"{op}: meta must hold moe_plan's 4 counters, got {meta.shape[0]}")
    for name, t in (("w", w), ("tile_expert", tile_expert), ("meta", meta),
                    ("sorted_token", sorted_token)):
        if t is not None and t.device != a.device:
            raise ValueError(f"{op}: {name} is on {t.device}, a on {a.device}")
    rows = sorted_token.shape[0] if sorted_token is not None else a.shape[0]
    if rows % tile_m or tile_expert.shape[0] != rows // tile_m:
        raise ValueError(f"{op}: {rows} rows do not make {tile_expert.shape[0]} tiles of "
                         f"{tile_m} (tile_expert)")
    return rows


ACTIVATIONS = {"silu": 0, "gelu": 1, "gelu_tanh": 2}  # the ARGON_ACT_* codes


def activation_code(activation: str) -> int:
    if activation not in ACTIVATIONS:
        raise ValueError(f'activation must be one of "silu", "gelu", "gelu_tanh", got '
                         f'"{activation}"')
    return ACTIVATIONS[activation]


def launch_moe_mm(a, w, tile_expert, meta, tile_m, sorted_token, out, *, swiglu,
                  zero_unused, activation="silu", config: Optional[MMConfig] = None,
                  block_m=None, launcher=None):
    """Launches the kernel into `out` [R, N]. config / block_m override the table (for the
    sweep). launcher wraps the kernel (wrap_triton inside the ops, nothing outside)."""
    block_m = block_m or block_m_for(tile_m)
    cfg = config or config_for(swiglu, block_m,
                               mean_rows_per_expert(out.shape[0], w.shape[0], tile_m))
    n_out = out.shape[1]
    kd = a.shape[1]
    block_k = min(cfg.block_k, max(16, triton_next_pow2(kd)))
    grid = (out.shape[0] // block_m * -(-n_out // cfg.block_n),)
    gather = sorted_token is not None
    kernel = (launcher or (lambda k: k))(moe_mm_kernel)
    kernel[grid](
        a, a.stride(0), a.stride(1),
        sorted_token if gather else tile_expert,  # any int32 tensor when unused
        w, w.stride(0), w.stride(1), w.stride(2),
        out, out.stride(0), out.stride(1),
        tile_expert, meta,
        n_out, kd, tile_m, w.shape[0], a.shape[0],
        META_N_TILES=META_N_TILES, GATHER=gather, SWIGLU=swiglu, ZERO_UNUSED=zero_unused,
        ACTIVATION=activation_code(activation),
        EVEN_K=kd % block_k == 0,
        BLOCK_M=block_m, BLOCK_N=cfg.block_n, BLOCK_K=block_k,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    return out


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
def _sm90_or_newer(index: int) -> bool:
    return torch.cuda.get_device_capability(index)[0] >= 9


def lets_next_kernel_start(device: torch.device) -> bool:
    """Whether a kernel on this device may let the next one start early (topk_kernel.py):
    NVIDIA sm_90+ (not ROCm, whose MI300 also reports major 9), compiled (not the
    interpreter), with a Triton that has griddepcontrol."""
    if (device.type != "cuda" or torch.version.hip is not None or LAUNCHER is not wrap_triton
            or not HAS_GDC):
        return False
    return _sm90_or_newer(device.index if device.index is not None
                          else torch.cuda.current_device())


def triton_next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _run(a, w, tile_expert, meta, tile_m, sorted_token, zero_unused, swiglu, activation="silu"):
    rows = _check(a, w, tile_expert, meta, tile_m, sorted_token, swiglu)
    activation_code(activation)
    n_out = w.shape[1] // 2 if swiglu else w.shape[1]
    out = a.new_empty((rows, n_out))
    if rows and n_out:
        launch_moe_mm(a, w, tile_expert, meta, tile_m, sorted_token, out, swiglu=swiglu,
                      zero_unused=zero_unused, activation=activation, launcher=LAUNCHER)
    return out


@triton_op("argon::moe_mm_triton", mutates_args=())
def moe_mm_triton(a: torch.Tensor, w: torch.Tensor, tile_expert: torch.Tensor,
                  meta: torch.Tensor, tile_m: int, sorted_token: Optional[torch.Tensor] = None,
                  zero_unused: bool = True) -> torch.Tensor:
    return _run(a, w, tile_expert, meta, tile_m, sorted_token, zero_unused, swiglu=False)


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
