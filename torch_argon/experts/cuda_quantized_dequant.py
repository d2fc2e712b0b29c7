"""Quantized experts on CUDA at large T: each layer call decodes the experts' GGUF blocks to the
activations' dtype once (the gpuq decode, csrc/gpuq/gpuq_decode.h: 16-byte stores, bit for bit
dequantize_reference rounded once) into a workspace kept across calls, then runs dense GEMMs on
it: cuda_hopper_padded's where the layer's automatic choice takes that path for dense weights of
the call's shape (its tuned table: on the H100 in bf16 above 320 rows per expert, where it
measured 0.81-0.88x triton_dense's time), else triton_dense's (the gather and the activation
fused into gate/up).

Why: gpuq's GEMMs (cuda_quantized) and the Triton quantized GEMM decode every weight once per
32 rows of a tile, so from a few dozen rows per expert the decoding outweighs the GEMMs; here
it costs one pass over the weights per call (E * 3 * H * I values written: 1.2 GB for
Qwen3-30B-A3B's E=128 H=2048 I=768, about 0.3-0.4 ms on an H200), after which the GEMMs run at
the dense rate. It declines below the rows per expert of experts/quantized_crossover.py, where
cuda_quantized is faster.

Numerics: each weight is rounded to the activations' dtype once (as the Triton quantized path
and gpuq's scaled path round it), then the dense GEMMs accumulate in fp32: the Triton quantized
path's tolerance (1.5e-2 relative in bf16, tests/test_cuda_quantized.py).

Memory: the workspace holds one layer's experts decoded, E * 3 * H * I values of the
activations' dtype (in bf16: 1.2 GB for E=128 H=2048 I=768, 3.2 GB for E=512 H=2048 I=512), the
largest layer seen,
per (device, dtype, CUDA stream), shared by every layer of a model (each call overwrites it),
until clear_cuda_dequant_workspace(). Calls whose decoded weights must outlive the call get
fresh tensors instead: torch.compile tracing (a traced graph allocates its own), CUDA graph
capture (the graph's pool owns them) and calls autograd records (the GEMMs' backward may keep
the weights). On the padded GEMMs the call also gathers its rows, [R, H] in x's dtype with R the
plan's rows (padded to whole 128-row tiles), allocated per call as cuda_hopper_padded's own
gather is.
"""
import dataclasses
import threading

import torch

from .. import gpuq
from ..weights import DenseExperts
from .base import Experts
from .cuda_hopper_padded import CudaHopperPadded
from .ops_quantized import float_parts
from .quantized_crossover import dequant_from_rows
from .triton_dense import HALF_DTYPES, TritonDense, triton_refusal

_TRITON = TritonDense()
_PADDED = CudaHopperPadded()
# Its stacks are this path's workspace, decoded in place at every call (and shared by layers):
# the fused activation's interleaved copy, cached per stack, would be made again at every call
# or go stale unseen, so this instance keeps the unfused gate/up stages.
_PADDED.fuses_activation = False


def dense_gemms(call) -> Experts:
    """The dense implementation that runs the decoded experts of `call`: cuda_hopper_padded
    where it supports dense weights of the call's shape and dtype and its automatic choice takes
    them (hopper/configs.py PADDED_MEASURED), else triton_dense. Decided from shapes only
    (stand-in stacks on the meta device), so default_tile_m and apply agree."""
    w = call.weights
    E, H, I = w.n_experts, w.hidden, w.inter
    stand_in = DenseExperts(torch.empty((E, 2 * I, H), device="meta", dtype=call.x.dtype),
                            torch.empty((E, H, I), device="meta", dtype=call.x.dtype))
    dense_call = dataclasses.replace(call, weights=stand_in)
    if not _PADDED.supports(dense_call) and not _PADDED.auto_refusal(dense_call):
        return _PADDED
    return _TRITON


class _Workspace:
    """The decoded weights' buffers, by (role, dtype, device, stream, inference mode): each the
    largest seen, until cleared."""

    def __init__(self):
        self.buffers = {}
        self.lock = threading.Lock()

    def buffer(self, role, shape, dtype, device):
        numel = shape[0] * shape[1] * shape[2]
        stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
        key = (role, dtype, device, stream, torch.is_inference_mode_enabled())
        with self.lock:
            buf = self.buffers.get(key)
            if buf is None or buf.numel() < numel:
                self.buffers[key] = None  # free the old one before taking the new
                buf = self.buffers[key] = torch.empty(numel, dtype=dtype, device=device)
        return buf[:numel].view(shape)


WORKSPACE = _Workspace()


def clear_cuda_dequant_workspace():
    """Free the decoded-experts workspace of cuda_quantized_dequant (every device, dtype and
    stream); the next call takes it again."""
    with WORKSPACE.lock:
        WORKSPACE.buffers.clear()


def _must_be_fresh(call) -> bool:
    """Whether the decoded weights must outlive the call (see the module doc)."""
    x = call.x
    return (torch.compiler.is_compiling()
            or (x.device.type == "cuda" and torch.cuda.is_current_stream_capturing())
            or (torch.is_grad_enabled() and x.requires_grad))


def decode_workspace(call, roles) -> dict:
    """{role: buffer} for the decoded weights of the GEMMs `roles` ("gate_up": [E, 2I, H],
    "down": [E, H, I]) in x's dtype: fresh tensors where they must outlive the call
    (_must_be_fresh), else WORKSPACE's shared buffers. cuda_quantized_mixed takes only the
    GEMMs it decodes."""
    w, dtype, device = call.weights, call.x.dtype, call.x.device
    E, H, I = w.n_experts, w.hidden, w.inter
    shapes = {"gate_up": (E, 2 * I, H), "down": (E, H, I)}
    if _must_be_fresh(call):
        return {role: torch.empty(shapes[role], dtype=dtype, device=device) for role in roles}
    return {role: WORKSPACE.buffer(role, shapes[role], dtype, device) for role in roles}


def decode_gemm(w, role, out):
    """The gpuq decode of GEMM `role` of QuantizedExperts `w` into `out` (decode_workspace's
    buffer): "gate_up" (one stack, or gate into the first I rows and up into the others) or
    "down"."""
    def decode(part, dst):
        gpuq.dequantize(part.data, part.qtype.type_id, part.n_in, out=dst)

    if role == "down":
        decode(w.down, out)
    elif w.fused:
        decode(w.gate_up, out)
    else:
        decode(w.gate, out[:, :w.inter])
        decode(w.up, out[:, w.inter:])


class CudaQuantizedDequant(Experts):
    name = "cuda_quantized_dequant"
    path = "triton"
    kind = "quantized"
    fuses_gather = True
    activation_quant = ("none",)

    def supports(self, call):
        why = triton_refusal(call) or gpuq.refusal(call.x.device)
        if why:
            return why
        if call.x.dtype not in HALF_DTYPES:
            return "the decoded experts' dense GEMMs need fp16 / bf16 activations"
        floats = float_parts(call.weights)
        if floats:
            return f"{', '.join(floats)} stored as plain floats: it decodes quantized blocks only"
        rows, start = call.rows_per_expert(), dequant_from_rows(call.weights)
        if rows is not None and rows < start:
            return (f"{rows:.3g} rows per expert: below {start}, gpuq's GEMMs on the GGUF bytes "
                    "are faster (experts/quantized_crossover.py)")
        return ""

    def default_tile_m(self, call, n_entries):
        return dense_gemms(call).default_tile_m(call, n_entries)

    def workspace(self, call, rows):
        return decode_workspace(call, ("gate_up", "down"))

    def apply(self, call, x, xs, plan, workspace):
        w = call.weights
        gate_up, down = workspace["gate_up"], workspace["down"]
        decode_gemm(w, "gate_up", gate_up)
        decode_gemm(w, "down", down)
        dense = dense_gemms(call)
        dense_call = dataclasses.replace(call, weights=DenseExperts(gate_up, down))
        # this class gathers nothing before apply (fuses_gather: triton_dense's GEMMs read the
        # rows of x); the padded GEMM reads gathered rows
        xs = None if dense.fuses_gather else call.ops.moe_gather(x, plan)
        return dense.apply(dense_call, x, xs, plan, {})
