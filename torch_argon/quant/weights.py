"""Quantized expert weights as the layer takes them (docs/quantized-experts.md).

`QuantizedWeight` is one GGUF tensor of E experts: `data` uint8 [E, N, row_bytes], exactly the
file's bytes, its format and the input width. `QuantizedExperts` is the expert-weights object of
kind "quantized" (torch_argon/weights.py has the dense one): gate and up of one format are held as
one tensor, their rows concatenated along N (so the gate/up GEMM is one launch, as for dense
stacks); of two formats, as two tensors (two GEMMs).
"""
from dataclasses import dataclass
from typing import Optional

import torch

from ..weights import DenseExperts
from .formats import QFormat, check_quantized, qformat
from .reference import dequantize_reference


@dataclass(frozen=True, eq=False)
class QuantizedWeight:
    """data: uint8 [E, N, row_bytes]; qtype: a QFormat (a name, gguf type or id is converted);
    n_in: the input width (a multiple of the format's block)."""

    data: torch.Tensor
    qtype: QFormat
    n_in: int

    def __post_init__(self):
        object.__setattr__(self, "qtype", qformat(self.qtype))
        check_quantized(self.data, self.qtype, self.n_in, name="data")
        if self.data.dim() != 3:
            raise ValueError(f"data must be [E, N, row_bytes], got shape {tuple(self.data.shape)}")

    @property
    def n_experts(self) -> int:
        return self.data.shape[0]

    @property
    def n_out(self) -> int:
        return self.data.shape[1]

    @property
    def device(self) -> torch.device:
        return self.data.device

    @property
    def nbytes(self) -> int:
        return self.data.numel()

    def dequantize(self, dtype=torch.float32) -> torch.Tensor:
        """[E, N, n_in] floats (for references and baselines: the layer never calls this)."""
        return dequantize_reference(self.data, self.qtype, self.n_in).to(dtype)

    def select_experts(self, start: int, end: int) -> "QuantizedWeight":
        return QuantizedWeight(self.data[start:end], self.qtype, self.n_in)

    def to(self, device) -> "QuantizedWeight":
        return QuantizedWeight(self.data.to(device), self.qtype, self.n_in)


def concat_rows(first: QuantizedWeight, second: QuantizedWeight) -> QuantizedWeight:
    """The two weights' rows one after the other along N (a byte concatenation): they must share
    format, input width and expert count."""
    if (first.qtype, first.n_in, first.n_experts) != (second.qtype, second.n_in,
                                                       second.n_experts):
        raise ValueError(f"cannot concatenate {first.qtype.name} [E={first.n_experts}, "
                         f"n_in={first.n_in}] with {second.qtype.name} [E={second.n_experts}, "
                         f"n_in={second.n_in}] rows")
    return QuantizedWeight(torch.cat([first.data, second.data], dim=1), first.qtype, first.n_in)


# activation_quant: whether quantized experts quantize the activations to 8-bit blocks for
# integer dot products ("q8") or multiply them as they are against the dequantized weights
# ("none"); "auto" lets the implementation that runs the call take its own default. The layer
# option of the same name (moe_layer, nn.MoE) overrides the weights' own where it is not "auto".
ACTIVATION_QUANT = ("auto", "none", "q8")
# The activation dtypes the quantized GEMMs take.
ACTIVATION_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def check_activation_quant(value) -> str:
    """value itself, or a ValueError naming the argument."""
    if value not in ACTIVATION_QUANT:
        raise ValueError(f"activation_quant must be one of {ACTIVATION_QUANT}, got {value!r}")
    return value


@dataclass(frozen=True, eq=False)
class QuantizedExperts:
    """E gated experts with quantized weights: gate_up [E, 2I, H] (gate rows, then up rows) in
    one format, or gate and up [E, I, H] in two; down [E, H, I]. Build with `from_parts` (or
    `build_experts`, which makes all-float parts DenseExperts). Checked here, once: ValueError
    naming the first part that does not fit the others.

    activation_quant: this weights' preference for the layer's activation_quant option
    ("auto", "none", "q8"); the layer's own value wins where it is not "auto"."""

    down: QuantizedWeight
    gate_up: Optional[QuantizedWeight] = None
    gate: Optional[QuantizedWeight] = None
    up: Optional[QuantizedWeight] = None
    activation_quant: str = "auto"
    kind = "quantized"

    def __post_init__(self):
        check_activation_quant(self.activation_quant)
        if self.fused == (self.gate is not None or self.up is not None):
            raise ValueError("pass gate_up, or gate and up (use QuantizedExperts.from_parts)")
        if self.fused:
            ups = [("gate_up", self.gate_up)]
            if self.gate_up.n_out % 2:
                raise ValueError(f"gate_up must hold 2I rows, got {self.gate_up.n_out}")
            inter = self.gate_up.n_out // 2
        else:
            ups = [("gate", self.gate), ("up", self.up)]
            inter = self.gate.n_out
            if self.up.n_out != inter:
                raise ValueError(f"gate has {inter} rows but up has {self.up.n_out}")
        E, hidden = self.n_experts, self.hidden
        for name, w in ups:
            if w.n_in != hidden or w.n_experts != E:
                raise ValueError(f"{name} must be [E={E}, N, n_in=H={hidden}] (down is [E, H, "
                                 f"I]), got E={w.n_experts}, n_in={w.n_in}")
            if w.device != self.down.device:
                raise ValueError(f"{name} is on {w.device} and down on {self.down.device}")
        if self.down.n_in != inter:
            raise ValueError(f"down must be [E, H, n_in=I={inter}] ({ups[0][0]} holds I={inter} "
                             f"rows per expert), got n_in={self.down.n_in}")

    @classmethod
    def from_parts(cls, gate, up, down, *, activation_quant="auto") -> "QuantizedExperts":
        """From gate, up and down weights (QuantizedWeight each); gate and up are concatenated
        into one tensor when they share a format (one copy of their bytes, once)."""
        if gate.qtype == up.qtype:
            return cls(down=down, gate_up=concat_rows(gate, up), activation_quant=activation_quant)
        return cls(down=down, gate=gate, up=up, activation_quant=activation_quant)

    @property
    def fused(self) -> bool:
        return self.gate_up is not None

    @property
    def n_experts(self) -> int:
        return self.down.n_experts

    @property
    def hidden(self) -> int:
        return self.down.n_out

    @property
    def inter(self) -> int:
        return self.down.n_in

    @property
    def device(self) -> torch.device:
        return self.down.device

    def parts(self) -> dict:
        """{name: QuantizedWeight} of the parts held: gate_up and down, or gate, up and down."""
        held = (("gate_up", self.gate_up), ("gate", self.gate), ("up", self.up),
                ("down", self.down))
        return {name: w for name, w in held if w is not None}

    @property
    def nbytes(self) -> int:
        return sum(w.nbytes for w in self.parts().values())

    def _map(self, fn) -> "QuantizedExperts":
        each = lambda w: None if w is None else fn(w)  # noqa: E731
        return QuantizedExperts(each(self.down), each(self.gate_up), each(self.gate),
                                each(self.up), self.activation_quant)

    def to(self, device) -> "QuantizedExperts":
        return self._map(lambda w: w.to(device))

    def select_experts(self, start: int, end: int) -> "QuantizedExperts":
        """Experts [start, end) as views of the blocks (an expert-parallel rank's share)."""
        return self._map(lambda w: w.select_experts(start, end))

    def to_dense(self, dtype=torch.float32) -> DenseExperts:
        """Dequantized stacks (references and baselines only)."""
        if self.fused:
            gate_up = self.gate_up.dequantize(dtype)
        else:
            gate_up = torch.cat([self.gate.dequantize(dtype), self.up.dequantize(dtype)], dim=1)
        return DenseExperts(gate_up, self.down.dequantize(dtype))

    def check_input(self, x) -> None:
        """Raises a ValueError naming x (and the part) when these experts cannot take the
        activations x [T, H]: float32 / float16 / bfloat16, H and device the weights'."""
        if x.dtype not in ACTIVATION_DTYPES:
            raise ValueError(f"x must be float32, float16 or bfloat16 to run quantized experts, "
                             f"got {x.dtype}")
        H = x.shape[1]
        if self.hidden != H:
            first = next(iter(self.parts()))
            raise ValueError(f"{first} must be [E, N, n_in=H={H}] to take x [T, H={H}], got "
                             f"n_in={self.hidden}")
        if self.device != x.device:
            raise ValueError(f"experts ({', '.join(self.parts())}) are on {self.device} but x "
                             f"is on {x.device}")


def build_experts(down, *, gate_up=None, gate=None, up=None, float_dtype=torch.float32,
                  activation_quant="auto"):
    """The expert-weights object for a model's expert tensors (QuantizedWeight each: down, and
    gate_up or gate and up), decided here once, when the weights are loaded: DenseExperts in
    float_dtype when every part is a plain float type (F32, F16, BF16: the values as stored,
    which the dense kernels run; GGUF files hold them before quantizing), else QuantizedExperts
    (gate and up concatenated when they share a format)."""
    parts = [w for w in (gate_up, gate, up, down) if w is not None]
    if all(w.qtype.is_float for w in parts):
        def values(w):
            return w.dequantize(float_dtype)
        stack = (values(gate_up) if gate_up is not None
                 else torch.cat([values(gate), values(up)], dim=1))
        return DenseExperts(stack, values(down))
    if gate_up is not None:
        return QuantizedExperts(down=down, gate_up=gate_up, activation_quant=activation_quant)
    return QuantizedExperts.from_parts(gate, up, down, activation_quant=activation_quant)
