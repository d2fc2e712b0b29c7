"""Expert weights as one object: what the layer, nn.Experts and the integrations hand to the
experts path, instead of two raw tensors, so a weight format is a type, not a dtype.

`DenseExperts` holds float stacks in transformers' layout: gate_up [E, 2I, H] (each expert's gate
rows, then its up rows) and down [E, H, I], any strides (a stack stored [E, H, 2I] is passed as a
transposed view; moe_mm reads through the strides, nothing is copied). Quantized formats add
their own class beside it (torch_argon.quant; docs/quantized-experts.md): each class says its
`kind`, and the path chooser (paths.py) picks the kernels for that kind.
"""
from dataclasses import dataclass

import torch


@dataclass(frozen=True, eq=False)
class DenseExperts:
    """E SwiGLU experts as float stacks: gate_up [E, 2I, H], down [E, H, I]."""

    gate_up: torch.Tensor
    down: torch.Tensor
    kind = "dense"

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

    def check(self, hidden: int) -> None:
        """Raises a ValueError naming the first stack that does not fit activations of width
        `hidden`."""
        gu, dn = self.gate_up, self.down
        if gu.dim() != 3 or gu.shape[2] != hidden or gu.shape[1] % 2:
            raise ValueError(f"w_gate_up must be [E, 2I, H={hidden}] (gate rows, then up rows), "
                             f"got {tuple(gu.shape)}")
        E, two_i = gu.shape[0], gu.shape[1]
        if tuple(dn.shape) != (E, hidden, two_i // 2):
            raise ValueError(f"w_down must be [E, H, I] = [{E}, {hidden}, {two_i // 2}], "
                             f"got {tuple(dn.shape)}")
        if gu.device != dn.device:
            raise ValueError(f"w_gate_up is on {gu.device} and w_down on {dn.device}: the "
                             "expert stacks must share one device")


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
