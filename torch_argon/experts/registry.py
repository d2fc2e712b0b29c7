"""The Experts implementations, in the order the layer tries them, and the choice among them.

path="auto" takes the first implementation that supports the call; path="triton" or "ops" the
first of that family; path=<name> that implementation. Each one says why it declines
(`explain`), so a caller (the main job, a user wondering why a call is slow) can see the
decision. The order puts the fused GPU kernels first (the Hopper GEMMs, the padded-plan one
before the ptr-array one, before the Triton ones they are meant to beat on sm_90, which run
where they decline), then the CPU's buffer-reusing path, then the one-op-per-stage fallbacks
that run anywhere. Among the quantized GPU ones: gpuq's GEMMs on the GGUF bytes (small T), the
tile-decode GEMM (large T; by name only: measured slower than the decode-once path), the
mixed-input Hopper GEMM (sm_90, the formats of 32-value groups from a few dozen rows per
expert), the decode-once path (large T, the other formats), then the Triton quantized GEMM
where none of them runs. They split by rows per expert (experts/quantized_crossover.py): gpuq's
GEMMs decline from the mixed GEMM's rows where it runs the call and from the decode-once path's
where that one does; the mixed GEMM comes before the decode-once path: from its rows on it
measured faster than that path at every point but a few level ones.
"""
from .base import ExpertsCall
from .cpu_workspace import CpuWorkspace
from .cuda_hopper_dense import CudaHopperDense
from .cuda_hopper_padded import CudaHopperPadded
from .cuda_quantized import CudaQuantized
from .cuda_quantized_dequant import CudaQuantizedDequant
from .cuda_quantized_mixed import CudaQuantizedMixed
from .cuda_quantized_tiled import CudaQuantizedTiled
from .ops_dense import OpsDense
from .ops_quantized import OpsQuantized
from .triton_dense import TritonDense
from .triton_quantized import TritonQuantized

# One line per implementation (docs/experts.md: adding one).
IMPLEMENTATIONS = (
    CudaHopperPadded(),
    CudaHopperDense(),
    TritonDense(),
    CudaQuantized(),
    CudaQuantizedTiled(),
    CudaQuantizedMixed(),
    CudaQuantizedDequant(),
    TritonQuantized(),
    CpuWorkspace(),
    OpsDense(),
    OpsQuantized(),
)

BY_NAME = {impl.name: impl for impl in IMPLEMENTATIONS}
FAMILIES = ("auto", "triton", "ops")
PATHS = FAMILIES + tuple(BY_NAME)


def refusal(impl, call: ExpertsCall, path="auto") -> str:
    """Why `impl` does not run `call` ("" when it does): the weights' kind and the
    activation_quant mode, checked here for every implementation, then its own supports(), and
    where the layer chooses (path "auto" or a family, not the implementation's name) its
    auto_refusal()."""
    kind = call.weights.kind
    if kind != impl.kind:
        return f"it runs {impl.kind} experts, these are {kind}"
    mode = call.activation_quant
    if mode != "auto" and mode not in impl.activation_quant:
        return (f"activation_quant={mode!r}: it runs "
                f"{' / '.join(repr(m) for m in impl.activation_quant)} only")
    why = impl.supports(call)
    if not why and path in FAMILIES:
        why = impl.auto_refusal(call)
    return why


def candidates(path):
    """The implementations `path` lets the layer choose from, in registry order."""
    if path == "auto":
        return IMPLEMENTATIONS
    if path in FAMILIES:
        return tuple(impl for impl in IMPLEMENTATIONS if impl.path == path)
    if path in BY_NAME:
        return (BY_NAME[path],)
    raise ValueError(f"path must be one of {PATHS}, got {path!r}")


def choose_with_reasons(call: ExpertsCall, path="auto"):
    """(implementation, declined): the first of `path`'s candidates that supports `call`, and
    [(name, reason)] of the candidates for these weights' kind tried before it; a ValueError
    listing why each of them declined where none supports it."""
    declined = []
    for impl in candidates(path):
        reason = refusal(impl, call, path)
        if not reason:
            return impl, [(i.name, r) for i, r in declined if i.kind == impl.kind]
        declined.append((impl, reason))
    relevant = [(i, r) for i, r in declined if i.kind == call.weights.kind] or declined
    why = "; ".join(f"{i.name}: {r}" for i, r in relevant)
    if path == "auto":
        raise ValueError(f"no experts implementation runs this call ({why})")
    raise ValueError(f"path={path!r} cannot run here: {why}")


def choose(call: ExpertsCall, path="auto"):
    """The implementation that runs `call` (see choose_with_reasons)."""
    return choose_with_reasons(call, path)[0]


def explain(call: ExpertsCall, path="auto"):
    """[(name, reason)] for every implementation in registry order: reason "" where it supports
    the call, else why it declines ("not considered: ..." for those `path` excludes). The one
    path="auto" takes is the first with an empty reason."""
    considered = candidates(path)
    return [(impl.name, refusal(impl, call, path) if impl in considered
             else f"not considered: path={path!r}") for impl in IMPLEMENTATIONS]
