"""The "q8" activation quantization of the quantized expert GEMMs (`activation_quant="q8"`):
the definition every backend's integer kernels implement, and the float64 reference product.

Integer dot products need both operands as integers. The weights already are (GGUF blocks); the
activations are quantized here, per row, in blocks of Q8_BLOCK = 32 consecutive values along the
input dim (every GGUF block format's block or sub-block is a multiple of 32, so a weight block
never straddles two activation blocks):

    amax = max |x| over the block (float32; x converted exactly from fp16 / bf16 / fp32)
    inv  = 127 / amax                  (float32, correctly rounded)
    d    = amax / 127                  (float32, correctly rounded)
    q[i] = rint(x[i] * inv)            (float32 product, rounded half to even, in [-127, 127])

except that a block whose amax is 0, or so small that 127 / amax overflows float32,
quantizes to zero (d = 0, q = 0): amax below about 3.7e-37. A block holding a NaN or an infinity has a non-finite d, so
every output its row contributes to is non-finite (kernels must still never read or write out of
bounds on such input; which non-finite value comes out is unspecified).

so x[i] ~ d * q[i]. The product of a q8 GEMM is then, for each output,

    out[r, n] = sum over blocks b of  d[r, b] * sum_{i in b} q[r, i] * W[n, i]

with W the exactly dequantized weights: the kernels compute the inner sums in integers (exact)
and the rest in float32 at least, so they match the reference (`reference.moe_qmm(..., activation_quant="q8")`, float64 on `q8_activations`) to float32 rounding, and
the exact-dequant product (`activation_quant="none"`) to the activations' 8-bit rounding
(<= 1e-2 relative on realistic data).
"""
import torch

Q8_BLOCK = 32
ACTIVATION_QUANT_MODES = ("none", "q8")


def quantize_rows_q8(x: torch.Tensor):
    """(q int8 [R, n], d float32 [R, n / 32]) for x [R, n] (n a multiple of 32), as the module
    docstring defines them."""
    if x.dim() != 2 or x.shape[1] % Q8_BLOCK:
        raise ValueError(f"x must be [R, n] with n a multiple of {Q8_BLOCK}, got "
                         f"{tuple(x.shape)}")
    blocks = x.float().reshape(x.shape[0], x.shape[1] // Q8_BLOCK, Q8_BLOCK)  # R may be 0
    amax = blocks.abs().amax(dim=-1)
    inv = torch.full_like(amax, 127.0) / amax  # (127.0 / amax is 127 * (1 / amax) in torch)
    d = amax / 127.0
    zero = (amax == 0) | (torch.isfinite(amax) & ~torch.isfinite(inv))
    inv = torch.where(zero, torch.zeros_like(inv), inv)
    d = torch.where(zero, torch.zeros_like(d), d)
    q = torch.round(blocks * inv[..., None])  # torch.round rounds half to even
    if torch.isfinite(amax).all():
        q = q.clamp(-127, 127).to(torch.int8)
    # else: q stays float (NaN where x * inv is 0 * inf); d is non-finite there anyway
    return q.reshape(x.shape), d


def q8_activations(x: torch.Tensor) -> torch.Tensor:
    """The values a q8 GEMM multiplies: d * q per block, in float64 (exact), [R, n]."""
    q, d = quantize_rows_q8(x)
    R, n = x.shape
    return (q.double().reshape(R, n // Q8_BLOCK, Q8_BLOCK) * d.double()[..., None]).reshape(R, n)


def check_activation_quant(activation_quant: str, name: str = "activation_quant") -> str:
    """The words of the C++ check (csrc/checks.cpp), so every backend raises the same error."""
    if activation_quant not in ACTIVATION_QUANT_MODES:
        raise ValueError(f'{name} must be one of "none", "q8", got "{activation_quant}"')
    return activation_quant


def check_exact_activations_only(activation_quant: str, backend: str) -> None:
    """The ValueError of a backend without q8 kernels, in the words of the C++ backends'
    (check_exact_activations_only in csrc/checks.cpp)."""
    if check_activation_quant(activation_quant) != "none":
        raise ValueError(f'activation_quant="q8" has no kernels on {backend} (its integer '
                         'kernels run on the CPU and on CUDA sm_80+); pass '
                         'activation_quant="none" there, the '
                         'exact-dequant product')
