"""The op table (csrc/op_table.h) is the one list of ops: every op of it must be registered on
every built backend, have a fake, a reference function and an OpSet method, so that an op added
to the table cannot be half-registered without a test failing."""
import pytest
import torch

from torch_argon import _C, reference
from torch_argon.ops import FUNCTIONAL_OPS, LIBRARIES, OP_NAMES, OpSet
from torch_argon.testing import backends


def has_kernel(lib, name, key):
    return torch._C._dispatch_has_kernel_for_dispatch_key(f"{lib}::{name}", key)


def test_op_names_come_from_the_table():
    assert FUNCTIONAL_OPS == _C.op_names()
    assert len(FUNCTIONAL_OPS) >= 5 and len(set(FUNCTIONAL_OPS)) == len(FUNCTIONAL_OPS)
    assert OP_NAMES == tuple(n for op in FUNCTIONAL_OPS for n in (op, op + "_out"))


@pytest.mark.parametrize("lib", LIBRARIES)
@pytest.mark.parametrize("name", OP_NAMES)
def test_every_op_is_registered(lib, name):
    assert has_kernel(lib, name, "CompositeExplicitAutograd") == (not name.endswith("_out"))
    assert has_kernel(lib, name, "Autograd"), "no autograd-key kernel (autograd_skip.cpp)"
    assert has_kernel(lib, name, "Meta"), "no fake (ops.py)"
    if name.endswith("_out"):
        assert has_kernel(lib, name, "CPU")


@pytest.mark.parametrize("key", ["CUDA", "MPS"])
def test_device_backends_have_every_op(key):
    """Where the extension was built with a device backend (its plan kernel is there), every
    _out op has a kernel for that device."""
    if not has_kernel("argon", "moe_plan_out", key):
        pytest.skip(f"built without a {key} backend")
    missing = [n for n in OP_NAMES if n.endswith("_out") and not has_kernel("argon", n, key)]
    assert not missing


@pytest.mark.parametrize("name", FUNCTIONAL_OPS)
def test_reference_and_opset_cover_every_op(name):
    assert callable(getattr(reference, name))
    assert callable(getattr(OpSet, name))
    ref_ns = backends.get("reference").ops.ns
    assert callable(getattr(ref_ns, name)) and callable(getattr(ref_ns, name + "_out"))
