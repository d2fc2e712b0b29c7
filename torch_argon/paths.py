"""The experts' path and tile_m as the main job and the benches report them: a view of the
experts registry's choice (torch_argon/experts), which decides; nothing is decided here.

  "triton"  the Triton implementations (CUDA, fp16 / bf16 activations): the grouped GEMMs with
            the gather and the SwiGLU fused in.
  "ops"     the argon ops one per stage (any device).
"""
from typing import NamedTuple

from .experts import choose
from .experts.base import ops_tile_m  # noqa: F401  (bench/bench_ops.py)
from .experts.registry import BY_NAME, FAMILIES

PATHS = FAMILIES


class ExpertsPath(NamedTuple):
    name: str  # the family: "triton" or "ops"
    tile_m: int
    why_not_triton: str = ""  # why no Triton implementation runs this call ("" when one does)
    implementation: str = ""  # the registry's name of the implementation that runs it


def choose_experts_path(x, experts, ops, *, n_entries, tile_m=None, path="auto") -> ExpertsPath:
    """The path and tile_m the layer takes for activations x [T, H], `experts` (an
    expert-weights object or a (w_gate_up, w_down) pair), the OpSet `ops` and n_entries = T * K
    routed entries; ValueError where `path` cannot run here."""
    chosen = choose(x, experts, n_entries=n_entries, ops=ops, tile_m=tile_m, path=path)
    triton = [reason for name, reason in chosen.declined if BY_NAME[name].path == "triton"]
    if chosen.path == "triton":
        why_not = ""
    else:
        why_not = "; ".join(triton) or f"path={path!r} was asked for"
    return ExpertsPath(chosen.path, chosen.tile_m, why_not, chosen.name)
