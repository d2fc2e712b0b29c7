"""moe_plan against the reference, bit for bit, with every output pre-filled with garbage."""
import pytest
import torch

from conftest import assert_bits_equal
from torch_argon._shapes import META_SIZE, plan_rows
from torch_argon.plan import MoEPlan
from routing_cases import DISTRIBUTIONS, garbage_like, make_ids, make_weights

FIELDS = ("counts", "offsets", "sorted_token", "sorted_weight", "pos", "tile_expert", "meta")

# (T, K, E, tile_m)
SHAPES = [
    (0, 4, 8, 16),        # T = 0
    (1, 1, 1, 8),         # T = 1, K = 1, E = 1
    (1, 10, 512, 16),
    (7, 2, 3, 8),
    (64, 1, 16, 16),      # K = 1
    (100, 2, 64, 32),     # K = 2
    (257, 10, 512, 16),   # the seed's top-10 routing
    (300, 16, 128, 64),   # K = 16
    (129, 8, 1024, 128),  # E = 1024, tile_m = 128
    (2048, 10, 512, 16),  # a Qwen3-Next-sized prefill chunk
]


def run_plan(backend, ids, w, E, tm):
    """The plan through the backend's _out form, into garbage-filled buffers."""
    T, K = ids.shape
    R = plan_rows(T, K, E, tm)
    sizes = dict(counts=(E,), offsets=(E + 1,), sorted_token=(R,), sorted_weight=(R,),
                 pos=(T, K), tile_expert=(R // tm,), meta=(META_SIZE,))
    outs = [
        garbage_like(torch.empty(sizes[f], dtype=torch.float32 if f == "sorted_weight"
                                 else torch.int32), seed=i).to(backend.device)
        for i, f in enumerate(FIELDS)
    ]
    dev = backend.device
    return backend.ops.moe_plan(ids.to(dev), w.to(dev), E, tm, out=MoEPlan(*outs, tm))


def check_plan(backend, ref, ids, w, E, tm):
    got = run_plan(backend, ids, w, E, tm)
    want = ref.moe_plan(ids, w, E, tm)
    for f in FIELDS:
        assert_bits_equal(getattr(got, f), getattr(want, f), f)
    # Same inputs, same bytes: a second run into fresh garbage gives the same plan.
    again = run_plan(backend, ids, w, E, tm)
    for f in FIELDS:
        assert_bits_equal(getattr(again, f), getattr(got, f), f + " (second run)")


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
@pytest.mark.parametrize("T,K,E,tm", SHAPES, ids=[f"T{s[0]}K{s[1]}E{s[2]}tm{s[3]}" for s in SHAPES])
def test_plan_matches_reference(backend, ref, T, K, E, tm, dist):
    ids = make_ids(T, K, E, dist, seed=T + K + E)
    w = make_weights(T, K)
    check_plan(backend, ref, ids, w, E, tm)


@pytest.mark.parametrize("tm", [8, 16, 32, 64, 128])
@pytest.mark.parametrize("dist", ["uniform", "zipf", "one_expert"])
def test_plan_every_tile_m(backend, ref, tm, dist):
    ids = make_ids(500, 6, 40, dist, seed=tm)
    check_plan(backend, ref, ids, make_weights(500, 6), 40, tm)


@pytest.mark.parametrize("ids_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("w_dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_plan_dtypes(backend, ref, ids_dtype, w_dtype):
    ids = make_ids(200, 4, 32, "neg_some", dtype=ids_dtype)
    check_plan(backend, ref, ids, make_weights(200, 4, w_dtype), 32, 16)


def test_plan_non_contiguous_inputs(backend, ref):
    ids = make_ids(10, 300, 64, "uniform").t()  # [300, 10] with strides (1, 300)
    w = make_weights(10, 300).t()
    assert not ids.is_contiguous()
    got = backend.ops.moe_plan(ids.to(backend.device), w.to(backend.device), 64, 16)
    want = ref.moe_plan(ids.contiguous(), w.contiguous(), 64, 16)
    for f in FIELDS:
        assert_bits_equal(getattr(got, f), getattr(want, f), f)


@pytest.mark.parametrize("dist", ["uniform", "zipf"])
def test_plan_large(backend, ref, dist):
    """T*K above a million entries."""
    T, K, E = 110_000, 10, 512
    ids = make_ids(T, K, E, dist, seed=7, dtype=torch.int32)
    check_plan(backend, ref, ids, make_weights(T, K), E, 16)


def test_plan_invariants_hold(backend):
    """The contract's invariants, checked directly rather than through the reference."""
    T, K, E, tm = 300, 5, 50, 16
    ids = make_ids(T, K, E, "neg_some", seed=3)
    p = backend.ops.moe_plan(ids.to(backend.device), make_weights(T, K).to(backend.device), E, tm)
    p = type(p)(*(t.cpu() for t in p.tensors()), tm)
    valid = ids >= 0
    t_of = torch.arange(T)[:, None].expand(T, K)
    assert torch.equal(p.sorted_token[p.pos[valid].long()], t_of[valid].int())
    assert torch.equal(p.pos[~valid], torch.full_like(p.pos[~valid], -1))
    assert int(p.counts.sum()) == int(valid.sum()) == int(p.meta[2])
    assert torch.all(p.offsets % tm == 0) and int(p.offsets[0]) == 0
    assert int((p.sorted_token >= 0).sum()) == int(valid.sum())
