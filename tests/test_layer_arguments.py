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


# ---- dtypes and devices, named at the entry the caller used (issue 42 item 3) -------------------

def test_router_of_another_dtype_names_router_weight_and_x():
    """Was torch's raw "expected m1 and m2 to have the same dtype" from the router GEMM."""
    x, router, wgu, wd = layer_args()
    with pytest.raises(ValueError, match=r"router_weight is torch.float16 but x is torch.float32"):
        torch_argon.moe_layer(x, router.half(), (wgu, wd), K)
    with pytest.raises(ValueError, match=r"router_weight is torch.float16 but x is torch.float32"):
        torch_argon.route(x, router.half(), K)


@pytest.mark.parametrize("entry", ["moe_layer", "moe_experts", "nn.MoE"])
def test_experts_of_another_dtype_name_the_experts_and_x(entry):
    """fp16 experts with fp32 x: was "w must have the dtype of xs" (an inner op's names)."""
    x, router, wgu, wd = layer_args()
    match = (r"experts \(w_gate_up, w_down\) are torch.float16 but x is torch.float32: the "
             r"expert stacks must have x's dtype")
    with pytest.raises(ValueError, match=match):
        if entry == "moe_layer":
            torch_argon.moe_layer(x, router, (wgu.half(), wd.half()), K)
        elif entry == "moe_experts":
            torch_argon.moe_experts(x, make_ids(T, K, E, "uniform"), make_weights(T, K),
                                    (wgu.half(), wd.half()))
        else:
            moe = torch_argon.nn.MoE(H, I, E, K)
            moe.experts.half()
            with torch.no_grad():
                moe(x)


def test_expert_stacks_of_two_dtypes_are_refused_naming_both():
    x, router, wgu, wd = layer_args()
    with pytest.raises(ValueError, match="w_gate_up is torch.float32 and w_down torch.float16"):
        torch_argon.moe_layer(x, router, (wgu, wd.half()), K)


def test_shared_expert_weights_of_another_dtype_are_named():
    x, router, wgu, wd = layer_args()
    shared = (torch.randn(5, H).half(), torch.randn(5, H), torch.randn(H, 5))
    with pytest.raises(ValueError, match=r"shared_expert_weights\[0\] is torch.float16 on cpu "
                                         r"but x is torch.float32"):
        torch_argon.moe_layer(x, router, (wgu, wd), K, shared_expert_weights=shared)


@pytest.mark.parametrize("bad,match", [
    (dict(shared=torch.randn(T + 1, H)), r"shared must be \[T, H\] = \[6, 16\] like x"),
    (dict(residual=torch.randn(T, H + 1)), r"residual must be \[T, H\] = \[6, 16\] like x"),
    (dict(activation="relu"), 'activation must be one of "silu", "gelu", "gelu_tanh"'),
])
def test_layer_extras_are_checked_before_any_work(bad, match):
    x, router, wgu, wd = layer_args()
    with pytest.raises(ValueError, match=match):
        torch_argon.moe_layer(x, router, (wgu, wd), K, **bad)


@pytest.mark.skipif(not torch.backends.mps.is_available() and not torch.cuda.is_available(),
                    reason="needs a second device (CUDA or MPS) to put the experts on")
def test_experts_on_another_device_than_x_are_named():
    x, router, wgu, wd = layer_args()
    dev = "cuda" if torch.cuda.is_available() else "mps"
    with pytest.raises(ValueError, match=r"experts \(w_gate_up, w_down\) are on .* but x is on cpu"):
        torch_argon.moe_layer(x, router, (wgu.to(dev), wd.to(dev)), K)
    with pytest.raises(ValueError, match=r"router_weight is on .* but x is on cpu"):
        torch_argon.moe_layer(x, router.to(dev), (wgu, wd), K)


def test_quantized_experts_name_x_when_it_is_no_float_they_take():
    from torch_argon.quant import QuantizedExperts, QuantizedWeight, random_quantized
    q = QuantizedExperts(
        gate_up=QuantizedWeight(random_quantized("Q8_0", 2 * 32, 32, leading=(E,)), "Q8_0", 32),
        down=QuantizedWeight(random_quantized("Q8_0", 32, 32, leading=(E,)), "Q8_0", 32))
    x = torch.randn(T, 32, dtype=torch.float64)
    with pytest.raises(ValueError, match="x must be float32, float16 or bfloat16 to run quantized "
                                         "experts, got torch.float64"):
        torch_argon.moe_experts(x, make_ids(T, K, E, "uniform"), make_weights(T, K), q)
    with pytest.raises(ValueError, match=r"gate_up must be \[E, N, n_in=H=16\] to take x"):
        torch_argon.moe_experts(torch.randn(T, 16), make_ids(T, K, E, "uniform"),
                                make_weights(T, K), q)
