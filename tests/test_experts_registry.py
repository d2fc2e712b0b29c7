"""The experts registry and flow (torch_argon/experts): which implementation runs a call and why
the others decline (explain), path= by family and by name, the activation_quant option, each
implementation's tile_m rule, and the decisions made once: arguments checked once per call,
weights objects built at construction (not per forward) and rebuilt when their tensors change."""
import copy
import pickle

import pytest
import torch

import torch_argon
from torch_argon import experts as registry_api
from torch_argon import reference
from torch_argon.experts import registry
from torch_argon.experts.base import ExpertsCall
from torch_argon.nn import MoE, QuantExperts, TopKRouter
from torch_argon.ops import OpSet
from torch_argon.quant import QuantizedExperts, QuantizedWeight, random_quantized
from torch_argon.testing import backends
from routing_cases import make_ids, make_weights

T, H, I, E, K = 12, 64, 32, 8, 2


def dense(dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=g).to(dtype)
    router = (torch.randn(E, H, generator=g) * H ** -0.5).to(dtype)
    wgu = (torch.randn(E, 2 * I, H, generator=g) * H ** -0.5).to(dtype)
    wd = (torch.randn(E, H, I, generator=g) * I ** -0.5).to(dtype)
    return x, router, wgu, wd


def quantized(fmt="Q8_0", activation_quant="auto", H=256, I=256):
    g = torch.Generator().manual_seed(1)
    return QuantizedExperts(
        gate_up=QuantizedWeight(random_quantized(fmt, 2 * I, H, leading=(E,), std=H ** -0.5,
                                                 generator=g), fmt, H),
        down=QuantizedWeight(random_quantized(fmt, H, I, leading=(E,), std=I ** -0.5,
                                              generator=g), fmt, I),
        activation_quant=activation_quant)


def reasons(x, experts, **kw):
    return dict(registry_api.explain(x, experts, **kw))


# ---- which implementation, and why not the others -------------------------------------------

def test_explain_lists_every_implementation_in_order_with_its_reason():
    x, _, wgu, wd = dense()
    got = registry_api.explain(x, (wgu, wd))
    assert [name for name, _ in got] == [impl.name for impl in registry.IMPLEMENTATIONS]
    why = dict(got)
    assert why["triton_dense"] == "the Triton kernels run on CUDA tensors only"
    assert why["triton_quantized"] == "it runs quantized experts, these are dense"
    assert why["cpu_workspace"] == "" and why["ops_dense"] == ""
    assert registry_api.choose(x, (wgu, wd), n_entries=T * K).name == "cpu_workspace"
    # what declines the CPU workspace, each in its own words
    reference_ops = backends.get("reference").ops
    assert "OpSet other than the argon library" in reasons(x, (wgu, wd), ops=reference_ops)[
        "cpu_workspace"]
    with torch.enable_grad():
        needs_grad = reasons(x.requires_grad_(), (wgu, wd))["cpu_workspace"]
    assert "autograd records this call" in needs_grad


def test_quantized_experts_choose_the_quantized_ops_on_the_cpu():
    q = quantized()
    x = torch.randn(T, 256)
    why = reasons(x, q)
    assert why["ops_quantized"] == "" and why["ops_dense"].startswith("it runs dense experts")
    chosen = registry_api.choose(x, q, n_entries=T * K)
    assert (chosen.name, chosen.path, chosen.tile_m) == ("ops_quantized", "ops", 1)
    assert [name for name, _ in chosen.declined] == ["cuda_quantized", "cuda_quantized_tiled",
                                                    "cuda_quantized_mixed",
                                                    "cuda_quantized_dequant", "triton_quantized"]


def test_float_parts_are_declined_by_the_quantized_ops_with_the_way_out():
    g = torch.Generator().manual_seed(2)
    down = QuantizedWeight(random_quantized("F16", 256, 256, leading=(E,), generator=g), "F16",
                           256)
    gate_up = QuantizedWeight(random_quantized("Q8_0", 512, 256, leading=(E,), generator=g),
                              "Q8_0", 256)
    q = QuantizedExperts(down=down, gate_up=gate_up)
    why = reasons(torch.randn(T, 256), q)["ops_quantized"]
    assert "down stored as plain floats" in why and "build_experts" in why
    with pytest.raises(ValueError, match="no experts implementation runs this call"):
        torch_argon.moe_experts(torch.randn(T, 256), make_ids(T, K, E, "uniform"),
                                make_weights(T, K), q)


@pytest.mark.parametrize("path,name", [("auto", "cpu_workspace"), ("ops", "cpu_workspace"),
                                       ("ops_dense", "ops_dense"),
                                       ("cpu_workspace", "cpu_workspace")])
def test_path_by_family_and_by_name_runs_the_same_layer(path, name):
    x, router, wgu, wd = dense()
    assert registry_api.choose(x, (wgu, wd), n_entries=T * K, path=path).name == name
    with torch.no_grad():
        got = torch_argon.moe_layer(x, router, (wgu, wd), K, path=path)
        want = torch_argon.moe_layer(x, router, (wgu, wd), K,
                                     ops=backends.get("reference").ops)
    ids, w = torch_argon.route(x, router, K)
    ref = reference.moe_layer(x, router, (wgu, wd), K, topk_ids=ids, topk_weights=w)
    assert float((got - ref).norm() / ref.norm()) < 1e-5
    assert float((want - ref).norm() / ref.norm()) < 1e-5


def test_ops_dense_and_cpu_workspace_give_the_same_bits():
    x, router, wgu, wd = dense(torch.bfloat16)
    with torch.no_grad():
        a = torch_argon.moe_layer(x, router, (wgu, wd), K, path="ops_dense")
        b = torch_argon.moe_layer(x, router, (wgu, wd), K, path="cpu_workspace")
    assert torch.equal(a, b)


@pytest.mark.parametrize("path,match", [
    ("triton", r"path='triton' cannot run here: cuda_hopper_padded: the Hopper GEMMs run "
               r"on CUDA tensors, not cpu; cuda_hopper_dense: the Hopper GEMMs run "
               r"on CUDA tensors, not cpu; triton_dense: the Triton kernels run on CUDA"),
    ("triton_quantized", r"triton_quantized: it runs quantized experts, these are dense"),
    ("fast", r"path must be one of \('auto', 'triton', 'ops', 'cuda_hopper_padded', "
             r"'cuda_hopper_dense', 'triton_dense'"),
])
def test_paths_that_cannot_run_say_why(path, match):
    x, router, wgu, wd = dense()
    with pytest.raises(ValueError, match=match):
        torch_argon.moe_layer(x, router, (wgu, wd), K, path=path)


# ---- activation_quant ---------------------------------------------------------------------------

def test_activation_quant_values_are_checked_everywhere():
    x, router, wgu, wd = dense()
    match = r"activation_quant must be one of \('auto', 'none', 'q8'\), got 'int8'"
    with pytest.raises(ValueError, match=match):
        torch_argon.moe_layer(x, router, (wgu, wd), K, activation_quant="int8")
    with pytest.raises(ValueError, match=match):
        torch_argon.moe_experts(x, make_ids(T, K, E, "uniform"), make_weights(T, K), (wgu, wd),
                                activation_quant="int8")
    with pytest.raises(ValueError, match=match):
        MoE(H, I, E, K, activation_quant="int8")
    with pytest.raises(ValueError, match=match):
        quantized(activation_quant="int8")


def test_q8_runs_on_the_cpu_and_is_declined_where_moe_qmm_has_no_q8_kernels():
    x = torch.randn(T, 256)
    ids, w = make_ids(T, K, E, "uniform"), make_weights(T, K)
    q = quantized()
    assert reasons(x, q, activation_quant="q8")["ops_quantized"] == ""
    with torch.no_grad():
        got = torch_argon.moe_experts(x, ids, w, q, activation_quant="q8")
        want = torch_argon.moe_experts(x, ids, w, q, activation_quant="q8",
                                       ops=backends.get("reference").ops)
    # the down GEMM quantizes h, which the two compute with different float32 roundings: a code
    # at a rounding tie may flip, so the layer is compared in norm (each GEMM is held to 1e-5 of
    # its q8 reference in tests/test_qmm_q8_cpu.py)
    assert ((got - want).norm() / want.norm()).item() < 2e-3
    call = ExpertsCall.of(x.to("meta"), q, ops=torch_argon.ops.argon_ops, activation_quant="q8")
    assert registry.BY_NAME["ops_quantized"].supports(call) == (
        "activation_quant='q8': moe_qmm has q8 kernels on the CPU and on CUDA (the gpuq kernels), "
        "these activations are on meta")


@pytest.mark.parametrize("isa", torch.ops.argon_cpu.isas())
def test_auto_is_q8_where_the_cpu_has_integer_dot_products(isa):
    """"auto" resolves to q8 on the AVX-512 VNNI kernels, to none on the others (the measured
    choice, experts/ops_quantized.py), and the layer's output follows."""
    from torch_argon.experts.ops_quantized import Q8_BY_DEFAULT_ON, default_activation_quant
    x = torch.randn(T, 256)
    ids, w = make_ids(T, K, E, "uniform"), make_weights(T, K)
    q = quantized()
    before = torch.ops.argon_cpu.isa()
    torch.ops.argon_cpu.set_isa(isa)
    try:
        mode = default_activation_quant(ExpertsCall.of(x, q, ops=torch_argon.ops.argon_ops))
        assert mode == ("q8" if isa in Q8_BY_DEFAULT_ON else "none")
        with torch.no_grad():
            auto = torch_argon.moe_experts(x, ids, w, q)
            explicit = torch_argon.moe_experts(x, ids, w, q, activation_quant=mode)
        assert torch.equal(auto, explicit)
    finally:
        torch.ops.argon_cpu.set_isa(before)


def test_the_layer_option_overrides_the_weights_preference():
    """QuantizedExperts(activation_quant="q8") asks for 8-bit activations; the layer's "none"
    wins, its "auto" defers to the weights."""
    x = torch.randn(T, 256)
    ids, w = make_ids(T, K, E, "uniform"), make_weights(T, K)
    prefers_q8 = quantized(activation_quant="q8")
    assert reasons(x, prefers_q8)["ops_quantized"] == ""
    with torch.no_grad():
        layer_none = torch_argon.moe_experts(x, ids, w, prefers_q8, activation_quant="none")
        layer_auto = torch_argon.moe_experts(x, ids, w, prefers_q8)
        none = torch_argon.moe_experts(x, ids, w, quantized(), activation_quant="none")
        q8 = torch_argon.moe_experts(x, ids, w, quantized(), activation_quant="q8")
    assert torch.equal(layer_none, none)
    assert torch.equal(layer_auto, q8)
    assert not torch.equal(none, q8)
    moe = MoE.from_modules(torch.nn.Identity(), QuantExperts(prefers_q8))
    assert moe.experts.expert_weights().activation_quant == "q8"


# ---- tile_m: one rule per implementation ---------------------------------------------------------

def test_each_implementation_applies_its_own_tile_m_rule():
    from torch_argon.triton_ops import configs, quant_configs
    x = torch.randn(T, 256)
    dense_call = ExpertsCall.of(x, torch_argon.DenseExperts(torch.randn(E, 64, 256),
                                                            torch.randn(E, 256, 32)),
                                ops=torch_argon.argon_ops)
    quant_call = ExpertsCall.of(x, quantized(), ops=torch_argon.argon_ops)
    for n in (0, 40, 80, 160, 1000, 100000):
        assert registry.BY_NAME["triton_quantized"].tile_m(quant_call, n) == \
            quant_configs.quant_layer_tile_m(n, E)
        # the quantized rule is the dense default rule's (same limits), capped at its BLOCK_M
        assert quant_configs.quant_layer_tile_m(n, E) == configs.default_tile_m(n, E)
        assert registry.BY_NAME["ops_dense"].tile_m(dense_call, n) == 1
    assert registry.BY_NAME["ops_dense"].tile_m(
        ExpertsCall.of(x, quant_call.weights, ops=None, tile_m=32), 10) == 32


# ---- decided once --------------------------------------------------------------------------------

def test_router_and_experts_are_checked_once_per_layer_call(monkeypatch):
    from torch_argon import layer, routing, weights
    calls = {"router": 0, "experts": 0}
    check_router, check_input = routing.check_router, weights.DenseExperts.check_input

    def count_router(*a, **kw):
        calls["router"] += 1
        return check_router(*a, **kw)

    def count_input(self, x):
        calls["experts"] += 1
        return check_input(self, x)

    monkeypatch.setattr(layer, "check_router", count_router)
    monkeypatch.setattr(routing, "check_router", count_router)
    monkeypatch.setattr(weights.DenseExperts, "check_input", count_input)
    x, router, wgu, wd = dense()
    with torch.no_grad():
        torch_argon.moe_layer(x, router, (wgu, wd), K)
    assert calls == {"router": 1, "experts": 1}


def quant_moe():
    with torch.device("meta"):
        router = TopKRouter(256, E, K)
    router.weight = torch.nn.Parameter(torch.randn(E, 256) * 256 ** -0.5, requires_grad=False)
    return MoE.from_modules(router, QuantExperts(quantized()))


def test_quantized_weights_object_is_built_at_construction_not_per_forward(monkeypatch):
    moe = quant_moe()
    built = moe.experts.expert_weights()
    made = []
    post_init = QuantizedWeight.__post_init__
    monkeypatch.setattr(QuantizedWeight, "__post_init__",
                        lambda self: made.append(self) or post_init(self))
    x = torch.randn(5, 256)
    with torch.no_grad():
        first, second = moe(x), moe(x)
    assert torch.equal(first, second)
    assert made == [] and moe.experts.expert_weights() is built


def test_quantized_weights_object_follows_to_and_load_state_dict():
    moe = quant_moe()
    before = moe.experts.expert_weights()
    moe.to(torch.float64)  # _apply: buffers are new tensors (uint8 ones unchanged in value)
    after = moe.experts.expert_weights()
    assert after is not before and after.down.data is moe.experts.down_blocks
    # an in-place load keeps the same tensors: the object stays, and sees the new bytes
    state = {k: (v.clone() if k != "experts.down_blocks" else torch.zeros_like(v))
             for k, v in moe.state_dict().items()}
    moe.load_state_dict(state)
    assert moe.experts.expert_weights() is after
    assert not moe.experts.expert_weights().down.data.any()
    # assign=True puts new tensors in: the object is built again over them
    state["experts.down_blocks"] = torch.ones_like(state["experts.down_blocks"])
    moe.load_state_dict(state, assign=True)
    rebuilt = moe.experts.expert_weights()
    assert rebuilt is not after and rebuilt.down.data is moe.experts.down_blocks
    assert bool((rebuilt.down.data == 1).all())


def test_dense_weights_object_follows_dtype_conversion_and_copies():
    moe = MoE(H, I, E, K, is_transposed=True, dtype=torch.float32).eval()
    x = torch.randn(7, H)
    with torch.no_grad():
        want = moe(x)
    moe.to(torch.bfloat16)
    w = moe.experts.expert_weights()
    assert w.dtype == torch.bfloat16
    assert w.gate_up.data_ptr() == moe.experts.gate_up_proj.data_ptr()
    with torch.no_grad():
        got = moe(x.bfloat16())
    assert float((got.float() - want).norm() / want.norm()) < 3e-2
    # A copy builds its own object over its own tensors (the views of parameters that require
    # grad would not deepcopy). (nn.MoE itself holds the ops namespace, which does not copy.)
    twin = copy.deepcopy(moe.experts)
    assert twin.expert_weights().gate_up.data_ptr() == twin.gate_up_proj.data_ptr()
    clone = pickle.loads(pickle.dumps(moe.experts))
    assert torch.equal(clone.expert_weights().down, moe.experts.expert_weights().down)


def test_another_opset_object_over_the_argon_library_is_not_the_library():
    fresh = OpSet(torch.ops.argon)
    fresh.ns = None
    x, _, wgu, wd = dense()
    assert registry_api.choose(x, (wgu, wd), n_entries=T * K, ops=fresh).name == "ops_dense"


def test_explain_and_choose_refuse_what_the_layer_refuses():
    x, _, wgu, wd = dense()
    with pytest.raises(ValueError, match=r"experts \(w_gate_up, w_down\) are torch.float16 but x"):
        registry_api.explain(x, (wgu.half(), wd.half()))
    with pytest.raises(ValueError, match="activation must be one of"):
        registry_api.choose(x, (wgu, wd), n_entries=T * K, activation="relu")
