"""The padded Hopper gate/up GEMM with the activation in its epilogue (argon::hopper_padded_act_mm,
csrc/hopper/hopper_padded_act_epilogue.cuh) and its use by cuda_hopper_padded.

On every machine: the interleaved gate/up stack (an exact permutation: round trip, the gate and
up row of every h column 8 rows apart in one 16-row block, as the epilogue pairs them), the
op's fakes and argument errors, the switch (hopper.configs.FUSE_ACTIVATION and
FUSED_ACTIVATION_PASSED_GPU_TESTS) and the interleaved stacks' cache, and the whole experts path
on the CPU with both Hopper GEMMs replaced by their contracts in torch: the fused stage gives
the unfused stages' output bit for bit. On a GPU of compute capability 9.0 with the units built:
the fused op against hopper_padded_mm + swiglu bit for bit (fp16 and bf16, every activation and
configuration, a clipped last N tile, -1 ids, experts with no rows, T = 0, garbage-filled outputs
with the unused tiles untouched), the path fused against unfused, CUDA graph capture and replay,
torch.compile and opcheck."""

import pytest
import torch

import torch_argon
from hopper_cases import (assert_bits_equal, assert_padded_argument_errors, capture,
                          dense_experts, layer_case, needs_hopper,
                          on_h200,  # noqa: F401 (a fixture)
                          padded_fake_args, reference_experts)
from routing_cases import garbage_like, make_ids, make_weights
from triton_cases import rel_err
from torch_argon import hopper
from torch_argon.experts import cuda_hopper_padded
from torch_argon.experts.derived_cache import DerivedCache
from torch_argon.hopper import configs, padded_ops
from torch_argon.weights import DenseExperts

TILE = configs.PADDED_TILE_M
ACTIVATIONS = ("silu", "gelu", "gelu_tanh")


# ---- the interleaved stack (every machine) -----------------------------------------------------

@pytest.mark.parametrize("I", [8, 16, 40])
def test_interleave_puts_gate_and_up_of_each_h_column_in_one_block(I):
    E, H = 3, 5
    w = torch.randn(E, 2 * I, H)
    wi = hopper.interleave_gate_up(w)
    assert wi.shape == w.shape and wi.is_contiguous()
    for c in range(I):
        gate_row = 16 * (c // 8) + c % 8
        # the epilogue's pairing: up 8 rows after gate, in the same 16-row block
        assert torch.equal(wi[:, gate_row], w[:, c])
        assert torch.equal(wi[:, gate_row + 8], w[:, I + c])
        assert gate_row // 16 == (gate_row + 8) // 16 and gate_row % 16 < 8
    # a permutation: every row once
    assert torch.equal(torch.sort(wi.flatten()).values, torch.sort(w.flatten()).values)


def test_interleave_round_trip_through_the_columns_of_a_product():
    """x @ interleave(w)^T with its columns put back is x @ w^T (exact: dyadic values)."""
    E, I, H, R = 2, 24, 16, 7
    g = torch.Generator().manual_seed(0)
    w = torch.randint(-8, 8, (E, 2 * I, H), generator=g).double() / 8
    x = torch.randint(-8, 8, (R, H), generator=g).double() / 8
    wi = hopper.interleave_gate_up(w)
    for e in range(E):
        assert torch.equal(padded_ops.deinterleave_columns(x @ wi[e].T), x @ w[e].T)
    # rows back: the transpose of the columns' permutation
    back = padded_ops.deinterleave_columns(wi.transpose(1, 2).reshape(E * H, 2 * I))
    assert torch.equal(back.reshape(E, H, 2 * I).transpose(1, 2), w)


def test_interleave_needs_i_a_multiple_of_8():
    with pytest.raises(ValueError, match=r"I a multiple of 8 to interleave"):
        hopper.interleave_gate_up(torch.zeros(2, 2 * 12, 8))
    with pytest.raises(ValueError, match=r"gu must be \[R, 2I\] with I a multiple of 8"):
        padded_ops.deinterleave_columns(torch.zeros(3, 24))


# ---- the op's fakes and refusals (every machine) ---------------------------------------------

def test_fake_gives_h_shape_and_checks_arguments():
    mode, (a, w, tile_expert, meta) = padded_fake_args(N=64)
    with mode:
        h = torch.ops.argon.hopper_padded_act_mm(a, w, tile_expert, meta, 1)
        assert tuple(h.shape) == (3 * TILE, 32) and h.dtype == torch.bfloat16
        h = torch.ops.argon.hopper_padded_act_mm(a, w, tile_expert, meta, 0, "gelu_tanh")
        torch.ops.argon.hopper_padded_act_mm_out(a, w, tile_expert, meta, 0, "gelu", h)
        with pytest.raises(ValueError, match="interleaved gate/up stack .* got 56 rows"):
            torch.ops.argon.hopper_padded_act_mm(a, w[:, :56], tile_expert, meta, 1)
        with pytest.raises(ValueError, match='activation must be one of "silu", "gelu", '
                                             '"gelu_tanh", got "relu"'):
            torch.ops.argon.hopper_padded_act_mm(a, w, tile_expert, meta, 1, "relu")
        assert_padded_argument_errors(torch.ops.argon.hopper_padded_act_mm, a, w, tile_expert,
                                      meta, "silu")
        with pytest.raises(ValueError, match="out must be"):
            torch.ops.argon.hopper_padded_act_mm_out(
                a, w, tile_expert, meta, 0, "silu", torch.empty(3 * TILE, 64,
                                                                dtype=torch.bfloat16))


def test_the_op_refuses_cpu_tensors_naming_the_device():
    a = torch.zeros(TILE, 8, dtype=torch.bfloat16)
    with pytest.raises(NotImplementedError, match="run on CUDA tensors, not cpu"):
        hopper.padded_act_mm(a, torch.zeros(1, 16, 8, dtype=torch.bfloat16),
                             torch.zeros(1, dtype=torch.int32), torch.zeros(4, dtype=torch.int32),
                             "pingpong_128x128", "silu")


# ---- the switch ------------------------------------------------------------------------------

def test_not_fused_until_the_gpu_tests_pass_and_no_copy_is_needed(monkeypatch):
    """While FUSED_ACTIVATION_PASSED_GPU_TESTS is False, or the fused GEMM needs a second copy of
    the stack (FUSED_ACTIVATION_NEEDS_A_COPY), the path keeps the unfused stages by default;
    FUSE_ACTIVATION forces either way."""
    assert configs.FUSED_ACTIVATION_PASSED_GPU_TESTS is False
    assert configs.FUSED_ACTIVATION_NEEDS_A_COPY is True
    assert configs.FUSE_ACTIVATION is None and not configs.fuse_activation()
    monkeypatch.setattr(configs, "FUSED_ACTIVATION_PASSED_GPU_TESTS", True)
    assert not configs.fuse_activation()  # the copy's memory: the caller's choice
    monkeypatch.setattr(configs, "FUSED_ACTIVATION_NEEDS_A_COPY", False)
    assert configs.fuse_activation()
    monkeypatch.setattr(configs, "FUSE_ACTIVATION", False)
    assert not configs.fuse_activation()
    monkeypatch.setattr(configs, "FUSED_ACTIVATION_PASSED_GPU_TESTS", False)
    monkeypatch.setattr(configs, "FUSE_ACTIVATION", True)
    assert configs.fuse_activation()


# ---- the experts path on the CPU, the GEMMs replaced by their contracts ----------------------

def padded_mm_contract(a, w, tile_expert, meta, config, *, out=None):
    """hopper_padded_mm in torch: every used tile's rows times its expert's w^T, float64 then
    rounded once (exact sums here: dyadic values), other rows as they were."""
    configs.padded_index(config)
    out = torch.zeros(a.shape[0], w.shape[1], dtype=a.dtype) if out is None else out
    for m in range(int(meta[1])):
        rows = slice(m * TILE, (m + 1) * TILE)
        e = int(tile_expert[m])
        out[rows] = (a[rows].double() @ w[e].double().T).to(a.dtype) if 0 <= e < w.shape[0] \
            else 0
    return out


class ActContract:
    """hopper_padded_act_mm in torch (its contract: the GEMM of the interleaved stack, its
    columns put back, the swiglu op), counting its calls and the stacks it was given."""

    def __init__(self):
        self.calls, self.stacks = 0, []

    def __call__(self, a, w_interleaved, tile_expert, meta, config, activation="silu", *,
                 out=None):
        self.calls += 1
        self.stacks.append(w_interleaved)
        gu = padded_ops.deinterleave_columns(
            padded_mm_contract(a, w_interleaved, tile_expert, meta, config))
        h = torch_argon.swiglu(gu, activation=activation)
        if out is None:
            return h
        used = int(meta[1]) * TILE
        out[:used] = h[:used]
        return out


@pytest.fixture
def contracts(on_h200, monkeypatch):  # noqa: F811 (the fixture)
    """The padded path runnable on the CPU: its device checks passed, both Hopper GEMMs their
    torch contracts; an empty interleaved-stack cache."""
    act = ActContract()
    monkeypatch.setattr(hopper, "padded_mm", padded_mm_contract)
    monkeypatch.setattr(hopper, "padded_act_mm", act)
    monkeypatch.setattr(padded_ops, "act_refusal", lambda device: "")
    monkeypatch.setattr(cuda_hopper_padded, "_INTERLEAVED", DerivedCache())
    return act


def dyadic_case(dtype=torch.bfloat16, T=200, K=4, E=4, H=64, I=48, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = lambda *shape: (torch.randint(-8, 9, shape, generator=g) / 16).to(dtype)  # noqa: E731
    experts = DenseExperts(q(E, 2 * I, H), q(E, H, I))
    return q(T, H), make_ids(T, K, E, "neg_some", seed=seed), make_weights(T, K, seed=seed), \
        experts


def padded_path(x, ids, w, experts, **kwargs):
    return torch_argon.moe_experts(x, ids, w, experts, path="cuda_hopper_padded", **kwargs)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_fused_stage_gives_the_unfused_stages_bits(contracts, monkeypatch, dtype, activation):
    x, ids, w, experts = dyadic_case(dtype)
    monkeypatch.setattr(configs, "FUSE_ACTIVATION", False)
    unfused = padded_path(x, ids, w, experts, activation=activation)
    assert contracts.calls == 0
    monkeypatch.setattr(configs, "FUSE_ACTIVATION", True)
    fused = padded_path(x, ids, w, experts, activation=activation)
    assert contracts.calls == 1
    assert torch.equal(contracts.stacks[0], hopper.interleave_gate_up(experts.gate_up))
    assert_bits_equal(fused, unfused)
    want = reference_experts(x, ids, w, experts, activation)
    assert rel_err(fused, want) < 1.5e-2


def test_by_default_the_path_runs_the_unfused_stages(contracts):
    x, ids, w, experts = dyadic_case()
    padded_path(x, ids, w, experts)
    assert contracts.calls == 0


def test_the_interleaved_stack_is_made_once_and_follows_changes(contracts, monkeypatch):
    monkeypatch.setattr(configs, "FUSE_ACTIVATION", True)
    x, ids, w, experts = dyadic_case()
    first = padded_path(x, ids, w, experts)
    padded_path(x, ids, w, experts)
    assert contracts.calls == 2 and contracts.stacks[0] is contracts.stacks[1]
    # views made afresh (an expert-parallel rank's share) find their entry
    cache = cuda_hopper_padded._INTERLEAVED
    share = experts.select_experts(1, 3)
    assert not cache.has((share.gate_up,))
    made = cuda_hopper_padded.interleaved(share.gate_up)
    assert cuda_hopper_padded.interleaved(experts.select_experts(1, 3).gate_up) is made
    assert torch.equal(made, hopper.interleave_gate_up(experts.gate_up[1:3]))
    # an in-place change of the stack interleaves again, into the same buffer (a captured
    # graph holds its address), and the result follows it
    old = contracts.stacks[0]
    experts.gate_up.mul_(-1)
    assert not cache.has((experts.gate_up,))
    again = padded_path(x, ids, w, experts)
    assert contracts.stacks[-1].data_ptr() == old.data_ptr()
    assert torch.equal(contracts.stacks[-1], hopper.interleave_gate_up(experts.gate_up))
    assert not torch.equal(again, first)
    monkeypatch.setattr(configs, "FUSE_ACTIVATION", False)
    assert_bits_equal(padded_path(x, ids, w, experts), again)


def test_where_the_fused_gemm_cannot_run_the_path_says_why(contracts, monkeypatch):
    x, ids, w, experts = dyadic_case()
    call = torch_argon.experts.ExpertsCall.of(x, experts, ops=torch_argon.argon_ops,
                                              n_entries=ids.numel())
    assert cuda_hopper_padded.fused_gate_up_refusal(call) == ""
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert "torch.compile tracing" in cuda_hopper_padded.fused_gate_up_refusal(call)
    monkeypatch.undo()
    # inside a CUDA graph capture: only once the stack was interleaved eagerly
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    monkeypatch.setattr(padded_ops, "act_refusal", lambda device: "")
    monkeypatch.setattr(cuda_hopper_padded, "_INTERLEAVED", DerivedCache())
    assert "inside a CUDA graph capture before the stack's first fused call" in \
        cuda_hopper_padded.fused_gate_up_refusal(call)
    cuda_hopper_padded.interleaved(experts.gate_up)
    assert cuda_hopper_padded.fused_gate_up_refusal(call) == ""


# ---- on a Hopper GPU with the units built -----------------------------------------------------

def plan_for(ids, w, E):
    return torch_argon.argon_ops.moe_plan(ids.cuda(), w.cuda(), E, TILE)


def unfused(a, w, plan, config, activation):
    """hopper_padded_mm then swiglu: the bits the fused op must give (used tiles)."""
    gu = hopper.padded_mm(a, w, plan.tile_expert, plan.meta, config)
    return torch_argon.swiglu(gu, activation=activation)


@needs_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("config", configs.PADDED_CONFIGS)
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("dist", ["uniform", "empty", "neg_some"])
@pytest.mark.parametrize("I", [128, 200])  # 200: 2I = 400, a last N tile the TMA bounds clip
def test_fused_op_is_the_unfused_gemm_and_swiglu_bit_for_bit(dtype, config, activation, dist, I):
    T, K, E, Kd = 200, 4, 8, 192
    ids, w = make_ids(T, K, E, dist, seed=5), make_weights(T, K, seed=5)
    plan = plan_for(ids, w, E)
    a = (torch.randn(plan.sorted_token.shape[0], Kd) * 2).to(dtype).cuda()
    stack = (torch.randn(E, 2 * I, Kd) / Kd ** 0.5 * 2).to(dtype).cuda()
    want = unfused(a, stack, plan, config, activation)
    out = garbage_like(torch.empty(a.shape[0], I, dtype=dtype, device="cuda"))
    before = out.clone()
    hopper.padded_act_mm(a, hopper.interleave_gate_up(stack), plan.tile_expert, plan.meta,
                         config, activation, out=out)
    used = plan.n_tiles * TILE
    assert_bits_equal(out[:used], want[:used])
    assert_bits_equal(out[used:], before[used:])  # the unused tiles, as they were
    functional = hopper.padded_act_mm(a, hopper.interleave_gate_up(stack), plan.tile_expert,
                                      plan.meta, config, activation)
    assert_bits_equal(functional[:used], want[:used])
    assert not functional[used:].any()


@needs_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("config", configs.PADDED_CONFIGS)
@pytest.mark.parametrize("Kd", [2048, 200])  # a layer's K; one not a multiple of the K tile
def test_fused_op_over_many_tiles_per_cta_and_a_real_k(dtype, config, Kd):
    """More work tiles than CTAs, so that every CTA's persistent loop runs several tiles and the
    ping-pong schedule's second consumer warpgroup runs epilogues of its own (the small cases
    above give each CTA one tile at most), with a layer's K of 2048 (long sums) and I = 768."""
    T, K, E, I = 4096, 8, 8, 768  # 4096 rows per expert: 256 M tiles x 12 or 6 N tiles
    ids, w = make_ids(T, K, E, "uniform", seed=7), make_weights(T, K, seed=7)
    plan = plan_for(ids, w, E)
    assert plan.n_tiles * (2 * I // 256) > 4 * torch.cuda.get_device_properties(0).multi_processor_count
    g = torch.Generator().manual_seed(7)
    a = torch.randn(plan.sorted_token.shape[0], Kd, generator=g).to(dtype).cuda()
    stack = (torch.randn(E, 2 * I, Kd, generator=g) / Kd ** 0.5).to(dtype).cuda()
    want = unfused(a, stack, plan, config, "silu")
    got = hopper.padded_act_mm(a, hopper.interleave_gate_up(stack), plan.tile_expert, plan.meta,
                               config, "silu")
    used = plan.n_tiles * TILE
    assert_bits_equal(got[:used], want[:used])


@needs_hopper
@pytest.mark.parametrize("config", configs.PADDED_CONFIGS)
def test_fused_op_with_no_used_tiles_writes_nothing_and_t_0(config):
    E = 4
    ids = torch.full((6, 2), -1, dtype=torch.int64)
    plan = plan_for(ids, make_weights(6, 2), E)
    assert plan.n_tiles == 0
    a = torch.randn(plan.sorted_token.shape[0], 64, dtype=torch.bfloat16, device="cuda")
    stack = torch.randn(E, 32, 64, dtype=torch.bfloat16, device="cuda")
    out = garbage_like(torch.empty(a.shape[0], 16, dtype=torch.bfloat16, device="cuda"))
    before = out.clone()
    hopper.padded_act_mm(a, stack, plan.tile_expert, plan.meta, config, "silu", out=out)
    assert_bits_equal(out, before)
    empty = torch.empty(0, 64, dtype=torch.bfloat16, device="cuda")
    none = torch.empty(0, dtype=torch.int32, device="cuda")
    meta = torch.zeros(4, dtype=torch.int32, device="cuda")
    assert hopper.padded_act_mm(empty, stack, none, meta, config).shape == (0, 16)


@needs_hopper
def test_tiles_of_no_expert_give_zeros_and_nothing_outside_the_buffers():
    E, tiles = 3, 4
    a = torch.randn(tiles * TILE, 64, dtype=torch.bfloat16, device="cuda")
    stack = torch.randn(E, 32, 64, dtype=torch.bfloat16, device="cuda")
    tile_expert = torch.tensor([2, -1, E, 0], dtype=torch.int32, device="cuda")
    meta = torch.tensor([0, 1000, 0, 0], dtype=torch.int32, device="cuda")
    big = garbage_like(torch.empty(2 * tiles * TILE, 16, dtype=torch.bfloat16, device="cuda"))
    before = big.clone()
    out = big[:tiles * TILE]
    wi = hopper.interleave_gate_up(stack)
    hopper.padded_act_mm(a, wi, tile_expert, meta, "pingpong_128x128", "silu", out=out)
    torch.cuda.synchronize()
    assert_bits_equal(big[tiles * TILE:], before[tiles * TILE:])
    assert not out[TILE:3 * TILE].any()  # act(0) * 0
    gu = hopper.padded_mm(a, stack, tile_expert, meta, "pingpong_128x128")
    want = torch_argon.swiglu(gu)
    for m in (0, 3):
        rows = slice(m * TILE, (m + 1) * TILE)
        assert_bits_equal(out[rows], want[rows])


@needs_hopper
@pytest.mark.parametrize("kwargs,match", [
    (dict(N=24), "interleaved gate/up stack"),
    (dict(activation="relu"), "activation must be one of"),
    (dict(a=torch.float32), "a must be float16 or bfloat16"),
    (dict(config=2), "config must be in"),
    (dict(out_cols=32), "out must be"),
])
def test_bad_arguments_are_named(kwargs, match):
    a = torch.zeros(TILE, 64, dtype=kwargs.get("a", torch.bfloat16), device="cuda")
    w = torch.zeros(2, kwargs.get("N", 32), 64, dtype=torch.bfloat16, device="cuda")
    tile_expert = torch.zeros(1, dtype=torch.int32, device="cuda")
    meta = torch.zeros(4, dtype=torch.int32, device="cuda")
    out = torch.zeros(TILE, kwargs.get("out_cols", 16), dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match=match):
        torch.ops.argon.hopper_padded_act_mm_out(a, w, tile_expert, meta,
                                                 kwargs.get("config", 0),
                                                 kwargs.get("activation", "silu"), out)


@pytest.fixture
def fused(monkeypatch):
    monkeypatch.setattr(configs, "FUSE_ACTIVATION", True)


def path_both_ways(monkeypatch, *args, **kwargs):
    """(fused, unfused) outputs of the padded path."""
    from hopper_cases import experts_path
    monkeypatch.setattr(configs, "FUSE_ACTIVATION", True)
    got = experts_path("cuda_hopper_padded", *args, **kwargs)
    monkeypatch.setattr(configs, "FUSE_ACTIVATION", False)
    return got, experts_path("cuda_hopper_padded", *args, **kwargs)


@needs_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("dist,T", [("uniform", 300), ("zipf", 300), ("neg_some", 300),
                                    ("neg_all", 64), ("uniform", 0), ("uniform", 1)])
def test_path_fused_equals_unfused_bit_for_bit(monkeypatch, dtype, activation, dist, T):
    x, ids, w, experts = layer_case(dtype, T=T, dist=dist)
    fused_out, unfused_out = path_both_ways(monkeypatch, x, ids, w, experts,
                                            activation=activation)
    assert_bits_equal(fused_out, unfused_out)
    if T:
        assert rel_err(fused_out, reference_experts(x, ids, w, experts, activation)) < 1.5e-2


@needs_hopper
def test_path_every_config_fused(monkeypatch):
    x, ids, w, experts = layer_case(torch.bfloat16, T=512, K=8, E=4)
    for gate_up in configs.PADDED_CONFIGS:
        monkeypatch.setattr(configs, "choose_padded",
                            lambda rows, gpu, dtype, c=gate_up: (c, "pingpong_128x128"))
        fused_out, unfused_out = path_both_ways(monkeypatch, x, ids, w, experts)
        assert_bits_equal(fused_out, unfused_out)


@needs_hopper
def test_cuda_graph_replay_equals_eager_fused(fused):
    from hopper_cases import assert_replays_like_eager, experts_path
    x, ids, w, experts = layer_case(torch.bfloat16, T=256)
    assert_replays_like_eager(lambda: experts_path("cuda_hopper_padded", x, ids, w, experts), x)
    assert cuda_hopper_padded._INTERLEAVED.has((experts.gate_up,))


@needs_hopper
def test_capture_before_the_first_fused_call_runs_the_unfused_stages(monkeypatch):
    """The interleaving cannot be captured: a capture of a stack never run fused takes the
    unfused stages (the same bits), and a later capture the fused GEMM."""
    from hopper_cases import experts_path
    x, ids, w, experts = layer_case(torch.bfloat16, T=256)
    monkeypatch.setattr(configs, "FUSE_ACTIVATION", False)
    want = experts_path("cuda_hopper_padded", x, ids, w, experts)
    monkeypatch.setattr(configs, "FUSE_ACTIVATION", True)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):  # no eager warm-up: the stack is not interleaved yet
        with torch.cuda.graph(graph):
            captured = experts_path("cuda_hopper_padded", x, ids, w, experts)
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    torch.cuda.synchronize()
    assert not cuda_hopper_padded._INTERLEAVED.has((experts.gate_up,))
    assert_bits_equal(captured, want)
    graph2, captured2 = capture(lambda: experts_path("cuda_hopper_padded", x, ids, w, experts))
    assert cuda_hopper_padded._INTERLEAVED.has((experts.gate_up,))
    graph2.replay()
    torch.cuda.synchronize()
    assert_bits_equal(captured2, want)


@needs_hopper
def test_torch_compile_runs_the_unfused_stages_with_the_same_bits(fused):
    from hopper_cases import experts_path
    x, ids, w, experts = layer_case(torch.bfloat16, T=128)

    def run(x, ids, w):
        return experts_path("cuda_hopper_padded", x, ids, w, experts)

    compiled = torch.compile(run, fullgraph=True)
    assert torch.equal(compiled(x, ids, w), run(x, ids, w))


@needs_hopper
def test_opcheck_both_forms():
    T, K, E = 64, 2, 4
    ids, w = make_ids(T, K, E, "uniform"), make_weights(T, K)
    plan = plan_for(ids, w, E)
    a = torch.randn(plan.sorted_token.shape[0], 64, dtype=torch.bfloat16, device="cuda")
    wi = hopper.interleave_gate_up(torch.randn(E, 32, 64, dtype=torch.bfloat16, device="cuda"))
    for config in range(len(configs.PADDED_CONFIGS)):
        for activation in ACTIVATIONS:
            torch.library.opcheck(torch.ops.argon.hopper_padded_act_mm.default,
                                  (a, wi, plan.tile_expert, plan.meta, config, activation))
            out = torch.zeros(a.shape[0], 16, dtype=torch.bfloat16, device="cuda")
            torch.library.opcheck(torch.ops.argon.hopper_padded_act_mm_out.default,
                                  (a, wi, plan.tile_expert, plan.meta, config, activation, out))


def test_the_dequant_paths_decoded_workspace_never_takes_the_fused_gemm(contracts, monkeypatch):
    """cuda_quantized_dequant runs cuda_hopper_padded's stages on a workspace it decodes in
    place at every call: its instance keeps the unfused stages (no interleaved copy cached for
    a buffer that changes under it)."""
    from torch_argon.experts import cuda_quantized_dequant, registry
    assert registry.BY_NAME["cuda_hopper_padded"].fuses_activation
    assert not cuda_quantized_dequant._PADDED.fuses_activation
    monkeypatch.setattr(configs, "FUSE_ACTIVATION", True)
    x, ids, w, experts = dyadic_case()
    plan = torch_argon.argon_ops.moe_plan(ids, w, experts.n_experts, TILE)
    xs = torch_argon.argon_ops.moe_gather(x, plan)
    call = torch_argon.experts.ExpertsCall.of(x, experts, ops=torch_argon.argon_ops,
                                              n_entries=ids.numel())
    cuda_quantized_dequant._PADDED.gate_up_act(call, xs, plan, "pingpong_128x128")
    assert contracts.calls == 0
    registry.BY_NAME["cuda_hopper_padded"].gate_up_act(call, xs, plan, "pingpong_128x128")
    assert contracts.calls == 1
