"""torch.library.opcheck for every op (functional and _out forms) of each backend's library:
schema and mutation annotations, fake impls, and AOT dispatch."""
import pytest
import torch

from op_cases import OPS, op_cases


@pytest.mark.parametrize("op_name", OPS)
def test_opcheck(backend, op_name):
    op, args = op_cases(backend)[op_name]
    torch.library.opcheck(op, args)


def test_opcheck_float_dequantize_out_check():
    """The op that checks out= for the plain float formats of torch_argon.dequantize (ops.py)."""
    w_q = torch.randn(3, 8).half().view(torch.uint8)
    torch.library.opcheck(torch.ops.argon._check_float_dequantize_out, (w_q, 8, torch.empty(3, 8)))
