"""Dense experts on the CPU with their intermediates (gathered rows, gate/up, SwiGLU and down
outputs) in buffers kept from one layer call to the next, one set per Python thread: the same
ops as ops_dense.py, written into those buffers through the ops' out= forms.

Why: at T*K = 16384 rows each intermediate is 8 to 64 MB, above glibc's largest mmap threshold
(32 MB), so a fresh tensor is fresh pages on every call: the kernel zeroes and maps them (page
faults) before our kernels write a byte. Measured (bench/cpu_experts_notes.md): the gather into
a fresh tensor takes 4-5x as long as into a reused one, and the layer at T = 2048 about 1.2x as
long. A per-expert loop allocates a few small tensors per expert that malloc recycles, so it
never pays this. None of these buffers leaves the layer (the combine writes a fresh output), so
reusing them is invisible to the caller; they hold the largest shapes seen until
clear_cpu_workspace().
"""
import math
import threading

import torch

from .base import Experts, ops_tile_m, runs_argon_library


class _Buffers(threading.local):
    """The calling thread's buffers, by (role, dtype, inference mode)."""

    def __init__(self):
        self.buffers = {}

    def buffer(self, role, shape, dtype):
        numel = math.prod(shape)
        key = (role, dtype, torch.is_inference_mode_enabled())  # inference tensors stay inside
        buf = self.buffers.get(key)
        if buf is None or buf.numel() < numel:
            self.buffers[key] = None  # free the old one before taking the new
            buf = self.buffers[key] = torch.empty(numel, dtype=dtype)
        return buf[:numel].view(shape)


BUFFERS = _Buffers()


def clear_cpu_workspace():
    """Free the calling thread's CPU layer buffers (they are taken again on the next call)."""
    BUFFERS.buffers.clear()


class CpuWorkspace(Experts):
    name = "cpu_workspace"
    path = "ops"
    kind = "dense"

    def supports(self, call):
        if call.x.device.type != "cpu":
            return "its buffers live in CPU memory"
        if not runs_argon_library(call.ops):
            return "an OpSet other than the argon library was passed (it gets fresh tensors)"
        if torch.compiler.is_compiling():
            return "torch.compile is tracing (a traced graph allocates its own intermediates)"
        if call.records_grad:
            return "autograd records this call (its intermediates must not be overwritten)"
        return ""

    def default_tile_m(self, call, n_entries):
        return ops_tile_m(call.x.device)

    def workspace(self, call, rows):
        w, dtype = call.weights, call.x.dtype
        return {"xs": BUFFERS.buffer("xs", (rows, w.hidden), dtype),
                "gate_up": BUFFERS.buffer("gate_up", (rows, 2 * w.inter), dtype),
                "h": BUFFERS.buffer("h", (rows, w.inter), dtype),
                "y": BUFFERS.buffer("y", (rows, w.hidden), dtype)}

    def apply(self, call, x, xs, plan, workspace):
        ops, w = call.ops, call.weights
        gate_up = ops.moe_mm(xs, w.gate_up, plan, out=workspace["gate_up"])
        h = ops.swiglu(gate_up, activation=call.activation, out=workspace["h"])
        return ops.moe_mm(h, w.down, plan, out=workspace["y"])
