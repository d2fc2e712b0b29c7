"""moe_layer / route / moe_experts argument checks: each names the caller's argument (never an
internal tensor such as topk_ids the caller did not pass), before any work; and the same bad
condition raises the same exception type and message on every backend."""
import pytest
import torch

import torch_argon
from torch_argon.plan import MoEPlan
from routing_cases import make_ids, make_weights

T, H, E, I, K = 6, 16, 4, 8, 2


def layer_args():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(T, H, generator=g)
    router = torch.randn(E, H, generator=g)
    wgu = torch.randn(E, 2 * I, H, generator=g)
    wd = torch.randn(E, H, I, generator=g)
    return x, router, wgu, wd


@pytest.mark.parametrize("change,match", [
    (lambda x, r: (x, r[:3]), r"router_weight has 3 rows \(one per expert\) but the expert "
                              r"stacks hold 4"),
    (lambda x, r: (x, torch.cat([r, r[:1]])), "router_weight has 5 rows"),
    (lambda x, r: (x, r[:, :5]), r"router_weight must be \[E, H=16\]"),
    (lambda x, r: (x[0], r), r"x must be 2-D \[T, H\]"),
    (lambda x, r: (x[None], r), r"x must be 2-D \[T, H\]"),
])
def test_layer_names_the_bad_argument(change, match):
    x, router, wgu, wd = layer_args()
    x, router = change(x, router)
    with pytest.raises(ValueError, match=match):
        torch_argon.moe_layer(x, router, (wgu, wd), K)


@pytest.mark.parametrize("top_k", [0, -1, E + 1, 2.0])
def test_layer_top_k_range(top_k):
    x, router, wgu, wd = layer_args()
    with pytest.raises(ValueError, match=r"top_k must be an int in \[1, E=4\]"):
        torch_argon.moe_layer(x, router, (wgu, wd), top_k)
    with pytest.raises(ValueError, match=r"top_k must be an int in \[1, E=4\]"):
        torch_argon.route(x, router, top_k)


def test_layer_experts_must_be_weights_or_a_pair():
    x, router, wgu, wd = layer_args()
    with pytest.raises(TypeError, match=r"a \(w_gate_up, w_down\) pair of tensors, got Tensor"):
        torch_argon.moe_layer(x, router, wgu, K)


def test_experts_topk_ids_must_match_x():
    x, _, wgu, wd = layer_args()
    ids, w = make_ids(T + 1, K, E, "uniform"), make_weights(T + 1, K)
    with pytest.raises(ValueError, match=r"topk_ids must be \[T=6, K\]"):
        torch_argon.layer.moe_experts(x, ids, w, (wgu, wd))


def bad_id_error(backend):
    ids, w = make_ids(T, K, E, "uniform").to(backend.device), make_weights(T, K).to(backend.device)
    ids[1, 0] = E + 3
    with pytest.raises(ValueError) as err:
        backend.ops.moe_plan(ids, w, E, 4, check_ids=True)
    return err.value


def test_bad_ids_same_exception_everywhere(backend):
    """The CPU refuses bad ids as it plans; GPU-style backends count them, and check_ids=True
    reads the count and raises: a ValueError either way."""
    assert "out" in str(bad_id_error(backend))


@pytest.mark.parametrize("n_expert,match", [(2**70, "n_expert must fit in int64"),
                                            (0, "n_expert must be >= 1"),
                                            (3.0, "n_expert must be an int")])
def test_n_expert_errors_same_everywhere(backend, n_expert, match):
    ids, w = make_ids(T, K, E, "uniform").to(backend.device), make_weights(T, K).to(backend.device)
    with pytest.raises(ValueError, match=match):
        backend.ops.moe_plan(ids, w, n_expert, 4)


def test_plan_out_as_a_plain_tuple(backend, ref):
    ids, w = make_ids(T, K, E, "uniform"), make_weights(T, K)
    want = ref.moe_plan(ids, w, E, 4)
    bufs = tuple(torch.empty_like(t).to(backend.device) for t in want.tensors())
    plan = backend.ops.moe_plan(ids.to(backend.device), w.to(backend.device), E, 4, out=bufs)
    assert isinstance(plan, MoEPlan) and plan.tile_m == 4
    assert all(a is b for a, b in zip(plan.tensors(), bufs))
    assert all(torch.equal(a.cpu(), b) for a, b in zip(plan.tensors(), want.tensors()))
    with pytest.raises(ValueError, match="out must be a MoEPlan or a tuple of its seven"):
        backend.ops.moe_plan(ids.to(backend.device), w.to(backend.device), E, 4, out=bufs[:6])
