"""torch.compile(fullgraph=True) traces the ops and the whole layer with no graph break, and the
compiled result equals the eager one."""
import pytest
import torch

import torch_argon
from routing_cases import make_ids, make_weights


def test_compile_whole_layer_fullgraph():
    torch.manual_seed(0)
    T, H, E, I, K = 40, 64, 8, 32, 2
    x = torch.randn(T, H)
    rw = torch.randn(E, H)
    wgu = torch.randn(E, 2 * I, H) / H ** 0.5
    wd = torch.randn(E, H, I) / I ** 0.5
    torch._dynamo.reset()
    compiled = torch.compile(torch_argon.moe_layer, fullgraph=True)
    eager = torch_argon.moe_layer(x, rw, (wgu, wd), K, renormalize=True)
    got = compiled(x, rw, (wgu, wd), K, renormalize=True)
    torch.testing.assert_close(got, eager, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_plan_gather_combine(dynamic):
    E, tm = 16, 16

    def step(ids, w, x):
        plan = torch_argon.moe_plan(ids, w, E, tm)
        xs = torch_argon.moe_gather(x, plan)
        return torch_argon.moe_combine(xs, plan, w)

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, dynamic=dynamic)
    for T in (10, 33):  # a second shape: recompiles, or reuses the dynamic graph
        ids, w = make_ids(T, 4, E, "neg_some", seed=T), make_weights(T, 4)
        x = torch.randn(T, 24)
        assert torch.equal(compiled(ids, w, x), step(ids, w, x))
