"""Q4_K experts on Hopper GPUs (compute capability 9.0) through the mixed-input GEMM
(argon::hopper_mixed_q4k_mm, csrc/hopper/hopper_mixed_q4k_gemm.cuh): the GEMMs load 4-bit codes
and per-32-value scales and zeros and convert them to bf16 in registers, so no decoded weight
is written. Per call: the flow's plan (tile_m 128) and gather (xs: every expert's rows padded to
whole tiles), the gate/up GEMM into [R, 2I], the activation op (argon's swiglu), the down GEMM
into y [R, H], then the flow's combine, as cuda_hopper_padded runs its dense GEMMs (the same
tile scheduler, the plan's tiles along the transposed problem's N).

Why: cuda_quantized_dequant decodes every expert to bf16 on each call (E * 3 * H * I values
written and read back: 1.2 GB in bf16 at E=128 H=2048 I=768, about 0.88 ms on an H100) before
dense GEMMs; this path reads the repacked weights instead (5 bits a value: 0.38 GB there)
inside the GEMMs (bench/quant_mixed_notes.md: the arithmetic and what is not yet known).

The weights are repacked once per Q4_K stack (torch_argon/quant/mixed_repack.py; gate and up
concatenated along N where they are two parts) at the first call that runs them, and kept beside
them: a cache keyed by the stack's byte tensor (weakly: freed with it) and its version counter
(an in-place change repacks). The repack costs 5 bits per value of device memory beside the
GGUF bytes' 4.5 (0.38 GB for E=128 H=2048 I=768 per layer).

Numerics: each weight is bf16(q * s + z) with s and z rounded to bf16 once
(mixed_repack.mixed_dequantize, at most 2^-8 of 15 |s| + |z| + |w| from the exact value), then
fp32 accumulation: the scaled path's tolerance (tests/gpuq_cases.py SCALED_TOL).

Status: compile-checked for sm_90a, NOT YET RUN ON A GPU. By name only: path="auto" (and the
"triton" family) decline it ("not yet measured on a GPU"); path="cuda_quantized_mixed" runs it
where it can run.
"""
import threading

import torch
from torch.utils.weak import WeakIdKeyDictionary

from ..hopper import configs as hopper_configs
from ..hopper import mixed_ops
from ..quant import mixed_repack
from .base import Experts, fused_call_refusal

NOT_MEASURED = ("not yet measured on a GPU: the Q4_K mixed-input Hopper GEMM is compile-checked "
                "only (bench/quant_mixed_notes.md); path='cuda_quantized_mixed' runs it")


def _version(t):
    """t's version counter, or None for an inference tensor (it has none, and cannot change
    outside inference mode, so its entry never goes stale)."""
    return None if t.is_inference() else t._version


class _RepackCache:
    """The repacked weights per QuantizedWeight byte tensor, or per (gate, up) pair of them
    where the two are separate parts (concatenated along N once, not at every call): weak keys
    (an entry goes with its first tensor), with the tensors' versions (an in-place change
    repacks)."""

    def __init__(self):
        self.entries = WeakIdKeyDictionary()
        self.lock = threading.Lock()

    def _cached(self, key, versions, make):
        with self.lock:
            hit = self.entries.get(key)
            if hit is not None and hit[0] == versions:
                return hit[1]
        value = make()
        with self.lock:
            self.entries[key] = (versions, value)
        return value

    def get(self, part):
        data = part.data
        return self._cached(data, (_version(data),),
                            lambda: mixed_repack.repack_q4k(data, part.n_in))

    def get_pair(self, gate, up):
        """gate and up repacked and concatenated along N; keyed by gate's bytes, checked
        against both tensors' identities and versions."""
        versions = (id(up.data), _version(gate.data), _version(up.data))
        return self._cached(gate.data, versions,
                            lambda: mixed_repack.concat_n(
                                mixed_repack.repack_q4k(gate.data, gate.n_in),
                                mixed_repack.repack_q4k(up.data, up.n_in)))


CACHE = _RepackCache()


def repacked_experts(w):
    """(gate_up, down) MixedQ4K of QuantizedExperts `w` (all Q4_K), from the cache."""
    gate_up = CACHE.get(w.gate_up) if w.fused else CACHE.get_pair(w.gate, w.up)
    return gate_up, CACHE.get(w.down)


class CudaQuantizedMixed(Experts):
    name = "cuda_quantized_mixed"
    path = "triton"
    kind = "quantized"
    fuses_gather = False
    activation_quant = ("none",)

    def supports(self, call):
        x, w = call.x, call.weights
        why = mixed_ops.refusal(x.device) or fused_call_refusal(call)
        if why:
            return why
        if x.dtype != torch.bfloat16:
            return f"the mixed-input GEMM runs bf16 activations, got {x.dtype}"
        names = sorted({p.qtype.name for p in w.parts().values()})
        if names != ["Q4_K"]:
            return f"the mixed-input GEMM runs Q4_K weights only, these are {', '.join(names)}"
        # Q4_K stacks have H and I multiples of 256 (their n_in), what the GEMM needs of K and N
        if call.tile_m is not None and call.tile_m != hopper_configs.PADDED_TILE_M:
            return (f"tile_m={call.tile_m}: the mixed-input GEMM runs plans of tile_m "
                    f"{hopper_configs.PADDED_TILE_M} (its N tile)")
        return ""

    def auto_refusal(self, call):
        return NOT_MEASURED

    def default_tile_m(self, call, n_entries):
        """128: the GEMM's tile along the plan's rows, so that every tile holds one expert."""
        return hopper_configs.PADDED_TILE_M

    def apply(self, call, x, xs, plan, workspace):
        w = call.weights
        gate_up, down = repacked_experts(w)
        R = xs.shape[0]
        gu = xs.new_empty((R, 2 * w.inter))
        mixed_ops.mixed_q4k_mm(xs, gate_up, plan.tile_expert, plan.meta, out=gu)
        h = call.ops.swiglu(gu, activation=call.activation)
        y = xs.new_empty((R, w.hidden))
        return mixed_ops.mixed_q4k_mm(h, down, plan.tile_expert, plan.meta, out=y)
