"""The gated activations of the experts' epilogue, for Python: their names, the codes the kernels
take (ARGON_ACT_* in the C++ and Metal sources, ACTIVATION in the Triton kernels), the argument
check, and their float64 references. Everything in torch_argon's Python that names, checks or
computes an activation reads it here.

  "silu"       SiLU: the gate of SwiGLU (Qwen, Mixtral, OLMoE)
  "gelu"       GELU, erf form: GeGLU
  "gelu_tanh"  GELU, tanh form: GeGLU as transformers' gelu_pytorch_tanh / gelu_new
"""
import torch
import torch.nn.functional as F

NAMES = ("silu", "gelu", "gelu_tanh")
CODES = {name: code for code, name in enumerate(NAMES)}  # ARGON_ACT_SILU = 0, GELU = 1, ...


def check(activation) -> str:
    """activation itself, or a ValueError naming the argument and the names accepted."""
    if activation not in CODES:
        raise ValueError(f'activation must be one of "silu", "gelu", "gelu_tanh", got '
                         f'"{activation}"')
    return activation


def code(activation) -> int:
    """The kernels' code for an activation name (ValueError for an unknown one)."""
    return CODES[check(activation)]


def gelu_erf(g):
    """g * Phi(g) in float64, rounded once to g's dtype: F.gelu overflows to inf for g >= 2^127,
    where the true value (g itself) is finite and every backend returns it."""
    g64 = g.double()
    return (g64 * (0.5 * (1.0 + torch.erf(g64 * 0.7071067811865476)))).to(g.dtype)


def gelu_tanh(g):
    return F.gelu(g, approximate="tanh")


# name -> the reference function (elementwise, in the argument's dtype; callers pass float64 or
# float32 to get the reference's precision).
REFERENCE = {"silu": F.silu, "gelu": gelu_erf, "gelu_tanh": gelu_tanh}


def _silu_slope(g):
    s = torch.sigmoid(g)
    return s * (1.0 + g * (1.0 - s))


def _gelu_erf_slope(g):
    return 0.5 * (1.0 + torch.erf(g * 0.7071067811865476)) + g * torch.exp(-0.5 * g * g) * \
        0.3989422804014327


def _gelu_tanh_slope(g):
    t = torch.tanh(0.7978845608028654 * (g + 0.044715 * g ** 3))
    return 0.5 * (1.0 + t) + 0.5 * g * (1.0 - t * t) * 0.7978845608028654 * \
        (1.0 + 3 * 0.044715 * g * g)


# name -> the activation's derivative (elementwise; callers pass float64).
DERIVATIVE = {"silu": _silu_slope, "gelu": _gelu_erf_slope, "gelu_tanh": _gelu_tanh_slope}
