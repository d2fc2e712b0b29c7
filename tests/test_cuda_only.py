"""CUDA-only properties: every op inside CUDA graph capture, no host sync, out-of-range ids
counted in meta, every plan path (the grid kernel in each shape, the portable fallback) bit for
bit, and moe_mm's grouped-GEMM path with a tile_expert that is not in the plan's layout. The
parity suite (test_plan.py & co.) covers the values on every backend through the default path;
these cover what only CUDA has.

The plan's paths are reached by the shapes that select them (the launcher's rule, mirrored in
auto_grid_chunks for sm_90 devices, whose launched kernel the profiler confirms) and by E above
the grid kernel's limit for the fallback. Tests of shapes the launcher does not pick by itself
(other cluster sizes, replicas, chunks, no dependent launch) need the lab build's knobs
(ARGON_PLAN_LAB=1) and skip without them."""
import contextlib

import pytest
import torch

from torch_argon import reference
from torch_argon.testing import backends
from torch_argon.testing.plan_tuning import (GRID_SHAPE, LAB_BUILD_HINT, grid_device,
                                             kernels_launched, lab_build, plan_knobs,
                                             set_plan_knobs)
from conftest import assert_bits_equal
from routing_cases import garbage_like, make_ids, make_weights

CUDA = backends.get("cuda")
pytestmark = pytest.mark.skipif(not CUDA.available, reason=f"cuda: {CUDA.reason}")
ops = CUDA.ops
FIELDS = ("counts", "offsets", "sorted_token", "sorted_weight", "pos", "tile_expert", "meta")
PROPS = torch.cuda.get_device_properties(0) if CUDA.available else None
LAB = CUDA.available and lab_build()
needs_lab = pytest.mark.skipif(not LAB, reason=LAB_BUILD_HINT)

GRID_MAX_EXPERTS = 1022
FALLBACK_E = 1100  # above the grid kernel's limit: the portable fallback in every build
# Segments the grid shape takes: one resident block per SM (its registers allow no second), at
# most 128.
GRID_MAX_SEGMENTS = min(128, PROPS.multi_processor_count) if CUDA.available else 0
# sm_90 devices (H100, H200): clusters, of 16 blocks too, cooperative launch, and the shared
# memory for every plan of E <= 1022: the launcher's choice is predictable there.
PREDICTABLE = CUDA.available and PROPS.major == 9

# Paths forced by the lab build's knobs; "auto" (the launcher's choice) and "fallback" (E above
# the grid kernel's limit) need none.
FORCED = {
    "grid_one_segment": dict(grid_cluster=1),
    "grid_cluster8": dict(grid_cluster=8),
    "grid_cluster16": dict(grid_cluster=16),
    "grid_no_pdl": dict(pdl=0),
    "grid_shape": dict(grid_cluster=GRID_SHAPE),
    "fallback_forced": dict(grid=0),
}
PATHS = ["auto", "fallback", *FORCED]


@contextlib.contextmanager
def on_path(path):
    """The knobs of a forced path for the block (skips without the lab build)."""
    if path not in FORCED:
        yield
        return
    if not LAB:
        pytest.skip(LAB_BUILD_HINT)
    with plan_knobs(**FORCED[path]):
        yield


def path_E(path, E):
    return FALLBACK_E if path == "fallback" else E


def auto_grid_chunks(n, E):
    """The chunks per warp of the grid kernel the launcher picks on an sm_90 device for n
    entries of E experts (0: the portable fallback): one segment up to 1024 entries, clusters of
    4 up to 2048, of 8 up to 5 chunks, of 16 up to 8, then one segment per SM (up to 128)."""
    n = max(n, 1)
    if E > GRID_MAX_EXPERTS:
        return 0
    if n <= 1024:  # one segment
        return -(-n // 512)
    for segments, most in ((4, 1), (8, 5), (16, 8)):  # clusters
        if n <= segments * 512 * most:
            return -(-n // (512 * segments))
    chunks = -(-n // (512 * GRID_MAX_SEGMENTS))
    return chunks if chunks <= 8 else 0


def assert_ran(names, n, E, id_dtype=torch.int64):
    """The profiler's kernel names show the path the launcher's rule predicts (sm_90 only)."""
    if not PREDICTABLE:
        return
    chunks = auto_grid_chunks(n, E)
    if chunks == 0:
        assert any("plan_scatter_kernel" in k for k in names), names
    else:
        want = f"plan_grid_kernel<{chunks}, {'int' if id_dtype == torch.int32 else 'long'}>"
        assert any(want in k for k in names), (want, names)


def assert_plan_equal(got, want):
    for f in FIELDS:
        assert_bits_equal(getattr(got, f), getattr(want, f), f)


def plan_into_garbage(ids, w, E, tm):
    """The plan on CUDA into outputs pre-filled with garbage, the reference's, and the kernels
    the call launched."""
    want = reference.moe_plan(torch.where((ids >= E) | (ids < -1), -1, ids), w, E, tm)
    out = want._replace(**{f: garbage_like(getattr(want, f)).cuda() for f in FIELDS})
    names = kernels_launched(lambda: ops.moe_plan(ids.cuda(), w.cuda(), E, tm, out=out))
    return out, want, names


# (T, K, E, dist): on an sm_90 device, one segment (n <= 1024, C = 1, 2), clusters of 4 (C = 1),
# of 8 (C = 3, 5), of 16 (C = 3, 4, 8), the grid shape (C = 2, 7: staged), and the fallback (E
# above the limit; test_grid_kernel_large_T has it past the grid shape's entries).
AUTO_SHAPES = [
    (1, 10, 512, "uniform"), (50, 10, 512, "zipf"), (100, 10, 512, "neg_some"),
    (150, 10, 512, "uniform"), (1000, 10, 512, "zipf"), (2048, 10, 512, "one_expert"),
    (2100, 10, 512, "uniform"), (3072, 10, 512, "zipf"), (6144, 10, 512, "repeated"),
    (8192, 10, 512, "uniform"), (40000, 10, 512, "zipf"), (300, 8, FALLBACK_E, "zipf"),
    (0, 4, FALLBACK_E, "uniform"),
]


@pytest.mark.parametrize("T,K,E,dist", AUTO_SHAPES)
@pytest.mark.parametrize("id_dtype", [torch.int64, torch.int32])
def test_each_path_by_the_shapes_that_select_it(T, K, E, dist, id_dtype):
    """Every grid shape and the fallback, as the launcher picks them, on outputs pre-filled
    with garbage, with -1 and out-of-range ids (counted in meta, not placed)."""
    ids, w = make_ids(T, K, E, dist, seed=T + E, dtype=id_dtype), make_weights(T, K)
    if T > 2:
        ids[T // 2, 1], ids[T - 1, 0] = E, -5
    out, want, names = plan_into_garbage(ids, w, E, 16)
    for f in FIELDS[:-1]:
        assert_bits_equal(getattr(out, f), getattr(want, f), f)
    bad = int(((ids >= E) | (ids < -1)).sum())
    assert out.meta.cpu().tolist() == want.meta.tolist()[:3] + [bad]
    assert_ran(names, T * K, E, id_dtype)


@pytest.mark.parametrize("chunks", range(1, 9))
@pytest.mark.parametrize("id_dtype", [torch.int32, torch.int64])
def test_grid_kernel_every_instantiation(chunks, id_dtype):
    """The grid kernel is compiled once per chunk count and id type: each of the sixteen as the
    launcher picks it (clusters of 8 up to 5 chunks, then of 16), on a last segment that is not
    full, with -1 and out-of-range ids, on outputs pre-filled with garbage."""
    K, E = 8, 512
    segments = 8 if chunks <= 5 else 16
    T = segments * 512 * chunks // K - 3
    ids = make_ids(T, K, E, "neg_some", seed=chunks, dtype=id_dtype)
    ids[T // 2, 1], ids[T - 1, 7] = E, -5
    out, want, names = plan_into_garbage(ids, make_weights(T, K), E, 16)
    for f in FIELDS[:-1]:
        assert_bits_equal(getattr(out, f), getattr(want, f), f)
    assert out.meta.cpu().tolist() == want.meta.tolist()[:3] + [2]  # two bad ids
    assert_ran(names, T * K, E, id_dtype)


@pytest.mark.parametrize("dist", ["one_expert", "neg_all"])
def test_cluster_exchange_at_its_count_bound(dist):
    """The cluster shape keeps counts as u16: each warp's per-expert count (two warps to a
    32-bit word, scanned in place) and the sums the peers add into (at most 15 blocks of at most
    4096 entries, 61440 per half, so no carry crosses into the next column). Every entry to one
    expert (or every id -1: the invalid column) in 16 full segments of 8 chunks (clusters of
    16) puts each bound at its most, and the column's total (65536) past what a u16 holds."""
    K, E = 8, 512
    T = 16 * 8 * 512 // K  # 65536 entries: 16 segments of 4096
    ids, w = make_ids(T, K, E, dist, seed=T), make_weights(T, K)
    out, want, names = plan_into_garbage(ids, w, E, 16)
    assert_plan_equal(out, want)
    assert_ran(names, T * K, E)


@pytest.mark.parametrize("T,K,E,tm,dist", [
    (1, 1, 1023, 8, "uniform"), (257, 10, 2000, 16, "zipf"), (300, 16, 1500, 64, "neg_some"),
    (129, 8, 4096, 128, "repeated"), (500, 6, 1040, 16, "one_expert"), (700, 8, 1030, 64, "neg_all"),
    (777, 4, 1100, 2, "empty"), (3000, 10, 1024, 16, "zipf"), (4000, 8, 1100, 1, "uniform"),
])
def test_fallback_matches_reference(T, K, E, tm, dist):
    """The portable fallback (E above the grid kernel's limit) on outputs pre-filled with
    garbage: empty experts, every entry to one expert, -1 ids, tile_m from 1 to 128."""
    ids, w = make_ids(T, K, E, dist, seed=T), make_weights(T, K)
    out, want, names = plan_into_garbage(ids, w, E, tm)
    assert_plan_equal(out, want)
    assert any("plan_scatter_kernel" in k for k in names), names


@pytest.mark.parametrize("E", [1, 31, 32, 1023, 1024, 4000])
@pytest.mark.parametrize("path", ["auto", "grid_3replicas", "grid_cluster4", "grid_segments",
                                  "fallback_forced"])
def test_plan_expert_counts_and_paths(E, path):
    """Expert counts from 1 to 4000 (the fallback above 1022) through each path."""
    T, K = 500, min(E, 8)
    ids, w = make_ids(T, K, E, "zipf", seed=E), make_weights(T, K)
    ids[::7, 0] = -1
    knobs = {"grid_3replicas": dict(grid_cluster=1, grid_replicas=3, grid_chunks=8),
             "grid_cluster4": dict(grid_cluster=4),
             "grid_segments": dict(grid_cluster=GRID_SHAPE, grid_chunks=1),
             "fallback_forced": dict(grid=0)}.get(path)
    if knobs is not None and not LAB:
        pytest.skip(LAB_BUILD_HINT)
    with plan_knobs(**knobs) if knobs else contextlib.nullcontext():
        got = ops.moe_plan(ids.cuda(), w.cuda(), E, 16)
    assert_plan_equal(got, reference.moe_plan(ids, w, E, 16))


@pytest.mark.parametrize("T,dist", [(16384, "uniform"), (16384, "zipf"), (40000, "uniform"),
                                    (60000, "zipf")])
def test_grid_kernel_large_T(T, dist):
    """Large prefills: 16384 tokens x 10 (on an H200: 3 chunks per warp over 107 blocks),
    400,000 entries (7 chunks over 112 blocks), and 600,000, past 8 chunks over 128 blocks,
    which the fallback takes."""
    K, E = 10, 512
    ids, w = make_ids(T, K, E, dist, seed=T), make_weights(T, K)
    holder = []
    names = kernels_launched(lambda: holder.append(ops.moe_plan(ids.cuda(), w.cuda(), E, 16)))
    assert_plan_equal(holder[0], reference.moe_plan(ids, w, E, 16))
    assert_ran(names, T * K, E)


# ---- the lab build: shapes the launcher does not pick by itself ------------------------------

def grid_fits(n, E, cluster, chunks):
    """Whether the grid kernel takes a plan of n entries with the grid_cluster and grid_chunks
    knobs as given (0: automatic), as the launcher decides (lab build: grid_device's facts)."""
    dev = grid_device()

    def smem_fits(c, cluster):  # plan_grid_smem_bytes
        h = max(E * 12, 3 * 512 * c)
        acc = (h + ((E + 2 + 3) & ~3) + 4 * E + 1 + 3) & ~3
        return acc * 4 + (2 if cluster >= 2 else 0) * ((E + 2 + 7) // 8 * 16) <= dev["smem_room"]
    if E > GRID_MAX_EXPERTS:
        return False
    n = max(n, 1)
    if cluster == 0:
        return n <= 8 * 512 * GRID_MAX_SEGMENTS and smem_fits(8, 0)
    if cluster == GRID_SHAPE:
        c = chunks or -(-n // (512 * GRID_MAX_SEGMENTS))
        return c <= 8 and -(-n // (512 * c)) <= GRID_MAX_SEGMENTS and smem_fits(c, 0)
    if (cluster > 1 and not dev["clusters"]) or (cluster > 8 and not dev["big_clusters"]):
        return False
    c = chunks or -(-n // (512 * cluster))
    return c <= 8 and n <= 512 * c * cluster and smem_fits(c, cluster)


@needs_lab
@pytest.mark.parametrize("T,K,E,tm,dist", [
    (0, 4, 8, 16, "uniform"), (1, 1, 1, 8, "uniform"), (1, 10, 512, 16, "uniform"),
    (37, 3, 5, 1, "neg_some"), (128, 10, 512, 16, "zipf"), (409, 10, 512, 16, "uniform"),
    (500, 6, 40, 16, "one_expert"), (700, 8, 64, 64, "neg_all"), (777, 4, 100, 2, "empty"),
    (2048, 10, 512, 16, "zipf"), (4096, 10, 512, 16, "uniform"), (6144, 10, 512, 16, "zipf"),
    (3000, 8, 1022, 16, "repeated"), (3000, 8, 1023, 16, "uniform"),
    (1500, 2, 5000, 32, "uniform"),
])
@pytest.mark.parametrize("cluster,replicas,chunks", [
    (0, 0, 0), (1, 1, 0), (1, 3, 0), (1, 40, 0), (4, 16, 0), (8, 8, 0), (8, 3, 8), (2, 5, 1),
    (3, 5, 0), (12, 1, 0), (16, 6, 0), (16, 7, 0), (16, 1, 3), (GRID_SHAPE, 0, 1),
    (GRID_SHAPE, 0, 3), (GRID_SHAPE, 0, 8)])
def test_grid_kernel_shapes(T, K, E, tm, dist, cluster, replicas, chunks):
    """The grid kernel in each shape, forced: one segment on 1 to 40 replicas; clusters of 2,
    3, 4, 8, 12 or 16 segments (T = 6144: 8 chunks per warp; on 6 or 7 replicas a warp ranks
    the one or two it places and only counts the others); one segment per block (the grid shape)
    with 1 chunk per warp (placed directly) or 3 and 8 (staged); on outputs pre-filled with
    garbage. The grid kernel runs wherever the shape holds the plan (grid_fits), the fallback
    otherwise."""
    ids, w = make_ids(T, K, E, dist, seed=T + E), make_weights(T, K)
    with plan_knobs(grid_cluster=cluster, grid_replicas=replicas, grid_chunks=chunks):
        out, want, names = plan_into_garbage(ids, w, E, tm)
    assert_plan_equal(out, want)
    assert any("plan_grid_kernel" in n for n in names) == grid_fits(T * K, E, cluster, chunks)


@needs_lab
@pytest.mark.parametrize("cluster,segments", [(1, 1), (GRID_SHAPE, 4)])
def test_warp_counts_at_their_bound(cluster, segments):
    """Every entry to one expert in full segments of 8 chunks puts each warp's u16 count at 256
    and the last warp's prefix at 3840, the most a segment holds: one segment and the grid shape
    (clusters of 16: test_cluster_exchange_at_its_count_bound)."""
    K, E = 8, 512
    T = segments * 8 * 512 // K
    ids, w = make_ids(T, K, E, "one_expert", seed=T), make_weights(T, K)
    with plan_knobs(grid_cluster=cluster, grid_chunks=8):
        out, want, names = plan_into_garbage(ids, w, E, 16)
    assert_plan_equal(out, want)
    assert any("plan_grid_kernel<8," in n for n in names), names


@needs_lab
@pytest.mark.parametrize("n_entries", [2047, 2048, 4095, 4096, 4097, 8193, 16384, 40960])
@pytest.mark.parametrize("pdl", [1, 0])
def test_forced_paths_agree(n_entries, pdl):
    """The same routing through every forced path, with and without programmatic dependent
    launch, gives the reference's bytes."""
    K, E = 8, 512
    T = n_entries // K
    ids, w = make_ids(T, K, E, "zipf", seed=n_entries).cuda(), make_weights(T, K).cuda()
    want = reference.moe_plan(ids.cpu(), w.cpu(), E, 16)
    for knobs in FORCED.values():
        with plan_knobs(**{"pdl": pdl, **knobs}):  # the path's own knobs win
            assert_plan_equal(ops.moe_plan(ids, w, E, 16), want)


@needs_lab
def test_cluster_shape_holds_one_block_per_sm():
    """The cluster shape's blocks ask for enough shared memory that no SM holds two of them,
    at any chunk count and for the smallest plan: launched early behind another kernel, two
    blocks to an SM ran the plan on half its SMs (1.35-1.54 us slower behind the router top-k
    on an H200; bench/plan_cuda_notes.md, session 18)."""
    assert grid_device()["cluster_blocks_per_sm"] == 1


@needs_lab
def test_plan_knobs_reject_bad_values():
    """A chunk count the grid kernel cannot take is refused by name, and nothing changes; so is
    a knob name that does not exist."""
    before = set_plan_knobs()
    for bad in (9, 100):
        with pytest.raises(RuntimeError, match="grid_chunks"):
            set_plan_knobs(grid_chunks=bad)
    with pytest.raises(RuntimeError, match="grid_cluster"):
        set_plan_knobs(grid_cluster=GRID_SHAPE + 1, grid_chunks=2)
    assert set_plan_knobs() == before
    with pytest.raises(ValueError, match="unknown plan knobs"):
        set_plan_knobs(grid_chunk=2)


# ---- every path: bad ids, CUDA graphs, stream order, no host sync -----------------------------

@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("id_dtype", [torch.int32, torch.int64])
def test_bad_ids_counted_in_meta(path, id_dtype):
    T, K, E = 1000, 4, path_E(path, 32)
    ids = make_ids(T, K, E, "uniform", dtype=id_dtype)
    bad_at = [(0, 0), (5, 3), (999, 1), (500, 2)]
    for (t, k), v in zip(bad_at, [E, -2, 2**31 - 1, -(2**31)]):
        ids[t, k] = v
    w = make_weights(T, K)
    with on_path(path):
        plan = ops.moe_plan(ids.cuda(), w.cuda(), E, 16)
        with pytest.raises(ValueError, match="outside"):
            ops.moe_plan(ids.cuda(), w.cuda(), E, 16, check_ids=True)
    assert plan.n_bad_ids == len(bad_at)
    masked = torch.where((ids >= E) | (ids < -1), -1, ids)
    want = reference.moe_plan(masked, w, E, 16)
    for f in FIELDS[:-1]:
        assert_bits_equal(getattr(plan, f), getattr(want, f), f)
    assert plan.n_valid == int(want.meta[2])


def layer_inputs(T=300, H=64, I=32, E=16, K=4, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=g).to(dtype)
    wgu = (torch.randn(E, 2 * I, H, generator=g) / H ** 0.5).to(dtype)
    wd = (torch.randn(E, H, I, generator=g) / I ** 0.5).to(dtype)
    ids = make_ids(T, K, E, "neg_some", seed=seed)
    w = make_weights(T, K)
    return x, wgu, wd, ids, w


def layer_steps(x, wgu, wd, ids, w, E, tm=16):
    plan = ops.moe_plan(ids, w, E, tm)
    xs = ops.moe_gather(x, plan)
    h = ops.swiglu(ops.moe_mm(xs, wgu, plan))
    y = ops.moe_mm(h, wd, plan)
    return plan, ops.moe_combine(y, plan, w, residual=x)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("T", [300, 5000])
@pytest.mark.parametrize("path", PATHS)
def test_every_op_in_cuda_graph(dtype, T, path):
    """Capture plan -> gather -> moe_mm -> swiglu -> moe_mm -> combine once, then replay it on
    new routings copied into the captured inputs: each replay equals an eager run (through each
    plan path; the fallback's stable sort is captured too)."""
    E = path_E(path, 16)
    with on_path(path):
        x, wgu, wd, ids, w = (t.cuda() for t in layer_inputs(T=T, E=E, dtype=dtype))
        static_ids, static_w = ids.clone(), w.clone()
        torch.cuda.synchronize()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            layer_steps(x, wgu, wd, static_ids, static_w, E)  # warm-up outside the capture
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            g_plan, g_out = layer_steps(x, wgu, wd, static_ids, static_w, E)
        for seed in (1, 2, 3):
            _, _, _, ids2, w2 = layer_inputs(T=T, E=E, dtype=dtype, seed=seed)
            static_ids.copy_(ids2.cuda())
            static_w.copy_(w2.cuda())
            graph.replay()
            e_plan, e_out = layer_steps(x, wgu, wd, ids2.cuda(), w2.cuda(), E)
            torch.cuda.synchronize()
            assert_plan_equal(g_plan, e_plan)
            assert_bits_equal(g_out, e_out, "layer output")


@pytest.mark.parametrize("T", [20, 2000, 4000, 8000])
@pytest.mark.parametrize("path", PATHS)
def test_plan_waits_for_the_plan_before_it(T, path):
    """With programmatic dependent launch a plan kernel may start before the kernel before it
    ends, and a plan kernel lets the next start at once. So, with no kernel between:
    - feed one plan the previous plan's output (its tile_expert, experts or -1, as the ids of
      a second plan): the second must read the first's final bytes;
    - write a plan into the outputs of the plan just launched (out=): the second must write
      after the first is done, or the first's late stores would show.
    Three rounds on new routings. T = 20 to 8000: the first plan, and the one written into its
    outputs, take one segment, clusters of 8 or 16, or the grid shape; the second plan, on 200
    to 5480 tiles, one segment or clusters of 4 or 8."""
    K, E, tm = 10, path_E(path, 512), 16
    with on_path(path):
        for seed in range(3):
            ids = make_ids(T, K, E, "zipf", seed=seed)
            w = make_weights(T, K)
            want_first = reference.moe_plan(ids, w, E, tm)
            tiles = want_first.tile_expert.view(-1, 1)
            w2 = torch.rand(tiles.shape[0], 1, generator=torch.Generator().manual_seed(seed))
            want_second = reference.moe_plan(tiles, w2, E, tm)
            ids_b = make_ids(T, K, E, "uniform", seed=seed + 100)
            want_b = reference.moe_plan(ids_b, w, E, tm)
            ids, w, w2, ids_b = ids.cuda(), w.cuda(), w2.cuda(), ids_b.cuda()
            torch.cuda.synchronize()
            first = ops.moe_plan(ids, w, E, tm)
            second = ops.moe_plan(first.tile_expert.view(-1, 1), w2, E, tm)
            assert_plan_equal(first, want_first)
            assert_plan_equal(second, want_second)
            torch.cuda.synchronize()
            into = ops.moe_plan(ids, w, E, tm)
            ops.moe_plan(ids_b, w, E, tm, out=into)
            assert_plan_equal(into, want_b)


@pytest.mark.parametrize("T", [20, 2000, 4000])
@pytest.mark.parametrize("path", ["auto", "grid_no_pdl"])
def test_plan_waits_for_the_router_top_k(T, path):
    """The router's top-k (the Triton kernel where Triton is importable, as in moe_layer; else
    torch.topk) lets the next kernel start early on sm_90+ (topk_kernel.py), and the plan is
    launched to start early: the plan right after it must still read the top-k's final ids and
    weights (eager and replayed from a CUDA graph, over new scores each round)."""
    from torch_argon.routing import topk_experts
    K, E, tm = 10, 512, 16
    g = torch.Generator(device="cuda").manual_seed(T)
    scores = torch.empty(T, E, device="cuda")
    out = ops.moe_plan(*(t.cuda() for t in (make_ids(T, K, E, "uniform"), make_weights(T, K))),
                       E, tm)

    def route_and_plan():
        w, ids = topk_experts(scores, K)
        return ids, w, ops.moe_plan(ids, w, E, tm, out=out)
    with on_path(path):
        graph = torch.cuda.CUDAGraph()
        scores.copy_(torch.rand(T, E, device="cuda", generator=g))
        route_and_plan()
        with torch.cuda.graph(graph):
            g_ids, g_w, _ = route_and_plan()
        for round_ in range(4):
            scores.copy_(torch.rand(T, E, device="cuda", generator=g))
            if round_ % 2:
                graph.replay()
                ids, w = g_ids, g_w
            else:
                ids, w, _ = route_and_plan()
            assert_plan_equal(out, reference.moe_plan(ids.cpu(), w.cpu(), E, tm))


@pytest.mark.parametrize("path", PATHS)
def test_no_host_sync(path):
    """No op reads anything back to the host (torch raises on a synchronizing call)."""
    E = path_E(path, 16)
    x, wgu, wd, ids, w = (t.cuda() for t in layer_inputs(T=5000, E=E))
    torch.cuda.synchronize()
    with on_path(path):
        torch.cuda.set_sync_debug_mode("error")
        try:
            plan, out = layer_steps(x, wgu, wd, ids, w, E)
            ops.moe_gather(x, plan, out_dtype=torch.float32)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_moe_mm_any_tile_expert_layout(dtype):
    """tile_expert not in the plan's layout (shuffled, -1 in the middle): the grouped-GEMM
    path detects it on the device and recomputes; rows of -1 tiles are zero either way."""
    E, tm, Kd, N, n_tiles = 8, 16, 64, 48, 40
    g = torch.Generator().manual_seed(0)
    te = torch.randint(-1, E, (n_tiles,), generator=g, dtype=torch.int32)
    xs = torch.randn(n_tiles * tm, Kd, generator=g).to(dtype)
    w = (torch.randn(E, N, Kd, generator=g) / Kd ** 0.5).to(dtype)
    want = reference.moe_mm(xs, w, te, tm)
    for fn in (lambda: ops.moe_mm(xs.cuda(), w.cuda(), te.cuda(), tm),
               lambda: ops.moe_mm(xs.cuda(), w.cuda(), te.cuda(), tm,
                                  out=torch.full((n_tiles * tm, N), float("nan"), dtype=dtype,
                                                 device="cuda"))):
        got = fn().cpu()
        err = float((got.double() - want.double()).norm() / want.double().norm())
        assert err < {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}[dtype]
        rows = (te < 0).repeat_interleave(tm)
        assert torch.all(got[rows] == 0)


def test_combine_top10_wide_rows_bit_exact():
    """The benchmark's shape class: K = 10, H = 2560, fp16, skewed routing."""
    T, K, E, H = 257, 10, 512, 2560
    ids, w = make_ids(T, K, E, "zipf", seed=5), make_weights(T, K)
    plan = reference.moe_plan(ids, w, E, 16)
    y = torch.randn(plan.sorted_token.shape[0], H, dtype=torch.float16)
    got = ops.moe_combine(y.cuda(), plan.pos.cuda(), w.cuda())
    assert_bits_equal(got, reference.moe_combine(y, plan.pos, w), "out")
    xs = ops.moe_gather(y[:T].cuda(), plan.sorted_token.cuda())
    assert_bits_equal(xs, reference.moe_gather(y[:T], plan.sorted_token), "xs")
