"""Metal-specific tests, run on the host runner (backend "metal_host"): the .metal kernels under
each lane schedule, the plan's limits, the recipe's kernel choices, and the runner's handling of
barriers that not every lane reaches.

Schedules (csrc/metal/host/lane_runner.h): `free` runs one host thread per lane, all concurrent;
`forward` / `reverse` run one lane at a time in ascending / descending order, each until its next
barrier. A missing barrier is caught deterministically by one of forward (a lane reads what a
higher lane has not written yet) or reverse (what a lower lane has not written yet); the
barrier-deletion check (tools/barrier_mutation.py) relies on these tests.
"""
import pytest
import torch

from torch_argon.testing import backends
from torch_argon._shapes import META_N_BAD_IDS
from routing_cases import make_ids, make_weights
from test_moe_mm import REL_TOL, rel_err, setup as moe_mm_setup
from test_plan import check_plan

BACKEND = backends.get("metal_host")
pytestmark = pytest.mark.skipif(not BACKEND.available, reason=f"metal_host: {BACKEND.reason}")
SCHEDULES = ("forward", "reverse", "free")


@pytest.fixture(params=SCHEDULES)
def schedule(request):
    torch.ops.argon_host.set_lane_schedule(request.param)
    yield request.param
    torch.ops.argon_host.set_lane_schedule("")


@pytest.fixture
def ref():
    return backends.get("reference").ops


# Shapes that reach every path of the plan kernels: several blocks (1024 entries each for
# E <= 512), several 32-entry sub-blocks per block, E > 32 (several simdgroups in plan_scan),
# E over 512 (smaller blocks, more packed words per expert), K = 1 with one expert everywhere
# (32 entries of one expert per sub-block: the field limit), K = 2, skipped entries.
# (T, K, E, tile_m, dist)
PLAN_CASES = [
    (1500, 2, 40, 16, "uniform"),
    (700, 3, 200, 8, "neg_some"),
    (2100, 1, 9, 16, "one_expert"),
    (900, 2, 5, 4, "repeated"),
    (300, 4, 1024, 32, "zipf"),
    (200, 3, 4096, 1, "uniform"),
    (64, 16, 33, 64, "empty"),
]


@pytest.mark.parametrize("T,K,E,tm,dist", PLAN_CASES,
                         ids=[f"T{c[0]}K{c[1]}E{c[2]}tm{c[3]}-{c[4]}" for c in PLAN_CASES])
def test_plan_every_schedule(schedule, ref, T, K, E, tm, dist):
    ids = make_ids(T, K, E, dist, seed=T * K + E, dtype=torch.int32)
    check_plan(BACKEND, ref, ids, make_weights(T, K, torch.bfloat16), E, tm)


def test_plan_consecutive_different_inputs(schedule, ref):
    """Threadgroup memory keeps the previous threadgroup's contents (as on a GPU): plans of
    different routings back to back must not see each other's counters."""
    for seed, E in ((1, 64), (2, 17), (3, 64), (4, 300)):
        ids = make_ids(400, 6, E, "repeated", seed=seed)
        check_plan(BACKEND, ref, ids, make_weights(400, 6), E, 16)


def test_plan_int64_ids_beyond_32_bits_are_bad_ids():
    ids = make_ids(50, 4, 16, "uniform")
    ids[2, 1] = 2**32 + 3   # low word 3: must not be mistaken for expert 3
    ids[7, 0] = -(2**32) - 1  # low word -1: must not be mistaken for a skip
    plan = BACKEND.ops.moe_plan(ids, make_weights(50, 4), 16, 16)
    assert int(plan.meta[META_N_BAD_IDS]) == 2
    assert int(plan.pos[2, 1]) == -1 and int(plan.pos[7, 0]) == -1


def test_plan_expert_limit():
    ids = make_ids(10, 2, 4097, "uniform")
    with pytest.raises(ValueError, match=r"n_expert <= 4096, got 4097"):
        BACKEND.ops.moe_plan(ids, make_weights(10, 2), 4097, 16)


@pytest.mark.parametrize("tm", [16, 32, 64])  # 16: moe_mm_rows; 32, 64: moe_mm_simd
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_moe_mm_both_kernels(schedule, ref, tm, dtype):
    plan, xs, w = moe_mm_setup(60, 3, 6, tm, "neg_some", 70, 40, dtype, seed=tm)
    out = torch.full((xs.shape[0], 40), float("nan"), dtype=dtype)
    got = BACKEND.ops.moe_mm(xs, w, plan.tile_expert, tm, out=out)
    want = ref.moe_mm(xs, w, plan.tile_expert, tm)
    assert rel_err(got, want) < REL_TOL[dtype]
    rows = plan.tile_expert.repeat_interleave(tm) < 0
    assert torch.all(got[rows] == 0)


def test_moe_mm_strided_weights(ref):
    plan, xs, w = moe_mm_setup(40, 2, 4, 32, "uniform", 48, 24, torch.float32)
    wt = w.transpose(1, 2).contiguous().transpose(1, 2)  # [E, N, Kd] with strides (., 1, N)
    got = BACKEND.ops.moe_mm(xs, wt, plan.tile_expert, 32)
    assert rel_err(got, ref.moe_mm(xs, w, plan.tile_expert, 32)) < 1e-5


@pytest.mark.parametrize("src,dst,cols,x_off,out_off,kernel", [
    (torch.float16, torch.float16, 64, 0, 0, "gather_copy16"),
    (torch.bfloat16, torch.bfloat16, 64, 128, 8, "gather_copy16"),
    (torch.float16, torch.float16, 64, 2, 0, "gather_any"),   # misaligned view
    (torch.float16, torch.float16, 62, 0, 0, "gather_any"),   # H % 4 != 0
    (torch.float32, torch.float16, 64, 0, 0, "gather_from_f32"),
    (torch.float32, torch.float32, 64, 16, 32, "gather_from_f32"),
    (torch.float32, torch.bfloat16, 64, 8, 0, "gather_any"),  # x not 16-byte aligned
    (torch.float16, torch.float32, 64, 0, 0, "gather_any"),
])
def test_gather_kernel_choice(src, dst, cols, x_off, out_off, kernel):
    assert torch.ops.argon_host.gather_kernel_for(src, dst, cols, x_off, out_off) == kernel


@pytest.mark.parametrize("src,dst", [(torch.float16, torch.float16), (torch.bfloat16, torch.bfloat16),
                                     (torch.float32, torch.float16), (torch.float32, torch.bfloat16),
                                     (torch.float32, torch.float32)])
@pytest.mark.parametrize("offset", [0, 1])  # 1: x is a view starting one element in
def test_gather_vector_and_scalar_paths(ref, src, dst, offset):
    plan = ref.moe_plan(make_ids(70, 3, 8, "neg_some"), make_weights(70, 3), 8, 16)
    base = (torch.randn(70 * 64 + offset) * 1e3).to(src)
    x = base[offset:].view(70, 64)
    got = BACKEND.ops.moe_gather(x, plan, out_dtype=dst)
    want = ref.moe_gather(x, plan.sorted_token, out_dtype=dst)
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))


def test_selftest_barrier_ok(schedule):
    out = torch.ops.argon_host.lane_selftest("selftest_barrier_ok", 96)
    assert torch.equal(out, (torch.arange(96, dtype=torch.int32) + 1) % 96 * 10)


@pytest.mark.parametrize("kernel,match", [
    ("selftest_early_return", r"threadgroup_barrier at lane_selftest.metal:\d+ not reached by 1 of 64 lanes"),
    ("selftest_split_barrier", r"lanes reached different threadgroup_barriers"),
    ("selftest_simd_early_return", r"simd collective at lane_selftest.metal:\d+ not reached by 1 of 32"),
])
def test_divergent_barrier_is_an_error_not_a_hang(schedule, kernel, match):
    with pytest.raises(RuntimeError, match=match):
        torch.ops.argon_host.lane_selftest(kernel, 64)
    # The runner is usable afterwards.
    assert int(torch.ops.argon_host.lane_selftest("selftest_barrier_ok", 64)[0]) == 10
