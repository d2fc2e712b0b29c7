"""torch.library.opcheck for every op (functional and _out forms) of each backend's library:
schema and mutation annotations, fake impls, and AOT dispatch."""
import pytest
import torch

from op_cases import OPS, op_cases


@pytest.mark.parametrize("op_name", OPS)
def test_opcheck(backend, op_name):
    op, args = op_cases(backend)[op_name]
    torch.library.opcheck(op, args)
