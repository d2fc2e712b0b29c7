"""What an Experts implementation is, and the call it is asked about.

An implementation runs the GEMMs of one layer call's experts, between the shared plan and
gather (before) and the shared combine (after): torch_argon/experts/flow.py. It is a subclass of
`Experts` in a file of its own, listed once in registry.py; docs/experts.md says how to add one.
"""
from dataclasses import dataclass
from typing import Optional

import torch


@dataclass(frozen=True, eq=False)
class ExpertsCall:
    """One layer call as the implementations see it when they decide whether they run it.

    x: the activations [T, H] (their dtype, device and whether they require grad matter, not
        their values). weights: the expert-weights object (DenseExperts, QuantizedExperts).
    ops: the OpSet the caller runs on. tile_m: the caller's, or None (the implementation's
    rule picks it). activation: the gated epilogue's ("silu", "gelu", "gelu_tanh").
    activation_quant: the mode asked for: the caller's, or the weights' own where the caller
        said "auto" (ExpertsCall.of).
    n_entries: the routed entries the experts will get (T * K), where the entry knows them
        before routing (moe_layer, moe_experts), else None; the implementations whose speed
        depends on the rows per expert decide by it (from shapes: no host sync).
    records_grad: autograd records this call (grad mode on, and x, an expert weight or the
        routing weights require grad): only implementations with backward formulas run it,
        with intermediates that are never overwritten (autograd saves them).
    """
    x: torch.Tensor
    weights: object
    ops: object
    tile_m: Optional[int]
    activation: str
    activation_quant: str
    n_entries: Optional[int] = None
    records_grad: bool = False

    @classmethod
    def of(cls, x, weights, *, ops, tile_m=None, activation="silu", activation_quant="auto",
           n_entries=None, routing=None):
        """The call of a layer entry's (checked) arguments; activation_quant is the layer
        option: "auto" defers to the weights' own setting (QuantizedExperts.activation_quant).
        routing: the tensor the routing weights come from (the top-k weights, or the router's
        weight before routing), for records_grad."""
        if activation_quant == "auto":
            activation_quant = getattr(weights, "activation_quant", "auto")
        tracked = [x, routing, *weight_tensors(weights)]
        records_grad = torch.is_grad_enabled() and any(
            isinstance(t, torch.Tensor) and t.requires_grad for t in tracked)
        return cls(x, weights, ops, tile_m, activation, activation_quant, n_entries,
                   records_grad)

    def rows_per_expert(self) -> Optional[float]:
        """The mean rows each expert gets (n_entries / E), or None where n_entries is unknown."""
        if self.n_entries is None:
            return None
        return self.n_entries / max(self.weights.n_experts, 1)


def weight_tensors(weights) -> list:
    """The tensors of an expert-weights object: a dense one's two stacks, a quantized one's
    parts' data."""
    if hasattr(weights, "gate_up") and isinstance(weights.gate_up, torch.Tensor):
        return [weights.gate_up, weights.down]
    parts = getattr(weights, "parts", None)
    return [getattr(w, "data", None) for w in parts().values()] if parts is not None else []


class Experts:
    """One implementation of the experts' GEMMs (one subclass per file; one instance in the
    registry). Class attributes:

      name              the registry's name for it: a value of the layer's `path=`
      path              the family the layer's path="triton" / path="ops" selects
      kind              the weights' kind it runs ("dense" or "quantized")
      fuses_gather      True: its GEMMs read x through the plan's sorted_token (the gather fused
                        in): the flow makes no gathered copy of x. False: apply gets xs.
      activation_quant  the activation_quant modes it runs; "auto" means the first of them

    The registry asks `supports` only calls whose weights are of its kind and whose
    activation_quant it runs (registry.refusal): supports says what else it needs.
    """

    name = ""
    path = ""
    kind = ""
    fuses_gather = False
    activation_quant = ("none",)

    def supports(self, call: ExpertsCall) -> str:
        """"" when it can run `call`, else why not, in words the caller can act on. Decided
        from shapes, dtypes, devices and the ops only (never data: no host sync)."""
        raise NotImplementedError

    def auto_refusal(self, call: ExpertsCall) -> str:
        """"" when the layer may pick it for `call` by itself (path "auto" or its family), else
        why not; asked only after supports() said "". An implementation not yet measured where
        it would be the default declines here and still runs when named (path=<name>)."""
        return ""

    def resolved_activation_quant(self, call: ExpertsCall) -> str:
        """The mode it runs `call` in: the call's, or for "auto" its default (the first of
        activation_quant; an implementation whose default depends on the machine overrides
        this)."""
        return self.activation_quant[0] if call.activation_quant == "auto" else call.activation_quant

    def tile_m(self, call: ExpertsCall, n_entries) -> int:
        """The plan's rows per tile: the caller's tile_m, else this implementation's rule for
        `n_entries` routed entries (T * K of the tokens its experts get)."""
        return call.tile_m if call.tile_m is not None else self.default_tile_m(call, n_entries)

    def default_tile_m(self, call: ExpertsCall, n_entries) -> int:
        raise NotImplementedError

    def workspace(self, call: ExpertsCall, rows: int) -> dict:
        """Buffers for its intermediates, by role ("xs" is the gather's output), for a plan of
        `rows` rows; {}: each op allocates its own output."""
        return {}

    def apply(self, call: ExpertsCall, x, xs, plan, workspace: dict):
        """The experts' outputs y [R, H] in the plan's row order (the combine's input), for the
        tokens x [T, H] (xs: their gathered rows [R, H], None when fuses_gather)."""
        raise NotImplementedError

    def __repr__(self):
        return f"<experts implementation {self.name!r}>"


def ops_tile_m(device) -> int:
    """tile_m of the implementations that run the argon ops one per stage: 16 on GPUs (the
    grouped GEMMs' M tile) and 1 on the CPU, where the GEMMs take each expert's rows in blocks
    of their own (csrc/cpu/moe_mm_cpu.cpp) and padding would be wasted work."""
    return 1 if torch.device(device).type == "cpu" else 16


def fused_call_refusal(call, min_tile_m=1) -> str:
    """What an implementation that runs its own fused kernels needs of a call besides its
    device: autograd not recording the call (fused kernels have no backward formulas), the argon
    op library (another OpSet means the caller wants its own ops run) and a tile_m that is None
    or a power of two >= min_tile_m (its kernels' smallest M tile)."""
    if call.records_grad:
        return ("autograd records this call and its fused GEMMs have no backward formula (the "
                "ops path, which has, runs instead)")
    if not runs_argon_library(call.ops):
        return "an OpSet other than the argon library was passed"
    tm = call.tile_m
    if tm is not None and (tm < min_tile_m or tm & (tm - 1)):
        least = f" >= {min_tile_m}" if min_tile_m > 1 else ""
        return f"tile_m={tm}: its GEMMs need a power of two{least}"
    return ""


def runs_argon_library(ops) -> bool:
    """Whether `ops` is the argon op library itself (another OpSet means the caller wants its own
    ops run: the reference, the host Metal runner), which the fused implementations bypass."""
    return getattr(ops, "ns", None) is torch.ops.argon
