"""The eager fast path of the functional plan (torch_argon._C.plan_fresh, csrc/plan_fresh.cpp):
the seven outputs are views of one fresh buffer. The same bytes as the reference, the views
laid out without overlap, the op's own behaviour wherever the fast path steps aside, and the
op's errors for bad input."""
import pytest
import torch
from torch.overrides import TorchFunctionMode

import torch_argon
from conftest import assert_bits_equal
from routing_cases import garbage_like, make_ids, make_weights
from torch_argon import _C
from torch_argon._shapes import META_SIZE, plan_rows
from torch_argon.plan import MoEPlan

FIELDS = ("counts", "offsets", "sorted_token", "sorted_weight", "pos", "tile_expert", "meta")
SHAPES = [(0, 4, 8, 16), (1, 1, 1, 8), (7, 2, 3, 8), (257, 10, 512, 16), (300, 16, 128, 64),
          (2048, 10, 512, 16)]


@pytest.fixture(autouse=True)
def _backend_has_the_fast_path(request):
    """The metal_cuda test backend has no eager fast path (its library is not one plan_fresh
    knows): its plans come from the op, which the parity tests cover."""
    if "backend" in request.fixturenames:
        be = request.getfixturevalue("backend")
        if be.ops._fresh_lib is None:
            pytest.skip(f"{be.name}: no eager plan fast path")


def library(backend):
    return backend.ops._fresh_lib


def fresh(backend, ids, w, E, tm):
    """The fast path's plan, called directly (None where it steps aside)."""
    return _C.plan_fresh(MoEPlan, library(backend), ids, w, E, tm)


def assert_plan_equal(got, want):
    for f in FIELDS:
        assert_bits_equal(getattr(got, f), getattr(want, f), f)


def storages(tensors):
    """How many storages the tensors' data lie in."""
    return len({t.untyped_storage().data_ptr() for t in tensors})


def storage_words(plan):
    return plan.counts.untyped_storage().nbytes() // 4


def poison_allocator(words, device):
    """Frees a buffer of `words` int32 words full of garbage, so that the next allocation of
    that size (the caching allocator on CUDA, malloc's bins for small sizes on the CPU) is
    likely to get garbage, not zeros."""
    source = garbage_like(torch.empty(words, dtype=torch.int32), seed=words)
    buf = torch.empty(words, dtype=torch.int32, device=device)
    buf.copy_(source)
    del source
    del buf  # freed last: the next allocation of its size is the likeliest to reuse it


@pytest.mark.parametrize("dist", ["uniform", "zipf", "one_expert", "neg_some"])
@pytest.mark.parametrize("T,K,E,tm", SHAPES, ids=[f"T{s[0]}K{s[1]}E{s[2]}tm{s[3]}" for s in SHAPES])
def test_fresh_plan_matches_reference(backend, ref, T, K, E, tm, dist):
    ids, w = make_ids(T, K, E, dist, seed=T + E), make_weights(T, K)
    dev = backend.device
    first = backend.ops.moe_plan(ids.to(dev), w.to(dev), E, tm)
    words = storage_words(first)
    del first
    poison_allocator(words, dev)
    got = backend.ops.moe_plan(ids.to(dev), w.to(dev), E, tm)
    assert storages(got.tensors()) == 1, "the Python API's eager plan did not take the fast path"
    want = ref.moe_plan(ids, w, E, tm)
    assert_plan_equal(got, want)


def test_fresh_plan_is_seven_disjoint_views(backend):
    """A MoEPlan (built in C); one storage; each output contiguous, with the contract's shape
    and dtype, on its own 128-byte aligned range inside the storage, in contract order, none
    overlapping."""
    T, K, E, tm = 300, 10, 64, 16
    dev = backend.device
    ids, w = make_ids(T, K, E, "uniform").to(dev), make_weights(T, K).to(dev)
    tensors = fresh(backend, ids, w, E, tm)
    assert type(tensors) is MoEPlan and tensors.tile_m == tm and len(tensors) == 8
    R = plan_rows(T, K, E, tm)
    shapes = [(E,), (E + 1,), (R,), (R,), (T, K), (R // tm,), (META_SIZE,)]
    storage = tensors[0].untyped_storage()
    end = 0
    for name, t, shape in zip(FIELDS, tensors, shapes):
        assert tuple(t.shape) == shape, name
        assert t.dtype == (torch.float32 if name == "sorted_weight" else torch.int32), name
        assert t.is_contiguous() and t.device == ids.device, name
        assert t.untyped_storage().data_ptr() == storage.data_ptr(), name
        start = t.storage_offset() * 4
        assert start % 128 == 0 and start >= end, f"{name} starts at byte {start}, before {end}"
        end = start + t.numel() * 4
    assert end <= storage.nbytes()


def test_op_outputs_stay_separate(backend):
    """The op itself (torch.ops.argon.moe_plan) returns seven separate tensors, as a custom
    op must: only the Python API's eager path shares one buffer."""
    dev = backend.device
    outs = backend.ops.op.moe_plan(make_ids(20, 3, 8, "uniform").to(dev),
                                   make_weights(20, 3).to(dev), 8, 16)
    assert storages(outs) == 7


def test_fresh_plan_in_inference_mode_and_autocast(backend, ref):
    """Inference mode and autocast leave the fast path on (nothing in them concerns a plan)."""
    T, K, E, tm = 64, 4, 16, 16
    dev = backend.device
    ids, w = make_ids(T, K, E, "uniform", seed=8), make_weights(T, K)
    want = ref.moe_plan(ids, w, E, tm)
    with torch.inference_mode():
        got = backend.ops.moe_plan(ids.to(dev), w.to(dev), E, tm)
    assert got.pos.is_inference()
    with torch.autocast(torch.device(dev).type):
        again = backend.ops.moe_plan(ids.to(dev), w.to(dev), E, tm)
    for plan in (got, again):
        assert storages(plan.tensors()) == 1
        assert_plan_equal(plan, want)


def test_fresh_plan_as_out(backend, ref):
    """A fast-path plan, passed back as out=, takes the next plan (seven views as outputs)."""
    T, K, E, tm = 200, 6, 40, 16
    dev = backend.device
    plan = backend.ops.moe_plan(make_ids(T, K, E, "uniform", seed=1).to(dev),
                                make_weights(T, K).to(dev), E, tm)
    ids, w = make_ids(T, K, E, "zipf", seed=2), make_weights(T, K)
    got = backend.ops.moe_plan(ids.to(dev), w.to(dev), E, tm, out=plan)
    assert got is plan
    want = ref.moe_plan(ids, w, E, tm)
    assert_plan_equal(got, want)


class _PassThrough(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class _Marked(torch.Tensor):
    pass


def test_fast_path_steps_aside(backend, ref):
    """Where the op could behave differently (a Python mode, a tensor subclass, arguments of
    another type, weights that need grad), plan_fresh returns None and the Python API's plan
    comes from the op: seven separate tensors, the same bytes."""
    T, K, E, tm = 30, 4, 16, 16
    dev = backend.device
    ids, w = make_ids(T, K, E, "neg_some", seed=5), make_weights(T, K)
    ids_d, w_d = ids.to(dev), w.to(dev)
    want = ref.moe_plan(ids, w, E, tm)

    def check(plan):
        assert storages(plan.tensors()) == 7
        assert_plan_equal(plan, want)

    with _PassThrough():
        assert fresh(backend, ids_d, w_d, E, tm) is None
        check(backend.ops.moe_plan(ids_d, w_d, E, tm))
    w_grad = w_d.clone().requires_grad_()
    assert fresh(backend, ids_d, w_grad, E, tm) is None
    with torch.no_grad():  # without grad mode, weights that require grad do not matter
        assert fresh(backend, ids_d, w_grad, E, tm) is not None
    assert fresh(backend, ids_d.as_subclass(_Marked), w_d, E, tm) is None
    assert fresh(backend, ids_d, w_d, torch.tensor(E), tm) is None
    assert fresh(backend, ids_d, w_d, E, True) is None
    assert fresh(backend, ids_d.to("meta"), w_d.to("meta"), E, tm) is None
    meta = backend.ops.moe_plan(ids_d.to("meta"), w_d.to("meta"), E, tm)
    assert [tuple(t.shape) for t in meta.tensors()] == [tuple(t.shape) for t in want.tensors()]
    seen = []

    def probe(row):
        seen.append(fresh(backend, row, w_d[:1], E, tm))
        return row
    torch.vmap(probe)(ids_d.unsqueeze(1))  # a functorch transform: dispatch keys switched on
    assert seen == [None]
    # Traced by the JIT, the plan must come from the op, or the trace would hold a constant.
    traced = torch.jit.trace(lambda i, v: backend.ops.moe_plan(i, v, E, tm).pos, (ids_d, w_d),
                             check_trace=False)
    ids2 = make_ids(T, K, E, "zipf", seed=6)
    assert_bits_equal(traced(ids2.to(dev), w_d), ref.moe_plan(ids2, w, E, tm).pos, "traced pos")
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        fake_ids, fake_w = mode.from_tensor(ids_d), mode.from_tensor(w_d)
        assert fresh(backend, fake_ids, fake_w, E, tm) is None
        assert backend.ops.moe_plan(fake_ids, fake_w, E, tm).pos.shape == (T, K)


@pytest.mark.parametrize("case", ["ids_float", "shapes_differ", "ids_1d", "tile_m_3", "no_experts",
                                  "weights_int"])
def test_fast_path_raises_the_ops_errors(backend, case):
    """Bad input raises from the fast path exactly what the op raises (type and message)."""
    dev = backend.device
    ids, w, E, tm = make_ids(10, 4, 8, "uniform").to(dev), make_weights(10, 4).to(dev), 8, 16
    ids, w, E, tm = {
        "ids_float": (ids.float(), w, E, tm),
        "shapes_differ": (ids, w[:, :3], E, tm),
        "ids_1d": (ids[0], w, E, tm),
        "tile_m_3": (ids, w, E, 3),
        "no_experts": (ids, w, 0, tm),
        "weights_int": (ids, ids.int(), E, tm),
    }[case]
    with pytest.raises(Exception) as from_op:
        backend.ops.op.moe_plan(ids, w, E, tm)
    with pytest.raises(Exception) as from_fast_path:
        fresh(backend, ids, w, E, tm)
    assert type(from_fast_path.value) is type(from_op.value)
    assert str(from_fast_path.value).splitlines()[0] == str(from_op.value).splitlines()[0]


def test_plan_fresh_checks_its_call():
    ids, w = make_ids(4, 2, 4, "uniform"), make_weights(4, 2)
    with pytest.raises(ValueError, match="no op library 'nope' with a moe_plan_out"):
        _C.plan_fresh(MoEPlan, "nope", ids, w, 4, 16)
    with pytest.raises(TypeError, match="plan_fresh"):
        _C.plan_fresh(MoEPlan, "argon", ids, w, 4)
    with pytest.raises(TypeError, match="plan_fresh"):
        _C.plan_fresh("argon", ids, w, 4, 16)  # no plan type
    with pytest.raises(TypeError, match="plan_fresh"):
        _C.plan_fresh(list, "argon", ids, w, 4, 16)  # not a tuple type
    with pytest.raises(OverflowError):
        _C.plan_fresh(MoEPlan, "argon", ids, w, 1 << 70, 16)


def test_public_function_takes_the_fast_path():
    ids, w = make_ids(40, 4, 16, "uniform"), make_weights(40, 4)
    plan = torch_argon.moe_plan(ids, w, 16)
    assert storages(plan.tensors()) == 1
