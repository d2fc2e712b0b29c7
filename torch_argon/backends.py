"""Backends by name, so one parametrized test suite runs the contract against each of them.

  reference   torch_argon.reference (pure torch)          CPU tensors
  cpu         torch.ops.argon, C++ kernels                CPU tensors
  metal_host  torch.ops.argon_host: the .metal kernels    CPU tensors
              compiled as C++ and run on host threads
  cuda        torch.ops.argon, CUDA kernels               CUDA tensors
  mps         torch.ops.argon, Metal kernels via MPS      MPS tensors
"""
from dataclasses import dataclass
from types import SimpleNamespace

import torch

from . import reference
from .ops import OpSet

NAMES = ("reference", "cpu", "metal_host", "cuda", "mps")


def _reference_namespace():
    """reference.py shaped like a torch.ops namespace (functional and _out forms)."""

    def plan(ids, w, E, tm):
        return reference.moe_plan(ids, w, E, tm).tensors()

    def plan_out(ids, w, E, tm, *outs):
        for dst, src in zip(outs, plan(ids, w, E, tm)):
            dst.copy_(src)

    def into(fn):
        def out_form(*args):
            *inputs, out = args
            out.copy_(fn(*inputs, out_dtype=out.dtype) if fn is not reference.moe_mm
                      else fn(*inputs))
        return out_form

    return SimpleNamespace(
        moe_plan=plan, moe_plan_out=plan_out,
        moe_gather=reference.moe_gather, moe_gather_out=into(reference.moe_gather),
        moe_combine=reference.moe_combine, moe_combine_out=into(reference.moe_combine),
        swiglu=reference.swiglu, swiglu_out=into(reference.swiglu),
        moe_mm=reference.moe_mm, moe_mm_out=into(reference.moe_mm),
    )


def _has_kernel(lib, dispatch_key):
    return torch._C._dispatch_has_kernel_for_dispatch_key(f"{lib}::moe_plan_out", dispatch_key)


@dataclass
class Backend:
    name: str
    device: str
    ops: OpSet
    reason: str = ""  # why it is unavailable, empty when available

    @property
    def available(self) -> bool:
        return not self.reason


def get(name: str) -> Backend:
    if name == "reference":
        return Backend(name, "cpu", OpSet(_reference_namespace()))
    if name == "cpu":
        return Backend(name, "cpu", OpSet(torch.ops.argon))
    if name == "metal_host":
        reason = "" if _has_kernel("argon_host", "CPU") else "built without the Metal-on-host runtime"
        return Backend(name, "cpu", OpSet(torch.ops.argon_host), reason)
    if name == "cuda":
        reason = ("torch sees no CUDA device" if not torch.cuda.is_available()
                  else "" if _has_kernel("argon", "CUDA") else "built without CUDA kernels")
        return Backend(name, "cuda", OpSet(torch.ops.argon), reason)
    if name == "mps":
        reason = ("torch sees no MPS device" if not torch.backends.mps.is_available()
                  else "" if _has_kernel("argon", "MPS") else "built without the MPS backend")
        return Backend(name, "mps", OpSet(torch.ops.argon), reason)
    raise ValueError(f"unknown backend {name!r}; expected one of {NAMES}")


def best_device() -> str:
    """mps, then cuda, then cpu: the first whose kernels are built and whose device is present."""
    for name in ("mps", "cuda"):
        if get(name).available:
            return name
    return "cpu"
