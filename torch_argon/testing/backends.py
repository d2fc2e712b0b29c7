"""Backends by name, so one parametrized test suite runs the contract against each of them.

  reference   torch_argon.reference (pure torch)          CPU tensors
  cpu         torch.ops.argon, C++ kernels                CPU tensors
  metal_host  torch.ops.argon_host: the .metal kernels    CPU tensors
              compiled as C++ and run on host threads
  cuda        torch.ops.argon, CUDA kernels               CUDA tensors
  mps         torch.ops.argon, Metal kernels via MPS      MPS tensors
  metal_cuda  torch.ops.argon_metal_cuda: the .metal      CUDA tensors
              kernels compiled by nvcc (a test backend: the Metal kernels as SIMT code)

metal_host and metal_cuda are test executors: they live in torch_argon._C_test, which
scripts/test.sh and CI build (ARGON_TEST_BUILD=1) and a user's install does not. Importing this
module loads it where it exists; where it does not, those backends say why they are unavailable.
"""
import importlib
import inspect
from dataclasses import dataclass
from types import SimpleNamespace

import torch

from .. import ops, reference
from ..ops import FUNCTIONAL_OPS, OpSet
from ..plan import MoEPlan

NAMES = ("reference", "cpu", "metal_host", "cuda", "mps", "metal_cuda")


def _load_test_module():
    """torch_argon._C_test, with its op libraries' fakes registered; or the reason it is absent."""
    try:
        importlib.import_module("torch_argon._C_test")
    except ImportError as e:
        return ("torch_argon._C_test (the test executors) is not built: build with "
                f"ARGON_TEST_BUILD=1, as scripts/test.sh does ({e})")
    ops.add_library("argon_host")
    if _has_kernel("argon_metal_cuda", "CUDA"):
        ops.add_library("argon_metal_cuda", plan_fast_path=False)  # has no CPU kernels
    return ""


def _reference_namespace():
    """reference.py shaped like a torch.ops namespace: for every op of the table, its functional
    form (the reference function of the same name; a plan comes back as its seven tensors) and
    its _out form (the functional form's results copied into the written arguments)."""

    def functional(fn):
        def call(*args, **kwargs):  # the reference's parameters carry the schema's names
            result = fn(*args, **kwargs)
            return result.tensors() if isinstance(result, MoEPlan) else result
        return call

    def out_form(name, fn, takes_out_dtype):
        schema = getattr(torch.ops.argon, f"{name}_out").default._schema
        written = [i for i, a in enumerate(schema.arguments)
                   if a.alias_info is not None and a.alias_info.is_write]

        names = [a.name for a in schema.arguments]

        def call(*args):
            inputs = {names[i]: a for i, a in enumerate(args) if i not in written}
            outs = [args[i] for i in written]
            if takes_out_dtype:
                inputs["out_dtype"] = outs[0].dtype
            result = fn(**inputs)
            results = result if isinstance(result, tuple) else (result,)
            for dst, src in zip(outs, results):
                dst.copy_(src)
        return call

    ns = {}
    for name in FUNCTIONAL_OPS:
        raw = getattr(reference, name)
        fn = functional(raw)
        takes_out_dtype = "out_dtype" in inspect.signature(raw).parameters
        ns[name], ns[f"{name}_out"] = fn, out_form(name, fn, takes_out_dtype)
    return SimpleNamespace(**ns)


def _has_kernel(lib, dispatch_key):
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(f"{lib}::moe_plan_out", dispatch_key)
    except RuntimeError:  # a library this build does not define (argon_metal_cuda without CUDA)
        return False


TEST_MODULE_MISSING = _load_test_module()


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
        reason = TEST_MODULE_MISSING or (
            "" if _has_kernel("argon_host", "CPU") else "built without the Metal-on-host runtime")
        # Unavailable: the library may not exist, so the OpSet is argon's (tests skip first).
        return Backend(name, "cpu", OpSet(torch.ops.argon_host if not reason else torch.ops.argon),
                       reason)
    if name == "cuda":
        reason = ("torch sees no CUDA device" if not torch.cuda.is_available()
                  else "" if _has_kernel("argon", "CUDA") else "built without CUDA kernels")
        return Backend(name, "cuda", OpSet(torch.ops.argon), reason)
    if name == "mps":
        reason = ("torch sees no MPS device" if not torch.backends.mps.is_available()
                  else "" if _has_kernel("argon", "MPS") else "built without the MPS backend")
        return Backend(name, "mps", OpSet(torch.ops.argon), reason)
    if name == "metal_cuda":
        reason = ("torch sees no CUDA device" if not torch.cuda.is_available()
                  else TEST_MODULE_MISSING or ("" if _has_kernel("argon_metal_cuda", "CUDA") else
                                               "built without CUDA (the metal_cuda backend comes "
                                               "with the CUDA kernels)"))
        # Unavailable: the library may not exist, so the OpSet is argon's (tests skip first).
        ns = torch.ops.argon_metal_cuda if not reason else torch.ops.argon
        return Backend(name, "cuda", OpSet(ns), reason)
    raise ValueError(f"unknown backend {name!r}; expected one of {NAMES}")


def best_device() -> str:
    """mps, then cuda, then cpu: the first whose kernels are built and whose device is present."""
    for name in ("mps", "cuda"):
        if get(name).available:
            return name
    return "cpu"
