"""The padded Hopper experts (experts/cuda_hopper_padded.py) and their GEMM op
(argon::hopper_padded_mm, csrc/hopper/hopper_padded_gemm.cuh: CUTLASS 3's warp-specialized TMA
kernel over a plan of tile_m 128, one tensor map per operand, our tile scheduler).

On every machine: where the registry puts it and why it declines (on the CPU, a tile_m other
than 128, and under path="auto" / "triton" where its tuned table has no row with configurations
for the call: "no measured win at N rows per expert" in a band measured slower or past the
table's last row, "not yet measured on a GPU" for a GPU and dtype without rows), its
configurations against the C header's list, the op's fakes. On a GPU of compute
capability 9.0 with the Hopper units built: both GEMMs against float64 for every configuration,
fp16 and bf16, on every used tile (padding rows included), experts with 0 rows, -1 ids, T = 0,
garbage-filled outputs (tiles past the used count untouched), tile_expert and meta that no plan
makes, the whole experts path, CUDA graph replay, torch.compile and opcheck."""
import pytest
import torch

import torch_argon
from hopper_cases import (REL_TOL, assert_bits_equal, assert_padded_argument_errors,
                          bench_hopper, capture,
                          check_compile_fullgraph_matches_eager, check_graph_replay_equals_eager,
                          check_path_activation, check_path_matches_the_reference, cuda_call,
                          dense_experts, experts_path, header_configs, layer_case, needs_hopper,
                          on_h200,  # noqa: F401 (a fixture)
                          padded_fake_args, reference_experts)
from routing_cases import garbage_like, make_ids, make_weights
from triton_cases import rel_err
from torch_argon import hopper
from torch_argon.experts import ExpertsCall, cuda_hopper_dense, registry
from torch_argon.hopper import configs
from torch_argon.weights import DenseExperts

PADDED = registry.BY_NAME["cuda_hopper_padded"]
TILE = configs.PADDED_TILE_M


# ---- where it sits and why it declines (every machine) -----------------------------------------

def test_registry_tries_it_before_the_ptr_array_gemm_and_triton():
    names = [impl.name for impl in registry.IMPLEMENTATIONS]
    assert names.index("cuda_hopper_padded") + 1 == names.index("cuda_hopper_dense")
    assert names.index("cuda_hopper_dense") < names.index("triton_dense")
    assert (PADDED.path, PADDED.kind, PADDED.fuses_gather) == ("triton", "dense", False)
    assert "cuda_hopper_padded" in registry.PATHS


def test_on_the_cpu_it_says_cuda():
    x = torch.randn(8, 64, dtype=torch.bfloat16)
    experts = dense_experts()
    why = dict(torch_argon.experts.explain(x, experts))
    assert why["cuda_hopper_padded"] == "the Hopper GEMMs run on CUDA tensors, not cpu"
    with pytest.raises(ValueError, match="path='cuda_hopper_padded' cannot run here: "
                       "cuda_hopper_padded: the Hopper GEMMs run on CUDA tensors"):
        torch_argon.moe_experts(x, make_ids(8, 2, 4, "uniform"), make_weights(8, 2), experts,
                                path="cuda_hopper_padded")


def test_the_op_refuses_cpu_tensors_naming_the_device():
    a = torch.zeros(TILE, 8, dtype=torch.bfloat16)
    with pytest.raises(NotImplementedError, match="run on CUDA tensors, not cpu"):
        hopper.padded_mm(a, torch.zeros(1, 8, 8, dtype=torch.bfloat16),
                         torch.zeros(1, dtype=torch.int32), torch.zeros(4, dtype=torch.int32),
                         "pingpong_128x128")


def test_auto_declines_as_not_measured_and_the_name_runs_it(on_h200, monkeypatch):
    call = cuda_call(dense_experts())
    assert PADDED.supports(call) == ""
    auto = dict(registry.explain(call, "auto"))["cuda_hopper_padded"]
    assert auto.startswith("not yet measured on a GPU") and "NVIDIA H200 bfloat16" in auto
    assert "path='cuda_hopper_padded' runs it" in auto
    assert dict(registry.explain(call, "triton"))["cuda_hopper_padded"] == auto
    assert dict(registry.explain(call, "cuda_hopper_padded"))["cuda_hopper_padded"] == ""
    assert registry.choose(call, "cuda_hopper_padded") is PADDED
    # its own table, not the ptr-array GEMM's, lets the automatic choice take it
    monkeypatch.setitem(configs.MEASURED, ("NVIDIA H200", "bfloat16"),
                        ((1e9, "pingpong_128x128", "pingpong_128x128"),))
    assert dict(registry.explain(call, "auto"))["cuda_hopper_padded"] == auto
    monkeypatch.setitem(configs.PADDED_MEASURED, ("NVIDIA H200", "bfloat16"),
                        ((1e9, "pingpong_128x128", "pingpong_128x128"),))
    assert registry.choose(call, "auto") is PADDED
    fp16 = cuda_call(dense_experts(dtype=torch.float16), dtype=torch.float16)
    assert dict(registry.explain(fp16, "auto"))["cuda_hopper_padded"].startswith(
        "not yet measured on a GPU")


def test_its_tuned_table_has_the_h100_measured_rows():
    """What the H100 run measured (bf16): slower or level up to 320 mean rows per expert, the
    cooperative gate/up and ping-pong down above; no other GPU or dtype."""
    assert configs.PADDED_MEASURED == {("NVIDIA H100 80GB HBM3", "bfloat16"): (
        (320, None, None), (float("inf"), "cooperative_128x256", "pingpong_128x128"))}
    assert "h100_hopper_run2.json" in configs.PADDED_MEASURED_SLOWER[
        ("NVIDIA H100 80GB HBM3", "bfloat16")]


def test_on_the_h100_auto_takes_it_above_320_rows_per_expert(on_h200, monkeypatch):
    """On the H100 in bf16 the band up to 320 rows per expert declines, naming the run; above
    it "auto" takes the padded path; fp16 there stays "not yet measured"."""
    monkeypatch.setattr(cuda_hopper_dense, "device_name", lambda device: "NVIDIA H100 80GB HBM3")
    experts = dense_experts()  # E = 4
    small = cuda_call(experts, T=640, K=2)  # 320 rows per expert
    auto = dict(registry.explain(small, "auto"))["cuda_hopper_padded"]
    assert auto.startswith("no measured win at 320 rows per expert")
    assert "NVIDIA H100 80GB HBM3 bfloat16" in auto and "h100_hopper_run2.json" in auto
    assert "path='cuda_hopper_padded' runs it" in auto
    assert registry.choose(cuda_call(experts, T=642, K=2), "auto") is PADDED
    fp16 = cuda_call(dense_experts(dtype=torch.float16), T=4096, dtype=torch.float16)
    assert dict(registry.explain(fp16, "auto"))["cuda_hopper_padded"].startswith(
        "not yet measured on a GPU")


def test_auto_takes_it_only_above_the_band_measured_slower(on_h200, monkeypatch):
    """A table row with None configs is a band of rows per expert where the path measured
    slower: "auto" declines there (naming the rows, the band and the run), takes it above, and
    declines where the rows are unknown; by name it runs with the default rule in the band."""
    monkeypatch.setitem(configs.PADDED_MEASURED, ("NVIDIA H200", "bfloat16"), (
        (400, None, None), (1e9, "cooperative_128x256", "pingpong_128x128")))
    monkeypatch.setitem(configs.PADDED_MEASURED_SLOWER, ("NVIDIA H200", "bfloat16"), "a run")
    experts = dense_experts()  # E = 4
    below = cuda_call(experts, T=800, K=2)  # 400 rows per expert: in the band
    why = dict(registry.explain(below, "auto"))["cuda_hopper_padded"]
    assert why == ("no measured win at 400 rows per expert: on NVIDIA H200 bfloat16 it measured "
                   "slower than triton_dense or level with it up to 400 rows per expert (a run; "
                   "bench/hopper_gemm_notes.md); path='cuda_hopper_padded' runs it")
    assert registry.choose(below, "auto") is not PADDED
    assert registry.choose(below, "cuda_hopper_padded") is PADDED
    above = cuda_call(experts, T=802, K=2)  # 401 rows per expert
    assert registry.choose(above, "auto") is PADDED
    unknown = ExpertsCall.of(above.x, experts, ops=torch_argon.argon_ops)
    assert "at unknown (no n_entries) rows per expert" in dict(
        registry.explain(unknown, "auto"))["cuda_hopper_padded"]
    # in the band the configurations come from the rule, above it from the row
    assert configs.choose_padded(400, "NVIDIA H200", "bfloat16") == ("cooperative_128x256",
                                                                      "pingpong_128x128")
    assert configs.choose_padded(100, "NVIDIA H200", "bfloat16") == ("pingpong_128x128",
                                                                      "pingpong_128x128")
    assert configs.auto_decline(configs.PADDED_MEASURED, 401, "NVIDIA H200", "bfloat16") == ""
    assert "up to 400 rows" in configs.auto_decline(configs.PADDED_MEASURED, 3, "NVIDIA H200",
                                                    "bfloat16")


def test_auto_declines_past_the_tables_last_row(on_h200, monkeypatch):
    """A table whose last row ends below the call's rows per expert covers nothing there: "auto"
    declines rather than guess; a table without bands takes calls of unknown rows."""
    monkeypatch.setitem(configs.PADDED_MEASURED, ("NVIDIA H200", "bfloat16"), (
        (1000, "cooperative_128x256", "pingpong_128x128"),))
    experts = dense_experts()  # E = 4
    past = cuda_call(experts, T=2002, K=2)  # 1001 rows per expert
    assert "its tuned table ends at 1000 rows per expert" in dict(
        registry.explain(past, "auto"))["cuda_hopper_padded"]
    assert registry.choose(cuda_call(experts, T=2000, K=2), "auto") is PADDED
    unknown = ExpertsCall.of(past.x, experts, ops=torch_argon.argon_ops)
    assert registry.choose(unknown, "auto") is PADDED


@pytest.mark.parametrize("tile_m,ok", [(None, True), (128, True), (64, False), (16, False),
                                       (256, False)])
def test_it_runs_plans_of_tile_m_128_only(on_h200, tile_m, ok):
    why = PADDED.supports(cuda_call(dense_experts(), tile_m=tile_m))
    if ok:
        assert why == ""
    else:
        assert why == (f"tile_m={tile_m}: the padded Hopper GEMM runs plans of tile_m 128 (its "
                       "M tile)")
    assert PADDED.default_tile_m(None, 1000) == 128


@pytest.mark.parametrize("kwargs,match", [
    (dict(dtype=torch.float32), "same fp16 / bf16 dtype"),
    (dict(H=68), "H=68 and I=32 must be multiples of 8"),
])
def test_it_declines_what_its_gemm_cannot_take(on_h200, kwargs, match):
    dtype = kwargs.pop("dtype", torch.bfloat16)
    experts = dense_experts(dtype=dtype, **kwargs)
    assert match in PADDED.supports(cuda_call(experts, dtype=dtype))


def test_it_declines_transposed_weight_views_and_autograd(on_h200):
    E, H, I = 4, 64, 32
    gu = torch.randn(E, H, 2 * I, dtype=torch.bfloat16).transpose(1, 2)
    dn = torch.randn(E, I, H, dtype=torch.bfloat16).transpose(1, 2)
    assert "contiguous weight stacks" in PADDED.supports(cuda_call(DenseExperts(gu, dn)))
    x = torch.randn(8, 64, dtype=torch.bfloat16, requires_grad=True)
    with torch.enable_grad():
        call = ExpertsCall.of(x, dense_experts(), ops=torch_argon.argon_ops, n_entries=16)
    assert "autograd records this call" in PADDED.supports(call)


# ---- the configurations ------------------------------------------------------------------------

def test_configs_are_the_headers_list_in_its_order():
    listed, text = header_configs("hopper_padded_gemm.h")
    assert listed == list(enumerate(configs.PADDED_CONFIGS))
    assert f"ARGON_HOPPER_PADDED_N_CONFIGS = {len(configs.PADDED_CONFIGS)}" in text
    assert f"ARGON_HOPPER_PADDED_TILE_M = {TILE}" in text


def test_config_choice_default_and_table(monkeypatch):
    # the rule from the H100's GEMM-alone rates: gate/up cooperative above 128 rows per expert
    assert configs.choose_padded(40, "NVIDIA H200", "bfloat16") == ("pingpong_128x128",
                                                                     "pingpong_128x128")
    assert configs.choose_padded(128, "NVIDIA H200", "bfloat16") == ("pingpong_128x128",
                                                                      "pingpong_128x128")
    assert configs.choose_padded(160, "NVIDIA H200", "bfloat16") == ("cooperative_128x256",
                                                                      "pingpong_128x128")
    monkeypatch.setitem(configs.PADDED_MEASURED, ("NVIDIA H200", "bfloat16"), (
        (100, "cooperative_128x256", "pingpong_128x128"),
        (1e9, "cooperative_128x256", "cooperative_128x256")))
    assert configs.choose_padded(40, "NVIDIA H200", "bfloat16") == ("cooperative_128x256",
                                                                     "pingpong_128x128")
    assert configs.choose_padded(400, "NVIDIA H200", "bfloat16") == ("cooperative_128x256",
                                                                      "cooperative_128x256")
    assert configs.choose_padded(400, "NVIDIA H100", "bfloat16") == ("cooperative_128x256",
                                                                      "pingpong_128x128")
    with pytest.raises(ValueError, match="config must be one of"):
        configs.padded_index("pingpong_64x128")  # the ptr-array GEMM's, not compiled here


def test_a_bad_config_name_is_a_value_error_on_every_device():
    """The wrappers read the name before the device's refusal: the same error here as on an
    H200."""
    a, w = torch.zeros(TILE, 64, dtype=torch.bfloat16), torch.zeros(2, 16, 64, dtype=torch.bfloat16)
    tile_expert, meta = torch.zeros(1, dtype=torch.int32), torch.zeros(4, dtype=torch.int32)
    for wrapper in (hopper.padded_mm, hopper.padded_act_mm):
        with pytest.raises(ValueError, match="config must be one of"):
            wrapper(a, w, tile_expert, meta, "pingpong_64x128")
    with pytest.raises(NotImplementedError, match="run on CUDA tensors, not cpu"):
        hopper.padded_mm(a, w, tile_expert, meta, "pingpong_128x128")


# ---- the op's fakes (torch.compile's shapes) --------------------------------------------------

def test_fake_gives_out_shape_and_checks_arguments():
    mode, (a, w, tile_expert, meta) = padded_fake_args(N=48)
    with mode:
        out = torch.ops.argon.hopper_padded_mm(a, w, tile_expert, meta, 1)
        assert tuple(out.shape) == (3 * TILE, 48) and out.dtype == torch.bfloat16
        torch.ops.argon.hopper_padded_mm_out(a, w, tile_expert, meta, 0, out)
        assert_padded_argument_errors(torch.ops.argon.hopper_padded_mm, a, w, tile_expert, meta)
        with pytest.raises(ValueError, match="out must be"):
            torch.ops.argon.hopper_padded_mm_out(a, w, tile_expert, meta, 0,
                                                 torch.empty(3 * TILE, 40, dtype=torch.bfloat16))


# ---- on a Hopper GPU with the units built -----------------------------------------------------

def plan_for(ids, w, E):
    return torch_argon.argon_ops.moe_plan(ids.cuda(), w.cuda(), E, TILE)


def expected_tiles(a, w, plan):
    """{tile: a[tile's rows] @ w[e]^T in float64} for every used tile (padding rows too)."""
    experts = plan.tile_expert.cpu().tolist()[:plan.n_tiles]
    a64, w64 = a.double().cpu(), w.double().cpu()
    return {m: a64[m * TILE:(m + 1) * TILE] @ w64[e].T for m, e in enumerate(experts)}


@needs_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("config", configs.PADDED_CONFIGS)
@pytest.mark.parametrize("dist", ["uniform", "one_expert", "empty", "neg_some"])
@pytest.mark.parametrize("N", [256, 200])  # 200: a last N tile the TMA bounds clip
def test_gemm_matches_float64_on_every_used_tile(dtype, config, dist, N):
    T, K, E, Kd = 200, 4, 8, 192  # Kd 192: three K steps of 64
    ids, w = make_ids(T, K, E, dist, seed=3), make_weights(T, K, seed=3)
    plan = plan_for(ids, w, E)
    a = (torch.randn(plan.sorted_token.shape[0], Kd) * 0.5).to(dtype).cuda()
    weight = (torch.randn(E, N, Kd) / Kd ** 0.5).to(dtype).cuda()
    out = garbage_like(torch.empty(a.shape[0], N, dtype=dtype, device="cuda"))
    before = out.clone()
    hopper.padded_mm(a, weight, plan.tile_expert, plan.meta, config, out=out)
    used = plan.n_tiles * TILE
    for m, want in expected_tiles(a, weight, plan).items():
        assert rel_err(out[m * TILE:(m + 1) * TILE], want) < REL_TOL[dtype], (m, config)
    assert_bits_equal(out[used:], before[used:])  # the unused tiles, as they were
    functional = hopper.padded_mm(a, weight, plan.tile_expert, plan.meta, config)
    assert_bits_equal(functional[:used], out[:used])
    assert not functional[used:].any()


@needs_hopper
@pytest.mark.parametrize("config", configs.PADDED_CONFIGS)
def test_gemm_with_no_used_tiles_writes_nothing_and_t_0(config):
    E = 4
    ids = torch.full((6, 2), -1, dtype=torch.int64)  # every id -1: no tile in use
    plan = plan_for(ids, make_weights(6, 2), E)
    assert plan.n_tiles == 0
    a = torch.randn(plan.sorted_token.shape[0], 64, dtype=torch.bfloat16, device="cuda")
    weight = torch.randn(E, 32, 64, dtype=torch.bfloat16, device="cuda")
    out = garbage_like(torch.empty(a.shape[0], 32, dtype=torch.bfloat16, device="cuda"))
    before = out.clone()
    hopper.padded_mm(a, weight, plan.tile_expert, plan.meta, config, out=out)
    assert_bits_equal(out, before)
    empty = torch.empty(0, 64, dtype=torch.bfloat16, device="cuda")
    none = torch.empty(0, dtype=torch.int32, device="cuda")
    meta = torch.zeros(4, dtype=torch.int32, device="cuda")
    assert hopper.padded_mm(empty, weight, none, meta, config).shape == (0, 32)


@needs_hopper
def test_tile_expert_and_meta_no_plan_makes_stay_inside_the_buffers():
    """A used tile of expert -1 or E is written with zeros; a used count past the tiles is
    clipped to them: nothing past out's rows changes."""
    E, tiles = 3, 4
    a = torch.randn(tiles * TILE, 64, dtype=torch.bfloat16, device="cuda")
    weight = torch.randn(E, 32, 64, dtype=torch.bfloat16, device="cuda")
    tile_expert = torch.tensor([2, -1, E, 0], dtype=torch.int32, device="cuda")
    meta = torch.tensor([0, 1000, 0, 0], dtype=torch.int32, device="cuda")
    big = garbage_like(torch.empty(2 * tiles * TILE, 32, dtype=torch.bfloat16, device="cuda"))
    before = big.clone()
    out = big[:tiles * TILE]
    hopper.padded_mm(a, weight, tile_expert, meta, "pingpong_128x128", out=out)
    torch.cuda.synchronize()
    assert_bits_equal(big[tiles * TILE:], before[tiles * TILE:])
    assert not out[TILE:3 * TILE].any()
    for m, e in ((0, 2), (3, 0)):
        rows = slice(m * TILE, (m + 1) * TILE)
        assert rel_err(out[rows], a[rows].double() @ weight[e].double().T) < REL_TOL[
            torch.bfloat16]
    meta[1] = -5  # a negative count: no tile in use
    again = garbage_like(torch.empty_like(out))
    kept = again.clone()
    hopper.padded_mm(a, weight, tile_expert, meta, "pingpong_128x128", out=again)
    assert_bits_equal(again, kept)


@needs_hopper
def test_strided_plan_vectors_read_as_their_values():
    T, K, E = 100, 4, 8
    ids, w = make_ids(T, K, E, "uniform", seed=9), make_weights(T, K, seed=9)
    plan = plan_for(ids, w, E)
    a = torch.randn(plan.sorted_token.shape[0], 64, dtype=torch.bfloat16, device="cuda")
    weight = torch.randn(E, 32, 64, dtype=torch.bfloat16, device="cuda")
    spread = lambda v: torch.stack([v, torch.full_like(v, 1 << 20)], 1).reshape(-1)[::2]
    tile_expert, meta = spread(plan.tile_expert), spread(plan.meta)
    assert tile_expert.stride(0) == 2 and torch.equal(meta, plan.meta)
    want = hopper.padded_mm(a, weight, plan.tile_expert, plan.meta, "pingpong_128x128")
    got = hopper.padded_mm(a, weight, tile_expert, meta, "pingpong_128x128")
    assert_bits_equal(got, want)


@needs_hopper
@pytest.mark.parametrize("kwargs,match", [
    (dict(a=torch.float32), "a must be float16 or bfloat16"),
    (dict(w=torch.float16), "w must have a's dtype"),
    (dict(K=60), "must be multiples of 8"),
    (dict(rows=TILE + 8), "128 rows per tile of tile_expert"),
    (dict(meta=torch.int64), "meta must be int32"),
    (dict(config=2), "config must be in"),
])
def test_bad_arguments_are_named(kwargs, match):
    E, K = 2, kwargs.get("K", 64)
    a = torch.zeros(kwargs.get("rows", TILE), K, dtype=kwargs.get("a", torch.bfloat16),
                    device="cuda")
    w = torch.zeros(E, 16, K, dtype=kwargs.get("w", torch.bfloat16), device="cuda")
    tile_expert = torch.zeros(1, dtype=torch.int32, device="cuda")
    meta = torch.zeros(4, dtype=kwargs.get("meta", torch.int32), device="cuda")
    with pytest.raises(ValueError, match=match):
        torch.ops.argon.hopper_padded_mm(a, w, tile_expert, meta, kwargs.get("config", 0))


@needs_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("dist", ["uniform", "zipf", "one_expert", "empty", "neg_some",
                                  "neg_all"])
@pytest.mark.parametrize("T", [0, 1, 300])
def test_experts_path_matches_the_reference(dtype, dist, T):
    check_path_matches_the_reference("cuda_hopper_padded", dtype, dist, T)


@needs_hopper
@pytest.mark.parametrize("activation", ["silu", "gelu"])
def test_experts_path_activations(activation):
    check_path_activation("cuda_hopper_padded", activation)


@needs_hopper
def test_experts_path_every_config(monkeypatch):
    x, ids, w, experts = layer_case(torch.bfloat16, T=512, K=8, E=4)
    want = reference_experts(x, ids, w, experts)
    for gate_up in configs.PADDED_CONFIGS:
        for down in configs.PADDED_CONFIGS:
            monkeypatch.setattr(configs, "choose_padded",
                                lambda rows, gpu, dtype, c=(gate_up, down): c)
            got = experts_path("cuda_hopper_padded", x, ids, w, experts)
            assert rel_err(got, want) < REL_TOL[torch.bfloat16], (gate_up, down)


@needs_hopper
def test_experts_path_agrees_with_the_ptr_array_path():
    x, ids, w, experts = layer_case(torch.bfloat16, T=300)
    got = experts_path("cuda_hopper_padded", x, ids, w, experts)
    other = experts_path("cuda_hopper_dense", x, ids, w, experts)
    assert rel_err(got, other) < REL_TOL[torch.bfloat16]


@needs_hopper
def test_cuda_graph_replay_equals_eager():
    check_graph_replay_equals_eager("cuda_hopper_padded")


@needs_hopper
def test_cuda_graph_replay_follows_a_new_routing():
    """The used-tile count and tile_expert are read on the device at every replay: a routing
    with more used tiles than the captured one is computed in full."""
    x, ids, w, experts = layer_case(torch.bfloat16, T=256, dist="one_expert")

    def run():
        return experts_path("cuda_hopper_padded", x, ids, w, experts)

    graph, captured = capture(run)
    ids.copy_(make_ids(256, ids.shape[1], 8, "uniform", seed=4).cuda())
    graph.replay()
    assert rel_err(captured, reference_experts(x, ids, w, experts)) < REL_TOL[torch.bfloat16]


@needs_hopper
def test_torch_compile_fullgraph_matches_eager():
    check_compile_fullgraph_matches_eager("cuda_hopper_padded")


@needs_hopper
def test_opcheck_both_forms():
    T, K, E = 64, 2, 4
    ids, w = make_ids(T, K, E, "uniform"), make_weights(T, K)
    plan = plan_for(ids, w, E)
    a = torch.randn(plan.sorted_token.shape[0], 64, dtype=torch.bfloat16, device="cuda")
    weight = torch.randn(E, 32, 64, dtype=torch.bfloat16, device="cuda")
    for config in range(len(configs.PADDED_CONFIGS)):
        torch.library.opcheck(torch.ops.argon.hopper_padded_mm.default,
                              (a, weight, plan.tile_expert, plan.meta, config))
        out = torch.zeros(a.shape[0], 32, dtype=torch.bfloat16, device="cuda")
        torch.library.opcheck(torch.ops.argon.hopper_padded_mm_out.default,
                              (a, weight, plan.tile_expert, plan.meta, config, out))


# ---- the benchmark's suggestion for the padded table (bench/bench_hopper.py) -----------------

def test_benchmark_suggests_rows_per_kernel():
    """Both kernels have a "pingpong_128x128": the padded table's rows come from the padded
    records alone."""
    bench = bench_hopper()
    assert bench.PATHS[:2] == ("cuda_hopper_padded", "cuda_hopper_dense")

    def rec(kernel, gemm, config, us):
        return dict(kernel=kernel, T=8192, gemm=gemm, config=config, median_us=us)

    gemms = [rec("grouped", "gate_up", "pingpong_128x128", 100),
             rec("grouped", "down", "pingpong_128x128", 50),
             rec("padded", "gate_up", "pingpong_128x128", 300),
             rec("padded", "gate_up", "cooperative_128x256", 200),
             rec("padded", "down", "pingpong_128x128", 90),
             rec("padded", "down", "cooperative_128x256", 95)]
    assert bench.suggested_rows(gemms, 512, 10, "padded") == [
        (160.0, "cooperative_128x256", "pingpong_128x128")]
    assert bench.suggested_rows(gemms, 512, 10) == [
        (160.0, "pingpong_128x128", "pingpong_128x128")]
