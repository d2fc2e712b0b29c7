"""argon::hopper_grouped_mm(_out) (torch_argon/csrc/hopper/hopper_ops.cpp has their schemas and
contract) from Python: the wrapper, the fakes (torch.compile, opcheck) and why the kernel does
not run somewhere (`refusal`).

Where it runs: CUDA tensors on a GPU of compute capability 9.0 (H100, H200: the kernel is sm_90a
code: wgmma, TMA), where torch_argon._C was built with the Hopper unit (CUTLASS's headers found
and an sm_90 target: build_tools/hopper_build.py). The launch is asynchronous on the current
stream and takes no host sync: CUDA graphs capture it.
"""
import torch

from . import configs
from .._kernels import cuda_capability, has_kernel as _has_kernel


def has_kernel() -> bool:
    """Whether this build of torch_argon._C has the Hopper unit (its CUDA kernel registered)."""
    return _has_kernel("argon::hopper_grouped_mm_out", "CUDA")


def refusal(device) -> str:
    """"" where the Hopper GEMMs (grouped and padded) run on `device`, else why not."""
    device = torch.device(device)
    if device.type != "cuda":
        return f"the Hopper GEMMs run on CUDA tensors, not {device.type}"
    if not has_kernel():
        return ("torch_argon was built without the Hopper unit (it needs CUTLASS's headers, "
                "pip install --no-deps nvidia-cutlass==4.2.0.0, and an sm_90 target: "
                "build_tools/hopper_build.py)")
    capability = cuda_capability(device)
    if capability != (9, 0):
        return (f"the Hopper GEMMs run on compute capability 9.0 (sm_90a code), this "
                f"GPU is {capability[0]}.{capability[1]}")
    return ""


def call(why_not, device, op, op_out, args, out):
    """The Hopper wrappers' one form: outside torch.compile (which traces the fakes), a kernel
    that does not run on `device` is a NotImplementedError saying why (`why_not(device)`); then
    op(*args), or op_out(*args, out) returning `out`."""
    if not torch.compiler.is_compiling():
        why = why_not(device)
        if why:
            raise NotImplementedError(why)
    if out is None:
        return op(*args)
    op_out(*args, out)
    return out


def grouped_mm(a, w, offsets, counts, config, *, out=None):
    """out [R, N]: for every expert e, rows offsets[e] .. offsets[e] + counts[e] of a [R, K]
    times w[e]^T (w [E, N, K], a's dtype fp16 / bf16; offsets and counts the plan's); the other
    rows zero, or as they were in `out` where given. config: a name of configs.CONFIGS."""
    return call(refusal, a.device, torch.ops.argon.hopper_grouped_mm,
                torch.ops.argon.hopper_grouped_mm_out,
                (a, w, offsets, counts, configs.index(config)), out)


# ---- fakes: output shapes from the arguments' shapes alone ------------------------------------

def check_operands(a, w):
    """a [R, K] and w [E, N, K] as the Hopper GEMMs take them (hopper_tensor_checks.h's
    check_operands, the same words)."""
    if a.dim() != 2 or w.dim() != 3:
        raise ValueError(f"a must be [R, K] and w [E, N, K], got {tuple(a.shape)} and "
                         f"{tuple(w.shape)}")
    if a.dtype not in (torch.float16, torch.bfloat16) or w.dtype != a.dtype:
        raise ValueError(f"a must be float16 or bfloat16 and w of a's dtype, got {a.dtype} and "
                         f"{w.dtype}")
    if w.shape[2] != a.shape[1]:
        raise ValueError(f"w's last dimension (K) must equal a's, got {w.shape[2]} and "
                         f"{a.shape[1]}")
    if a.shape[1] <= 0 or a.shape[1] % 8 or w.shape[1] % 8:
        raise ValueError(f"K (a's columns) and N (w's rows) must be multiples of 8 (16-byte "
                         f"rows), K positive, got K={a.shape[1]} N={w.shape[1]}")


def check_out(a, w, out):
    """out [R, N] in a's dtype (the _out forms')."""
    if tuple(out.shape) != (a.shape[0], w.shape[1]) or out.dtype != a.dtype:
        raise ValueError(f"out must be {a.dtype} of shape {(a.shape[0], w.shape[1])}, got "
                         f"{out.dtype} of shape {tuple(out.shape)}")


def _check_shapes(a, w, offsets, counts, config):
    check_operands(a, w)
    if tuple(offsets.shape) != (w.shape[0] + 1,) or tuple(counts.shape) != (w.shape[0],):
        raise ValueError(f"offsets must be [E + 1] and counts [E] (the plan's), got "
                         f"{tuple(offsets.shape)} and {tuple(counts.shape)}")
    if not 0 <= config < len(configs.CONFIGS):
        raise ValueError(f"config must be in [0, {len(configs.CONFIGS)}), got {config}")


@torch.library.register_fake("argon::hopper_grouped_mm")
def _grouped_mm_fake(a, w, offsets, counts, config):
    _check_shapes(a, w, offsets, counts, config)
    return a.new_empty((a.shape[0], w.shape[1]))


@torch.library.register_fake("argon::hopper_grouped_mm_out")
def _grouped_mm_out_fake(a, w, offsets, counts, config, out):
    _check_shapes(a, w, offsets, counts, config)
    check_out(a, w, out)
