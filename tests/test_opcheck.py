"""torch.library.opcheck for every op (functional and _out forms) of each backend's library:
schema and mutation annotations, fake impls, and AOT dispatch; with autograd for the ops that have
backward formulas."""
import pytest
import torch

from op_cases import OPS, op_cases
from torch_argon.autograd import FORMULAS


@pytest.mark.parametrize("op_name", OPS)
def test_opcheck(backend, op_name):
    op, args = op_cases(backend)[op_name]
    torch.library.opcheck(op, args)


def test_opcheck_float_dequantize_out_check():
    """The op that checks out= for the plain float formats of torch_argon.dequantize (ops.py)."""
    w_q = torch.randn(3, 8).half().view(torch.uint8)
    torch.library.opcheck(torch.ops.argon._check_float_dequantize_out, (w_q, 8, torch.empty(3, 8)))


@pytest.mark.parametrize("op_name", list(FORMULAS))
def test_opcheck_with_autograd(backend, op_name):
    """The ops with backward formulas, every floating input requiring grad: opcheck's
    autograd-registration test, and its AOT dispatch test compares the traced backward's
    gradients with eager ones."""
    op, args = op_cases(backend)[op_name]
    args = [a.detach().clone().requires_grad_() if isinstance(a, torch.Tensor)
            and a.is_floating_point() else a for a in args]
    torch.library.opcheck(op, args)
