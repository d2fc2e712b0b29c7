"""Expert weights as one object: what the layer, nn.Experts and the integrations hand to the
experts path, instead of two raw tensors, so a weight format is a type, not a dtype.

`DenseExperts` holds float stacks in transformers' layout: gate_up [E, 2I, H] (each expert's gate
rows, then its up rows) and down [E, H, I], any strides (a stack stored [E, H, 2I] is passed as a
transposed view; moe_mm reads through the strides, nothing is copied). Quantized formats add
their own class beside it (torch_argon.quant; docs/quantized-experts.md): each class says its
`kind`, and the experts registry (torch_argon/experts) picks the kernels for that kind. A weights
object checks itself when it is made; a layer call checks only that it takes the call's x.
"""
from dataclasses import dataclass

import torch


@dataclass(frozen=True, eq=False)
class DenseExperts:
    """E SwiGLU experts as float stacks: gate_up [E, 2I, H], down [E, H, I], of one dtype and
    device (checked here, once: ValueError naming the stack that does not fit)."""

    gate_up: torch.Tensor
    down: torch.Tensor
    kind = "dense"

    def __post_init__(self):
        gu, dn = self.gate_up, self.down
        if gu.dim() != 3 or gu.shape[1] % 2:
            raise ValueError("w_gate_up must be [E, 2I, H] (each expert's gate rows, then its up "
                             f"rows), got {tuple(gu.shape)}")
        E, two_i, H = gu.shape
        if tuple(dn.shape) != (E, H, two_i // 2):
            raise ValueError(f"w_gate_up {tuple(gu.shape)} and w_down {tuple(dn.shape)} do not "
                             "fit together: w_gate_up must be [E, 2I, H] and w_down must be "
                             "[E, H, I], with one E, H and I")
        if gu.dtype != dn.dtype:
            raise ValueError(f"w_gate_up is {gu.dtype} and w_down {dn.dtype}: the expert stacks "
                             "must share one dtype")
        if gu.device != dn.device:
            raise ValueError(f"w_gate_up is on {gu.device} and w_down on {dn.device}: the "
                             "expert stacks must share one device")

    @property
    def n_experts(self) -> int:
        return self.gate_up.shape[0]

    @property
    def hidden(self) -> int:
        return self.gate_up.shape[2]

    @property
    def inter(self) -> int:
        return self.down.shape[2]

    @property
    def dtype(self) -> torch.dtype:
        return self.gate_up.dtype

    @property
    def device(self) -> torch.device:
        return self.gate_up.device

    def select_experts(self, start: int, end: int) -> "DenseExperts":
        """Experts [start, end) as views (an expert-parallel rank's share)."""
        return DenseExperts(self.gate_up[start:end], self.down[start:end])

    def to_dense(self) -> "DenseExperts":
        """Float stacks of these experts (for references and baselines): itself."""
        return self

    def check_input(self, x) -> None:
        """Raises a ValueError naming the stacks and x when these experts cannot take the
        activations x [T, H]: H, dtype and device must be the stacks'."""
        H = x.shape[1]
        if self.hidden != H:
            raise ValueError(f"w_gate_up must be [E, 2I, H={H}] to take x [T, H={H}], got "
                             f"{tuple(self.gate_up.shape)}")
        if self.dtype != x.dtype:
            raise ValueError(f"experts (w_gate_up, w_down) are {self.dtype} but x is {x.dtype}: "
                             "the expert stacks must have x's dtype")
        if self.device != x.device:
            raise ValueError(f"experts (w_gate_up, w_down) are on {self.device} but x is on "
                             f"{x.device}")


def as_expert_weights(experts):
    """The expert-weights object for `experts`: an object with a `kind` (DenseExperts, or a
    quantized one) as is; a (w_gate_up, w_down) pair of float stacks as DenseExperts."""
    if hasattr(experts, "kind"):
        return experts
    if isinstance(experts, (tuple, list)) and len(experts) == 2 and all(
            isinstance(t, torch.Tensor) for t in experts):
        return DenseExperts(*experts)
    raise TypeError("experts must be an expert-weights object (torch_argon.DenseExperts, a "
                    "quantized one) or a (w_gate_up, w_down) pair of tensors, got "
                    f"{type(experts).__name__}")
