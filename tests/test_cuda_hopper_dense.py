"""The Hopper dense experts (experts/cuda_hopper_dense.py) and their grouped GEMM op
(argon::hopper_grouped_mm, csrc/hopper: CUTLASS 3's warp-specialized ptr-array kernel).

On every machine: where the registry puts it and why it declines (on the CPU, without the unit,
and under path="auto" until the tuned table has measured entries for the GPU), its tile
configurations against the C header's list, the op's fakes. On a GPU of compute capability 9.0
with the unit built: the GEMM against torch_argon.reference for every configuration, fp16 and
bf16, experts with 0 rows, -1 ids, T = 0, garbage-filled outputs (rows outside the experts'
groups untouched), the whole experts path, CUDA graph capture and replay, torch.compile and
opcheck."""
import pytest
import torch

import torch_argon
from hopper_cases import (REL_TOL, bench_hopper, check_compile_fullgraph_matches_eager,
                          check_graph_replay_equals_eager, check_path_activation,
                          check_path_matches_the_reference, cuda_call, dense_experts,
                          header_configs, layer_case, needs_hopper,
                          on_h200,  # noqa: F401 (a fixture)
                          reference_experts)
from routing_cases import garbage_like, make_ids, make_weights
from triton_cases import rel_err
from torch_argon import hopper, reference
from torch_argon.experts import ExpertsCall, registry
from torch_argon.hopper import configs
from torch_argon.weights import DenseExperts

HOPPER = registry.BY_NAME["cuda_hopper_dense"]


# ---- where it sits and why it declines (every machine) -----------------------------------------

def test_registry_tries_it_before_the_triton_dense_gemms():
    names = [impl.name for impl in registry.IMPLEMENTATIONS]
    assert names.index("cuda_hopper_dense") < names.index("triton_dense")
    assert (HOPPER.path, HOPPER.kind, HOPPER.fuses_gather) == ("triton", "dense", False)
    assert "cuda_hopper_dense" in registry.PATHS


def test_on_the_cpu_it_says_cuda():
    x = torch.randn(8, 64, dtype=torch.bfloat16)
    experts = dense_experts()
    why = dict(torch_argon.experts.explain(x, experts))
    assert why["cuda_hopper_dense"] == "the Hopper GEMMs run on CUDA tensors, not cpu"
    assert torch_argon.experts.choose(x, experts, n_entries=16).name == "cpu_workspace"
    with pytest.raises(ValueError, match="path='cuda_hopper_dense' cannot run here: "
                       "cuda_hopper_dense: the Hopper GEMMs run on CUDA tensors"):
        torch_argon.moe_experts(x, make_ids(8, 2, 4, "uniform"), make_weights(8, 2), experts,
                                path="cuda_hopper_dense")


@pytest.mark.skipif(hopper.ops.has_kernel(), reason="this build has the Hopper unit")
def test_a_build_without_the_unit_says_how_to_get_it():
    why = hopper.refusal("cuda")  # decided before any CUDA call: also where no GPU is
    assert "built without the Hopper unit" in why and "nvidia-cutlass" in why


def test_the_op_refuses_cpu_tensors_naming_the_device():
    a = torch.zeros(4, 8, dtype=torch.bfloat16)
    with pytest.raises(NotImplementedError, match="run on CUDA tensors, not cpu"):
        hopper.grouped_mm(a, torch.zeros(1, 8, 8, dtype=torch.bfloat16),
                          torch.zeros(2, dtype=torch.int32), torch.zeros(1, dtype=torch.int32),
                          "pingpong_128x128")


def test_auto_declines_until_measured_and_the_name_runs_it(on_h200, monkeypatch):
    call = cuda_call(dense_experts())
    assert HOPPER.supports(call) == ""
    auto = dict(registry.explain(call, "auto"))["cuda_hopper_dense"]
    assert auto.startswith("no measured win") and "NVIDIA H200 bfloat16" in auto
    assert dict(registry.explain(call, "triton"))["cuda_hopper_dense"] == auto
    assert dict(registry.explain(call, "cuda_hopper_dense"))["cuda_hopper_dense"] == ""
    assert registry.choose(call, "cuda_hopper_dense") is HOPPER
    # a measured row for this GPU and dtype lets the automatic choice take it
    monkeypatch.setitem(configs.MEASURED, ("NVIDIA H200", "bfloat16"),
                        ((1e9, "pingpong_128x128", "pingpong_128x128"),))
    assert dict(registry.explain(call, "auto"))["cuda_hopper_dense"] == ""
    assert registry.choose(call, "auto") is HOPPER
    # ... but not for another dtype
    assert dict(registry.explain(cuda_call(dense_experts(dtype=torch.float16),
                                           dtype=torch.float16), "auto"))[
        "cuda_hopper_dense"].startswith("not yet measured on a GPU")


def test_the_tuned_table_ships_without_measured_entries():
    assert configs.MEASURED == {}


@pytest.mark.parametrize("kwargs,match", [
    (dict(dtype=torch.float32), "same fp16 / bf16 dtype"),
    (dict(H=68), "H=68 and I=32 must be multiples of 8"),
])
def test_it_declines_what_its_gemm_cannot_take(on_h200, kwargs, match):
    dtype = kwargs.pop("dtype", torch.bfloat16)
    experts = dense_experts(dtype=dtype, **kwargs)
    assert match in HOPPER.supports(cuda_call(experts, dtype=dtype))


def test_it_declines_transposed_weight_views(on_h200):
    """A transformers checkpoint's stacks arrive as transposed views (nn.py): the GEMM would
    copy them on every call, so triton_dense takes them."""
    E, H, I = 4, 64, 32
    gu = torch.randn(E, H, 2 * I, dtype=torch.bfloat16).transpose(1, 2)
    dn = torch.randn(E, I, H, dtype=torch.bfloat16).transpose(1, 2)
    why = HOPPER.supports(cuda_call(DenseExperts(gu, dn)))
    assert "contiguous weight stacks" in why
    assert HOPPER.supports(cuda_call(DenseExperts(gu.contiguous(), dn.contiguous()))) == ""


def test_it_declines_where_autograd_records(on_h200):
    experts = dense_experts()
    x = torch.randn(8, 64, dtype=torch.bfloat16, requires_grad=True)  # its device: patched away
    with torch.enable_grad():
        call = ExpertsCall.of(x, experts, ops=torch_argon.argon_ops, n_entries=16)
    assert "autograd records this call" in HOPPER.supports(call)


# ---- the configurations ------------------------------------------------------------------------

def test_configs_are_the_headers_list_in_its_order():
    listed, text = header_configs("hopper_gemm.h")
    assert listed == list(enumerate(configs.CONFIGS))
    assert f"ARGON_HOPPER_N_CONFIGS = {len(configs.CONFIGS)}" in text


@pytest.mark.parametrize("rows,want", [(1, "pingpong_64x128"), (64, "pingpong_64x128"),
                                       (65, "pingpong_128x128"), (256, "pingpong_128x128"),
                                       (257, "pingpong_128x128"), (1e6, "pingpong_128x128")])
def test_default_rule_by_rows_per_expert(rows, want):
    assert configs.default_config(rows) == want
    assert configs.choose(rows, "NVIDIA H200", "bfloat16") == (want, want)


def test_measured_rows_win_in_order(monkeypatch):
    monkeypatch.setitem(configs.MEASURED, ("NVIDIA H200", "bfloat16"), (
        (32, "pingpong_128x128", "pingpong_64x128"),
        (1e9, "cooperative_128x256", "pingpong_128x128")))
    assert configs.choose(20, "NVIDIA H200", "bfloat16") == ("pingpong_128x128",
                                                              "pingpong_64x128")
    assert configs.choose(33, "NVIDIA H200", "bfloat16") == ("cooperative_128x256",
                                                              "pingpong_128x128")
    with pytest.raises(ValueError, match="config must be one of"):
        configs.index("pingpong_256x256")


# ---- the op's fakes (torch.compile's shapes) --------------------------------------------------

def fake_args(R=40, K=64, N=48, E=4, dtype=torch.bfloat16):
    from torch._subclasses.fake_tensor import FakeTensorMode
    mode = FakeTensorMode()
    with mode:
        return mode, (torch.empty(R, K, dtype=dtype), torch.empty(E, N, K, dtype=dtype),
                      torch.empty(E + 1, dtype=torch.int32), torch.empty(E, dtype=torch.int32))


def test_fake_gives_out_shape_and_checks_arguments():
    mode, (a, w, offsets, counts) = fake_args()
    with mode:
        out = torch.ops.argon.hopper_grouped_mm(a, w, offsets, counts, 1)
        assert tuple(out.shape) == (40, 48) and out.dtype == torch.bfloat16
        with pytest.raises(ValueError, match="w's last dimension"):
            torch.ops.argon.hopper_grouped_mm(a, w[:, :, :32], offsets, counts, 1)
        with pytest.raises(ValueError, match="offsets must be"):
            torch.ops.argon.hopper_grouped_mm(a, w, offsets[:4], counts, 1)
        with pytest.raises(ValueError, match="config must be in"):
            torch.ops.argon.hopper_grouped_mm(a, w, offsets, counts, 3)
        with pytest.raises(ValueError, match="out must be"):
            torch.ops.argon.hopper_grouped_mm_out(a, w, offsets, counts, 0,
                                                  torch.empty(40, 47, dtype=torch.bfloat16))


# ---- on a Hopper GPU with the unit built -----------------------------------------------------

def plan_for(ids, w, E, tile_m=1):
    return torch_argon.argon_ops.moe_plan(ids.cuda(), w.cuda(), E, tile_m)


def expected_rows(a, w, plan):
    """{row: a[row] @ w[e]^T in float64} for every row of an expert's group."""
    offsets, counts = plan.offsets.cpu().tolist(), plan.counts.cpu().tolist()
    want = {}
    a64, w64 = a.double().cpu(), w.double().cpu()
    for e, (start, n) in enumerate(zip(offsets, counts)):
        if n:
            want[e] = (slice(start, start + n), a64[start:start + n] @ w64[e].T)
    return want


@needs_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("config", configs.CONFIGS)
@pytest.mark.parametrize("dist", ["uniform", "one_expert", "empty", "neg_some"])
@pytest.mark.parametrize("tile_m", [1, 16])  # 16: padding rows between the experts' groups
def test_gemm_matches_the_reference_on_every_group(dtype, config, dist, tile_m):
    T, K, E, Kd, N = 200, 4, 8, 128, 256
    ids, w = make_ids(T, K, E, dist, seed=3), make_weights(T, K, seed=3)
    plan = plan_for(ids, w, E, tile_m)
    a = (torch.randn(plan.sorted_token.shape[0], Kd) * 0.5).to(dtype).cuda()
    weight = (torch.randn(E, N, Kd) / Kd ** 0.5).to(dtype).cuda()
    out = garbage_like(torch.empty(a.shape[0], N, dtype=dtype, device="cuda"))
    before = out.clone()
    hopper.grouped_mm(a, weight, plan.offsets, plan.counts, config, out=out)
    inside = torch.zeros(a.shape[0], dtype=torch.bool)
    for e, (rows, want) in expected_rows(a, weight, plan).items():
        assert rel_err(out[rows], want) < REL_TOL[dtype], (e, config)
        inside[rows] = True
    # every row outside the experts' groups (padding, tail) is as it was, bit for bit
    outside = ~inside
    assert torch.equal(out.cpu()[outside].view(torch.int16), before.cpu()[outside].view(
        torch.int16))
    # the functional form: zeros outside
    functional = hopper.grouped_mm(a, weight, plan.offsets, plan.counts, config)
    assert torch.equal(functional.cpu()[inside], out.cpu()[inside])
    assert not functional.cpu()[outside].any()


@needs_hopper
@pytest.mark.parametrize("dist", ["uniform", "one_expert", "neg_some"])
def test_the_plan_of_tile_m_1_on_cuda_is_the_reference_plan(dist):
    """The path's plans have tile_m 1 (default_tile_m), which the CUDA plan tests do not use."""
    T, K, E = 300, 8, 64
    ids, w = make_ids(T, K, E, dist, seed=5), make_weights(T, K, seed=5)
    got = plan_for(ids, w, E, tile_m=1)
    want = reference.moe_plan(ids, w, E, 1)
    for name, g, r in zip(got._fields, got.tensors(), want.tensors()):
        assert torch.equal(g.cpu(), r), name
    assert HOPPER.default_tile_m(None, T * K) == 1


@needs_hopper
def test_gemm_with_no_rows_at_all_writes_nothing():
    E = 4
    ids = torch.full((6, 2), -1, dtype=torch.int64)
    plan = plan_for(ids, make_weights(6, 2), E)
    a = torch.randn(plan.sorted_token.shape[0], 64, dtype=torch.bfloat16, device="cuda")
    weight = torch.randn(E, 32, 64, dtype=torch.bfloat16, device="cuda")
    out = garbage_like(torch.empty(a.shape[0], 32, dtype=torch.bfloat16, device="cuda"))
    before = out.clone()
    hopper.grouped_mm(a, weight, plan.offsets, plan.counts, "pingpong_64x128", out=out)
    assert torch.equal(out.view(torch.int16), before.view(torch.int16))
    empty = torch.empty(0, 64, dtype=torch.bfloat16, device="cuda")
    zero = torch.zeros(E + 1, dtype=torch.int32, device="cuda")
    assert hopper.grouped_mm(empty, weight, zero, zero[:E], "pingpong_64x128").shape == (0, 32)


@needs_hopper
def test_strided_plan_vectors_read_as_their_values():
    """offsets / counts as every-other-element views: the kernels index dense int32 arrays, so
    the op must not hand them the views' storage."""
    T, K, E = 100, 4, 8
    ids, w = make_ids(T, K, E, "uniform", seed=9), make_weights(T, K, seed=9)
    plan = plan_for(ids, w, E)
    a = torch.randn(plan.sorted_token.shape[0], 64, dtype=torch.bfloat16, device="cuda")
    weight = torch.randn(E, 32, 64, dtype=torch.bfloat16, device="cuda")
    spread = lambda v: torch.stack([v, torch.full_like(v, 1 << 20)], 1).reshape(-1)[::2]
    offsets, counts = spread(plan.offsets), spread(plan.counts)
    assert offsets.stride(0) == 2 and torch.equal(offsets, plan.offsets)
    want = hopper.grouped_mm(a, weight, plan.offsets, plan.counts, "pingpong_64x128")
    got = hopper.grouped_mm(a, weight, offsets, counts, "pingpong_64x128")
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


@needs_hopper
def test_offsets_no_plan_makes_never_reach_past_the_buffers():
    E, R = 3, 40
    a = torch.randn(R, 64, dtype=torch.bfloat16, device="cuda")
    weight = torch.randn(E, 32, 64, dtype=torch.bfloat16, device="cuda")
    offsets = torch.tensor([0, 30, 1000, 1000], dtype=torch.int32, device="cuda")
    counts = torch.tensor([16, 500, 7], dtype=torch.int32, device="cuda")  # past R, and past it
    big = garbage_like(torch.empty(2 * R, 32, dtype=torch.bfloat16, device="cuda"))
    before = big.clone()
    out = big[:R]
    hopper.grouped_mm(a, weight, offsets, counts, "pingpong_128x128", out=out)
    torch.cuda.synchronize()
    assert torch.equal(big[R:].view(torch.int16), before[R:].view(torch.int16))
    want = a[30:].double() @ weight[1].double().T
    assert rel_err(out[30:], want) < REL_TOL[torch.bfloat16]


@needs_hopper
@pytest.mark.parametrize("kwargs,match", [
    (dict(a=torch.float32), "a must be float16 or bfloat16"),
    (dict(w=torch.float16), "w must have a's dtype"),
    (dict(K=60), "must be multiples of 8"),
    (dict(counts=torch.int64), "counts must be int32"),
    (dict(config=7), "config must be in"),
])
def test_bad_arguments_are_named(kwargs, match):
    E, K = 2, kwargs.get("K", 64)
    a = torch.zeros(8, K, dtype=kwargs.get("a", torch.bfloat16), device="cuda")
    w = torch.zeros(E, 16, K, dtype=kwargs.get("w", torch.bfloat16), device="cuda")
    offsets = torch.zeros(E + 1, dtype=torch.int32, device="cuda")
    counts = torch.zeros(E, dtype=kwargs.get("counts", torch.int32), device="cuda")
    with pytest.raises(ValueError, match=match):
        torch.ops.argon.hopper_grouped_mm(a, w, offsets, counts, kwargs.get("config", 0))


@needs_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("dist", ["uniform", "zipf", "one_expert", "empty", "neg_some",
                                  "neg_all"])
@pytest.mark.parametrize("T", [0, 1, 300])
def test_experts_path_matches_the_reference(dtype, dist, T):
    check_path_matches_the_reference("cuda_hopper_dense", dtype, dist, T)


@needs_hopper
@pytest.mark.parametrize("activation", ["silu", "gelu"])
def test_experts_path_activations(activation):
    check_path_activation("cuda_hopper_dense", activation)


@needs_hopper
def test_experts_path_every_config_by_rows_per_expert(monkeypatch):
    x, ids, w, experts = layer_case(torch.bfloat16, T=512, K=8, E=4)
    want = reference_experts(x, ids, w, experts)
    for name in configs.CONFIGS:
        monkeypatch.setattr(configs, "default_config", lambda rows, name=name: name)
        got = torch_argon.moe_experts(x, ids, w, experts, path="cuda_hopper_dense")
        assert rel_err(got, want) < REL_TOL[torch.bfloat16], name


@needs_hopper
def test_cuda_graph_replay_equals_eager():
    check_graph_replay_equals_eager("cuda_hopper_dense")


@needs_hopper
def test_torch_compile_fullgraph_matches_eager():
    check_compile_fullgraph_matches_eager("cuda_hopper_dense")


@needs_hopper
def test_opcheck_both_forms():
    T, K, E = 64, 2, 4
    ids, w = make_ids(T, K, E, "uniform"), make_weights(T, K)
    plan = plan_for(ids, w, E)
    a = torch.randn(plan.sorted_token.shape[0], 64, dtype=torch.bfloat16, device="cuda")
    weight = torch.randn(E, 32, 64, dtype=torch.bfloat16, device="cuda")
    torch.library.opcheck(torch.ops.argon.hopper_grouped_mm.default,
                          (a, weight, plan.offsets, plan.counts, 1))
    out = torch.zeros(a.shape[0], 32, dtype=torch.bfloat16, device="cuda")
    torch.library.opcheck(torch.ops.argon.hopper_grouped_mm_out.default,
                          (a, weight, plan.offsets, plan.counts, 1, out))


# ---- the benchmark's suggestion for the tuned table (bench/bench_hopper.py) -------------------

def test_benchmark_suggests_the_fastest_config_per_gemm_and_t():
    bench = bench_hopper()

    def rec(T, gemm, config, us):
        return dict(T=T, gemm=gemm, config=config, median_us=us)

    gemms = [rec(512, "gate_up", "pingpong_64x128", 90),
             rec(512, "gate_up", "pingpong_128x128", 80), rec(512, "down", "pingpong_64x128", 40),
             rec(512, "down", "pingpong_128x128", 50),
             rec(8192, "gate_up", "cooperative_128x256", 500),
             rec(8192, "gate_up", "pingpong_128x128", 520),
             rec(8192, "down", "cooperative_128x256", 300)]
    rows = bench.suggested_rows(gemms, 512, 10)
    assert rows == [(10.0, "pingpong_128x128", "pingpong_64x128"),
                    (160.0, "cooperative_128x256", "cooperative_128x256")]
    # the rows have MEASURED's shape: configs.choose reads them
    import torch_argon.hopper.configs as cfg
    table = {("NVIDIA H200", "bfloat16"): tuple(rows)}
    saved = dict(cfg.MEASURED)
    try:
        cfg.MEASURED.update(table)
        assert cfg.choose(100, "NVIDIA H200", "bfloat16") == ("cooperative_128x256",
                                                               "cooperative_128x256")
    finally:
        cfg.MEASURED.clear()
        cfg.MEASURED.update(saved)
