import importlib.util

import pytest
import torch

from torch_argon.testing import backends


def backend_params(names):
    """pytest params for backends by name; one that is not available here is skipped with its
    reason."""
    out = []
    for name in names:
        be = backends.get(name)
        marks = [] if be.available else [pytest.mark.skip(reason=f"{name}: {be.reason}")]
        out.append(pytest.param(name, marks=marks, id=name))
    return out


def needs(package, what):
    """A skip mark for a test that needs an optional package (not a requirement of
    torch_argon: the GPU machine's image, a user's environment may lack it): the reason names
    the package and what the test uses it for."""
    return pytest.mark.skipif(importlib.util.find_spec(package) is None,
                              reason=f"needs the {package} package ({what}): pip install {package}")


# The kernels under test: every backend but the reference itself.
KERNEL_BACKENDS = ("cpu", "metal_host", "cuda", "mps", "metal_cuda")


@pytest.fixture(params=backend_params(KERNEL_BACKENDS))
def backend(request):
    be = backends.get(request.param)
    if be.device == "cuda":
        torch.cuda.synchronize()
    return be


@pytest.fixture
def ref():
    return backends.get("reference").ops


def bits(t):
    """A tensor's raw bits, so equality is bit for bit (-0.0 != 0.0, NaN == same NaN)."""
    t = t.detach().cpu().contiguous()
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.view(view)


def assert_bits_equal(actual, expected, name=""):
    a, e = bits(actual), bits(expected)
    assert a.shape == e.shape, f"{name}: shape {tuple(a.shape)} != {tuple(e.shape)}"
    if not torch.equal(a, e):
        diff = (a != e).nonzero()
        first = tuple(diff[0].tolist())
        raise AssertionError(
            f"{name}: {diff.shape[0]} of {a.numel()} elements differ; first at {first}: "
            f"{actual.detach().cpu()[first]} != {expected.detach().cpu()[first]}"
        )
