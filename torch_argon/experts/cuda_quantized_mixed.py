"""GGUF experts on Hopper GPUs (compute capability 9.0) through the mixed-input GEMM
(argon::hopper_mixed_mm, csrc/hopper/hopper_mixed_gemm.cuh): the GEMMs load 4- or 8-bit codes
and per-32-value scales and zeros and convert them to bf16 in registers, so no decoded weight
is written. The formats of 32-value affine groups take it (quant/mixed_repack.py FORMATS:
Q4_K, Q4_0, Q5_K, Q5_0, Q8_0, IQ4_NL, IQ4_XS). Per call: the flow's plan (tile_m 128, or 64
where both GEMMs run mixed and the experts hold few rows: default_tile_m) and gather (xs: every
expert's rows padded to whole tiles), the gate/up GEMM into [R, 2I], the
activation op (argon's swiglu), the down GEMM into y [R, H], then the flow's combine, as
cuda_hopper_padded runs its dense GEMMs (the same tile scheduler, the plan's tiles along the
transposed problem's N).

Per GEMM: a GEMM whose weights are in those formats (gate/up as one stack, or gate and up both,
of one code width; down) runs on the mixed-input GEMM; the other one, where its weights are
another GGUF block format (the "Q4_K_M" files of MoE models such as Qwen3-30B-A3B keep down in
Q6_K in many layers), is decoded to bf16 as cuda_quantized_dequant decodes it (gpuq.dequantize into
that path's workspace: cuda_quantized_dequant.decode_workspace and decode_gemm) and runs on
the dense padded Hopper GEMM (argon::hopper_padded_mm, cuda_hopper_padded's configurations:
configs.choose_padded) over the same plan and gathered rows. It declines where neither GEMM
is in those formats (cuda_quantized_dequant runs those) and where a part is stored as plain
floats.

Why: cuda_quantized_dequant decodes every expert to bf16 on each call (E * 3 * H * I values
written and read back: 1.2 GB in bf16 at E=128 H=2048 I=768, about 0.88 ms on an H100) before
dense GEMMs; this path reads the repacked weights instead (5 bits a value: 0.38 GB there)
inside the GEMMs (bench/quant_mixed_notes.md: the arithmetic and the measurements). Where
only gate/up runs mixed, only its 2/3 of that decode pass is saved.

The weights are repacked once per stack (torch_argon/quant/mixed_repack.py; gate and up
concatenated along N where they are two parts) at the first call that runs them, and kept beside
them (CACHE, a derived_cache.DerivedCache: per stack and view, repacked after an in-place
change or a replaced .data, into the same buffers, which a captured CUDA graph reads). The repack costs 5 bits per value of device memory for the 4-bit
formats (Q4_K's GGUF bytes are 4.5: 0.38 GB for E=128 H=2048 I=768 per layer), 9 for the 8-bit
ones (IQ4_XS's are 4.25, Q8_0's 8.5).
A decoded GEMM takes cuda_quantized_dequant's workspace for its weights only (down:
E * H * I bf16 values, 0.4 GB there; the buffer that path uses, shared by every layer; fresh
tensors under torch.compile tracing, CUDA graph capture and autograd).

Numerics: each weight is bf16(u * s + z) with s and z rounded to bf16 once (4-bit codes: the
exact u * s + z rounded once; 8-bit: in float32, then to bf16; mixed_repack.mixed_dequantize,
at most 2^-8 of max(u) |s| + |z| + |w| from the exact value), then
fp32 accumulation: the scaled path's tolerance (tests/gpuq_cases.py SCALED_TOL). A decoded
GEMM's weights are dequantize_reference's rounded to bf16 once, then fp32 accumulation.

Status: the kernel that read the codes row-major ran on an H100 (2026-12-06: the 234 tests of
its file passed, every format; bench/results/h100_quant_mixed.json and
h100_quant_mixed_formats.json). Its codes are now reordered (a thread's codes of a K block in
one shared-memory load; 4-bit codes converted as bf16x2), built and checked on the host, not yet
run on a GPU: until its GPU tests pass (experts/quantized_crossover.py
MIXED_KERNEL_PASSED_GPU_TESTS), path="auto" (and the "triton" family) pass it by;
path="cuda_quantized_mixed" runs it wherever it can run. Once they pass, the automatic choice
takes it on every compute capability 9.0 GPU from the rows per expert where it measured faster
than gpuq's GEMMs and the dequant path (MIXED_FROM_ROWS: 10-24 with both GEMMs in one format,
40-48 with down decoded), below them, at an unknown count of rows and for the splits without a
row declining it.
"""

import torch

from .. import gpuq
from ..hopper import configs as hopper_configs
from ..hopper import mixed_ops
from ..quant import mixed_repack
from . import cuda_hopper_dense as dense
from . import cuda_quantized_dequant as dequant
from .base import Experts, fused_call_refusal
from .cuda_hopper_padded import CudaHopperPadded
from .derived_cache import DerivedCache
from .ops_quantized import float_parts
from . import quantized_crossover
from .quantized_crossover import MIXED_DECODED, below_rows, mixed_from_rows

_PADDED = CudaHopperPadded()  # its configurations and GEMM for the decoded weights


def repack_parts(parts):
    """One GEMM's parts repacked (gate and up concatenated along N)."""
    packed = [mixed_repack.repack(p.data, p.qtype.name, p.n_in) for p in parts]
    return packed[0] if len(packed) == 1 else mixed_repack.concat_n(*packed)


# The repacked weights per GEMM (derived_cache's doc: per weights view, repacked after an
# in-place change or a replaced .data, into the same buffers; gate and up held as two parts are
# concatenated once, not at every call)
CACHE = DerivedCache()


def _part_tensors(parts):
    return tuple(p.data for p in parts)


def has_repacked(parts) -> bool:
    return CACHE.has(_part_tensors(parts))


def cached_repack(parts):
    """The MixedWeights of a GEMM's parts (one, or gate and up), repacked at the first call."""
    tensors = _part_tensors(parts)
    if (not CACHE.has(tensors) and torch.cuda.is_available()
            and torch.cuda.is_current_stream_capturing()):
        raise RuntimeError(
            "cuda_quantized_mixed: the experts' weights are repacked at their first call, "
            "which cannot run inside a CUDA graph capture (it copies tables to the device "
            "and allocates); run the layer once before capturing")
    return CACHE.get(tensors, lambda: repack_parts(parts))


def repacked(w, role):
    """The MixedWeights of GEMM `role` ("gate_up" or "down") of QuantizedExperts `w` (its
    parts in mixed_repack.FORMATS), from the cache; under torch.compile tracing repacked in the
    graph instead (the cache, Python objects and a lock, is not traceable: a compiled call then
    repacks at every call, which is why the automatic choice declines this path there)."""
    parts = list(gemm_parts(w, role).values())
    return repack_parts(parts) if torch.compiler.is_compiling() else cached_repack(parts)


ROLES = ("gate_up", "down")


def gemm_parts(w, role):
    """The parts of QuantizedExperts `w` that GEMM `role` multiplies by."""
    if role == "down":
        return {"down": w.down}
    return {"gate_up": w.gate_up} if w.fused else {"gate": w.gate, "up": w.up}


def mixed_gemms(w) -> tuple:
    """The GEMMs of `w` ("gate_up", "down") that the mixed-input GEMM runs: their parts in
    formats it takes, of one code width (gate and up repacked into one stack); the others are
    decoded."""
    def runs_mixed(parts):
        bits = {mixed_repack.code_bits(p.qtype.name) for p in parts}
        return len(bits) == 1 and 0 not in bits
    return tuple(role for role in ROLES if runs_mixed(gemm_parts(w, role).values()))


def token_tiles(w) -> tuple:
    """The plans' tile_m a call on `w` can run: the mixed-input GEMM's token tiles where both
    GEMMs run on it, else 128 (the padded dense GEMM's M tile, for the decoded one)."""
    if len(mixed_gemms(w)) == len(ROLES):
        return mixed_ops.TOKEN_TILES
    return (hopper_configs.PADDED_TILE_M,)


def formats(w) -> str:
    """The formats of w's parts in words: "gate_up Q4_K, down Q6_K"."""
    return ", ".join(f"{name} {p.qtype.name}" for name, p in w.parts().items())


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
        floats = float_parts(w)
        if floats:
            return (f"{', '.join(floats)} stored as plain floats ({formats(w)}): it runs "
                    "GGUF blocks and decodes the formats it cannot convert only")
        mixed = mixed_gemms(w)
        if not mixed:
            return (f"neither GEMM's weights are in a format it converts ({formats(w)}): the "
                    f"mixed-input GEMM takes {', '.join(mixed_repack.FORMATS)} (gate/up, with "
                    "gate and up of one code width where they are two parts, or down at least, "
                    "the other decoded); cuda_quantized_dequant decodes both")
        if len(mixed) < len(ROLES):
            why = gpuq.refusal(x.device)
            if why:
                return (f"{why}: the other GEMM's weights ({formats(w)}) are decoded by gpuq")
        for role in mixed:
            for name, p in gemm_parts(w, role).items():
                if p.n_in % mixed_repack.K_TILE or p.n_out % mixed_repack.N_ALIGN:
                    return (f"{name} is [{p.n_out}, {p.n_in}]: the mixed-input GEMM needs K a "
                            f"multiple of {mixed_repack.K_TILE} and N of "
                            f"{mixed_repack.N_ALIGN}")
        # every GGUF block format has K (its n_in) a multiple of 32, so H and I are: what the
        # decoded GEMM's padded dense GEMM needs of K and N
        if call.tile_m is not None and call.tile_m not in token_tiles(w):
            if len(mixed) < len(ROLES):
                decoded = next(r for r in ROLES if r not in mixed)
                return (f"tile_m={call.tile_m}: with {decoded} decoded onto the padded dense "
                        f"GEMM the plan's tile_m is {hopper_configs.PADDED_TILE_M} (that GEMM's "
                        "M tile)")
            return (f"tile_m={call.tile_m}: the mixed-input GEMM runs plans of tile_m "
                    f"{' or '.join(map(str, mixed_ops.TOKEN_TILES))} (its token tile)")
        return ""

    def auto_refusal(self, call):
        if torch.compiler.is_compiling():
            return ("under torch.compile tracing the repacked weights' cache cannot be read: "
                    "the graph would repack the experts at every call; "
                    "path='cuda_quantized_mixed' runs it so")
        w = call.weights
        if (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
                and not all(has_repacked(list(gemm_parts(w, role).values()))
                            for role in mixed_gemms(w))):
            return ("inside a CUDA graph capture before the weights' first call: their repack "
                    "cannot be captured (run the layer once before capturing)")
        if not quantized_crossover.MIXED_KERNEL_PASSED_GPU_TESTS:
            return ("its kernel as built (the reordered codes) has not yet passed its GPU tests "
                    "(experts/quantized_crossover.py MIXED_KERNEL_PASSED_GPU_TESTS): "
                    "path='cuda_quantized_mixed' runs it")
        split = self.gemm_split(call.weights)
        described = ", ".join(f"{role} {how}" for role, how in zip(ROLES, split))
        start = mixed_from_rows(*split)
        if start is None:
            return (f"not measured with {described} (experts/quantized_crossover.py "
                    "MIXED_FROM_ROWS has no row for it): path='cuda_quantized_mixed' runs it")
        return below_rows(call, start, f"with {described} it runs from {start}, where it "
                          "measured faster than gpuq's GEMMs (experts/quantized_crossover.py)")

    def gemm_split(self, w) -> tuple:
        """How each GEMM of `w` runs ((gate/up, down): the format the mixed-input GEMM reads,
        or MIXED_DECODED): the key of experts/quantized_crossover.py MIXED_FROM_ROWS."""
        mixed = mixed_gemms(w)
        return tuple("+".join(sorted({p.qtype.name for p in gemm_parts(w, role).values()}))
                     if role in mixed else MIXED_DECODED for role in ROLES)

    def auto_from_rows(self, w):
        """The rows per expert from which the automatic choice takes this path for `w`, or
        None where its split has no measured row."""
        return mixed_from_rows(*self.gemm_split(w))

    def default_tile_m(self, call, n_entries):
        """The GEMM's token tile (every tile holds one expert's rows): 64 where both GEMMs run
        mixed and the experts hold at most quantized_crossover.MIXED_TOKEN_TILE_64_UP_TO_ROWS
        rows on average, once that tile is timed (MIXED_TOKEN_TILE_64_MEASURED); else 128 (an
        unknown count of rows, a GEMM decoded onto the padded dense GEMM)."""
        w = call.weights
        if (n_entries is None or token_tiles(w) == (hopper_configs.PADDED_TILE_M,)
                or not quantized_crossover.MIXED_TOKEN_TILE_64_MEASURED):
            return hopper_configs.PADDED_TILE_M
        rows = n_entries / max(w.n_experts, 1)
        return 64 if rows <= quantized_crossover.MIXED_TOKEN_TILE_64_UP_TO_ROWS else 128

    def workspace(self, call, rows):
        """Buffers for the decoded weights of the GEMMs that do not run mixed (none where both
        do): cuda_quantized_dequant's (shared across calls and layers, or fresh where they
        must outlive the call)."""
        mixed = mixed_gemms(call.weights)
        return dequant.decode_workspace(call, [r for r in ROLES if r not in mixed])

    def apply(self, call, x, xs, plan, workspace):
        w = call.weights
        mixed = mixed_gemms(w)
        # the op takes its token tile from the shapes (rows per tile of tile_expert): a plan of
        # another tile_m than the rows it was gathered with would run the wrong tile silently
        if (plan.tile_m not in token_tiles(w)
                or xs.shape[0] != plan.tile_m * plan.tile_expert.shape[0]):
            raise RuntimeError(
                f"cuda_quantized_mixed: a plan of tile_m {plan.tile_m} with "
                f"{plan.tile_expert.shape[0]} tiles for {xs.shape[0]} gathered rows (tile_m "
                f"{' or '.join(map(str, token_tiles(w)))} for these weights)")
        configs = {}
        if len(mixed) < len(ROLES):  # the padded GEMM's configurations for the decoded one
            rows = plan.pos.numel() / max(w.n_experts, 1)  # mean entries per expert
            configs = dict(zip(ROLES, _PADDED.choose_configs(
                rows, dense.device_name(x.device), dense.dtype_name(x.dtype))))

        def gemm(a, role, n):
            out = a.new_empty((a.shape[0], n))
            if role in mixed:
                return mixed_ops.mixed_mm(a, repacked(w, role), plan.tile_expert, plan.meta,
                                          out=out)
            dequant.decode_gemm(w, role, workspace[role])
            return _PADDED.gemm(a, workspace[role], plan, configs[role], out)

        gu = gemm(xs, "gate_up", 2 * w.inter)
        h = call.ops.swiglu(gu, activation=call.activation)
        return gemm(h, "down", w.hidden)
