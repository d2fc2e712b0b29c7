"""The gpuq kernels (torch_argon/csrc/gpuq) from Python: wrappers over the argon::gpuq_* ops
(csrc/gpuq/gpuq_ops.cpp has their schemas and contracts) and the ops' fakes, so that
torch.compile(fullgraph=True) traces them and torch.library.opcheck checks them.

Where they run: CUDA tensors (compute capability 8.0+) where torch_argon._C was built with
CUDA; CPU tensors through the host emulation of the same kernel source where torch_argon._C_test,
the test build, is loaded (CI). `refusal(device)` says why not elsewhere. The launches are
asynchronous on the current CUDA stream and take no host sync: CUDA graphs capture them.

  qmm(a, w_q, qtype, n_in, tile_expert, tile_m, *, meta=None, row_token=None, swiglu=False,
      activation="silu", activation_quant="none", zero_unused=True, out=None) -> [R, N]
  quantize_q8(x) -> (q int8 [R, n], d float32 [R, n / 32])
  dequantize(w_q, qtype, n_in, dtype=torch.bfloat16, out=None) -> [E, N, n_in]
  moe_qmm_out(xs, w_q, qtype, n_in, tile_expert, tile_m, activation_quant, out) -> bool
      the op table's moe_qmm_out where gpuq runs it (moe_qmm_out's CUDA kernel calls it:
      triton_ops/quant_ops.py)
"""

import torch

from .._kernels import cuda_capability, has_kernel
from ..quant.formats import FORMATS as ALL_FORMATS, qformat

# Every GGUF block format (the float types F32 / F16 / BF16 are dense weights, not gpuq's).
FORMATS = tuple(name for name, f in ALL_FORMATS.items() if not f.is_float)
ACTIVATIONS = ("silu", "gelu", "gelu_tanh")
MAX_ROWS_PER_WARP = 32  # 4 token blocks of 8 (csrc/gpuq/gpuq_kernel.h)


def _has_kernels(dispatch_key: str) -> bool:
    return has_kernel("argon::gpuq_qmm_out", dispatch_key)


def refusal(device) -> str:
    """"" where the gpuq kernels run on `device`, else why not."""
    device = torch.device(device)
    if device.type == "cuda":
        if not _has_kernels("CUDA"):
            return "torch_argon was built without CUDA (no gpuq kernels)"
        major, _ = cuda_capability(device)
        if major < 8:
            return "the gpuq kernels need compute capability 8.0 or newer (bf16 mma.sync)"
        return ""
    if device.type == "cpu":
        if not _has_kernels("CPU"):
            return ("the gpuq kernels run on CUDA; on the CPU only their host emulation, which "
                    "lives in torch_argon._C_test (a test build: ARGON_TEST_BUILD=1)")
        return ""
    return f"the gpuq kernels run on CUDA tensors, not {device.type}"


def _check_runs(device):
    if torch.compiler.is_compiling():
        return  # a trace runs the fakes; the kernels' own device check runs with them
    why = refusal(device)
    if why:
        raise NotImplementedError(why)


def qmm(a, w_q, qtype, n_in, tile_expert, tile_m, *, meta=None, row_token=None, swiglu=False,
        activation="silu", activation_quant="none", zero_unused=True, out=None):
    """out [R, N] = a[rows] @ dequantize(w_q[e])^T over the plan's tiles (argon::gpuq_qmm;
    qtype a GGUF name or type id). Writes into `out` where given (argon::gpuq_qmm_out)."""
    _check_runs(a.device)
    type_id = qformat(qtype).type_id
    if out is None:
        return torch.ops.argon.gpuq_qmm(a, w_q, type_id, n_in, tile_expert, tile_m, meta,
                                        row_token, swiglu, activation, activation_quant,
                                        zero_unused)
    torch.ops.argon.gpuq_qmm_out(a, w_q, type_id, n_in, tile_expert, tile_m, meta, row_token,
                                 swiglu, activation, activation_quant, zero_unused, out)
    return out


def quantize_q8(x):
    """(q int8 [R, n], d float32 [R, n / 32]) of x [R, n], bit for bit as
    torch_argon.quant.activation_q8.quantize_rows_q8 (argon::gpuq_quantize_q8)."""
    _check_runs(x.device)
    return torch.ops.argon.gpuq_quantize_q8(x)


def dequantize(w_q, qtype, n_in, dtype=torch.bfloat16, *, out=None):
    """[E, N, n_in] of dtype (bf16 / fp16): dequantize_reference(w_q) rounded once, bit for bit
    (argon::gpuq_dequantize); into `out` (any expert and row strides) where given."""
    _check_runs(w_q.device)
    type_id = qformat(qtype).type_id
    if out is None:
        return torch.ops.argon.gpuq_dequantize(w_q, type_id, n_in, dtype)
    torch.ops.argon.gpuq_dequantize_out(w_q, type_id, n_in, out)
    return out


def moe_qmm_out(xs, w_q, qtype, n_in, tile_expert, tile_m, activation_quant, out) -> bool:
    """The op table's moe_qmm_out (row-ordered xs [R, n_in], rows of unused tiles zero) on the
    gpuq kernels, for moe_qmm_out's CUDA kernel to call after the op's argument checks:
    True where gpuq ran it, False where the caller runs its own kernel (no gpuq kernels for this
    device; float32 xs without q8). activation_quant "q8" takes bf16 / fp16 / fp32 xs; "none"
    bf16 / fp16. Any power-of-two tile_m, every block format."""
    if refusal(xs.device):
        return False
    if xs.dtype not in (torch.bfloat16, torch.float16) and activation_quant != "q8":
        return False
    torch.ops.argon.gpuq_qmm_out(xs, w_q, qformat(qtype).type_id, n_in, tile_expert, tile_m,
                                 None, None, False, "silu", activation_quant, True, out)
    return True


# The margin over the mean rows per expert that the scaled path's tile is sized by. Measured on
# an H100 (bench/lab/gpuq_tile_m.py, bf16, mode "none"; bench/results/h100_gpuq_tile_m.json):
# the experts' rows spread around the mean, and an expert with more rows than tile_m takes two
# tiles and has its weights decoded twice; sizing the tile for 1.5x the mean chose the fastest
# tile_m at 21 of the 24 points (E=128/512, T=128/256/512, Q4_K IQ4_XS Q8_0 IQ2_XS), e.g. E=128
# T=128 (8 rows on the mean): 16 in place of 8, 0.78-0.90x the time; the misses within 10 %.
SCALED_TILE_MARGIN = 1.5


def scaled_tiles(dtype: torch.dtype, activation_quant: str) -> bool:
    """Whether the GEMMs' tiles of more than 8 tokens per warp take the scaled path (each weight
    rounded to the activations' bf16 once; csrc/gpuq/gpuq_kernel.h SCALED) for activations of
    this dtype in this mode: bf16 and "none"."""
    return dtype == torch.bfloat16 and activation_quant == "none"


def layer_tile_m(n_entries: int, n_expert: int, *, scaled: bool = False) -> int:
    """The plan's tile_m for the gpuq GEMMs (a warp then takes a whole tile: one decode of each
    weight per 8-32 tokens): the mean rows per expert rounded up to 8, 16 or 32; with `scaled`
    (scaled_tiles: the 16- and 32-token tiles take the scaled path) the mean times
    SCALED_TILE_MARGIN, measured faster there. Elsewhere (fp16, q8) the larger tiles
    run the exact path's per-group epilogue, not measured against the 8-token tile: the mean."""
    rows = n_entries / max(n_expert, 1) * (SCALED_TILE_MARGIN if scaled else 1.0)
    return 8 if rows <= 8 else 16 if rows <= 16 else 32


# ---- fakes: output shapes from the arguments' shapes alone ------------------------------------

@torch.library.register_fake("argon::gpuq_qmm")
def _qmm_fake(a, w_q, qtype, n_in, tile_expert, tile_m, meta=None, row_token=None, swiglu=False,
              activation="silu", activation_quant="none", zero_unused=True):
    n_out = w_q.shape[1] // 2 if swiglu else w_q.shape[1]
    return a.new_empty((tile_expert.shape[0] * tile_m, n_out))


@torch.library.register_fake("argon::gpuq_qmm_out")
def _qmm_out_fake(a, w_q, qtype, n_in, tile_expert, tile_m, meta, row_token, swiglu, activation,
                  activation_quant, zero_unused, out):
    return None


@torch.library.register_fake("argon::gpuq_quantize_q8")
def _quantize_q8_fake(x):
    return (x.new_empty(x.shape, dtype=torch.int8),
            x.new_empty((x.shape[0], x.shape[1] // 32), dtype=torch.float32))


@torch.library.register_fake("argon::gpuq_dequantize")
def _dequantize_fake(w_q, qtype, n_in, dtype):
    return w_q.new_empty((w_q.shape[0], w_q.shape[1], n_in), dtype=dtype)


@torch.library.register_fake("argon::gpuq_dequantize_out")
def _dequantize_out_fake(w_q, qtype, n_in, out):
    return None
