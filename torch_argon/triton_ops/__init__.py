"""Triton kernels for the CUDA layer: the grouped GEMMs with the gather and SwiGLU fused in,
dense (moe_mm_kernel.py) and with GGUF-quantized weights dequantized in registers
(moe_qmm_kernel.py), the quantized formats' dequantize kernel, and the router's top-k.

Imported lazily: importing Triton (and the torch.library machinery its ops need, which pulls in
torch._inductor and torch._dynamo) takes seconds, which a CPU-only user should never pay. This
package imports none of it until `load()` runs, which happens
  - when CUDA is initialized in this process (the first CUDA tensor; at once if CUDA already
    is), through torch.cuda's lazy-init queue: so the ops below are registered before any CUDA
    tensor exists, before an eager call could dispatch to them and before torch.compile could
    trace a call of them;
  - or at the first access of one of the names below (tests and benches on the CPU, through
    Triton's interpreter).
Loading registers argon::moe_mm_triton, argon::moe_gate_up_swiglu_triton, argon::moe_qmm_triton,
argon::moe_gate_up_swiglu_qmm_triton and argon::topk_triton (ops.py, quant_ops.py), and the CUDA
kernels of the op table's argon::dequantize_out and argon::moe_qmm_out where the extension
defines those ops without one.

refusal(device) says whether the kernels can run on a device ("" when they can), without
loading anything for a non-CUDA device: the one answer the router's top-k and the Triton experts
implementations ask. AVAILABLE / REASON (Triton importable here, or why not) load on access.
"""
import importlib
import importlib.util
import warnings

import torch

# Public name -> (submodule, its name there): resolved, with Triton imported, at first access.
# (configs.py and quant_configs.py need no Triton: the sweep's logic and tests read them anywhere.)
_EXPORTS = {
    "layer_tile_m": ("configs", "layer_tile_m"),
    "quant_layer_tile_m": ("quant_configs", "quant_layer_tile_m"),
    "device_name": ("ops", "device_name"),
    "moe_mm_triton": ("ops", "moe_mm_triton"),
    "moe_gate_up_swiglu_triton": ("ops", "moe_gate_up_swiglu_triton"),
    "topk_triton": ("ops", "topk_triton"),
    "quant_tables": ("quant_blocks", "device_tables"),
    "dequantize_triton": ("quant_ops", "dequantize_triton"),
    "moe_qmm_triton": ("quant_ops", "moe_qmm_triton"),
    "moe_gate_up_swiglu_qmm_triton": ("quant_ops", "moe_gate_up_swiglu_qmm_triton"),
    "moe_qmm_triton_op": ("quant_ops", "moe_qmm_triton_op"),
    "moe_gate_up_swiglu_qmm_triton_op": ("quant_ops", "moe_gate_up_swiglu_qmm_triton_op"),
    "register_cuda_kernels": ("quant_ops", "register_cuda_kernels"),
}

_WITHOUT_TRITON = ("configs", "quant_configs")

_reason = None  # None: not loaded yet; "": loaded; else why the kernels cannot run here


def load() -> str:
    """Imports Triton and the kernels' modules, registering their ops (once). Returns "" or why
    they cannot run in this process (Triton not importable)."""
    global _reason
    if _reason is None:
        try:
            import triton  # noqa: F401
        except ImportError as e:  # the CPU CI machine may not have it
            _reason = f"triton is not importable: {e}"
            return _reason
        from . import quant_ops
        quant_ops.register_cuda_kernels()
        from . import ops  # noqa: F401  (registers the dense and top-k ops)
        # Every name a module global from now on: torch.compile then traces plain attribute
        # reads, never the import in __getattr__.
        for name, (module, attr) in _EXPORTS.items():
            globals()[name] = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
        _reason = ""
    return _reason


def refusal(device) -> str:
    """Why the Triton kernels cannot run on tensors of `device` ("" when they can): they run on
    CUDA tensors, with Triton importable. Decided here for every caller (the router's top-k, the
    Triton experts implementations)."""
    if device.type != "cuda":
        return "the Triton kernels run on CUDA tensors only"
    return load()


def __getattr__(name):
    """AVAILABLE, REASON and the kernels' functions, loaded at first access (PEP 562)."""
    if name in ("AVAILABLE", "REASON"):
        reason = load()
        return not reason if name == "AVAILABLE" else reason
    if name in _EXPORTS:
        module, attr = _EXPORTS[name]
        reason = "" if module in _WITHOUT_TRITON else load()
        if reason:
            raise AttributeError(f"torch_argon.triton_ops.{name}: {reason}")
        value = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
        globals()[name] = value
        return value
    if importlib.util.find_spec(f"{__name__}.{name}") is not None:  # a submodule, by attribute
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _load_as_cuda_starts():
    """Runs inside torch.cuda's lazy initialization, where an exception would fail CUDA's start:
    a failure is kept as the reason the kernels cannot run (and said once, as a warning)."""
    global _reason
    try:
        load()
    except Exception as e:  # noqa: BLE001 (anything raised here would break CUDA's init)
        _reason = f"loading the Triton kernels failed: {type(e).__name__}: {e}"
        warnings.warn(f"torch_argon: {_reason}; the layer runs the argon ops on CUDA",
                      RuntimeWarning, stacklevel=2)


if torch.backends.cuda.is_built():
    torch.cuda._lazy_call(_load_as_cuda_starts)
