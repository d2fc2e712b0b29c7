"""The fakes are the checks: every misuse of the op error suite (tests/misuse_cases.py) fails on
meta tensors with the exception and message it gets from the kernels, and under
torch.compile(fullgraph=True) while tracing (no graph reaches the compiler backend), with that
exception in the error. The fakes run the C++ checks themselves (csrc/python_checks.cpp)."""
import pytest
import torch

from misuse_cases import CASES, skip_without_kernels
from torch_argon.ops import argon_ops


def error_of(case, ops, device):
    call, tensors = case.make(ops, device)
    with pytest.raises(case.exception, match=case.match) as err:
        call(*tensors)
    return err.value


@pytest.mark.parametrize("case", CASES, ids=str)
def test_meta_misuse_fails_as_on_the_device(backend, case):
    skip_without_kernels(backend, case)
    on_device = error_of(case, backend.ops, backend.device)
    on_meta = error_of(case, backend.ops, "meta")
    assert type(on_meta) is type(on_device)
    assert str(on_meta) == str(on_device)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_compiled_misuse_fails_while_tracing(case):
    eager = error_of(case, argon_ops, "cpu")
    call, tensors = case.make(argon_ops, "cpu")
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    with pytest.raises(Exception) as err:
        torch.compile(call, fullgraph=True, backend=record)(*tensors)
    assert not graphs, "the misuse compiled: it was not refused while tracing"
    got = err.value
    assert (type(got) is type(eager) and str(got) == str(eager)) or repr(eager) in str(got), got
