"""torch_argon/experts/derived_cache.py: values derived once from weight tensors (the fused
GEMM's interleaved stack, the mixed GEMM's repack) and kept fresh: made once, found again from
views made afresh, derived again after an in-place change, a replaced .data or a replaced second
tensor, refreshed in the same buffers where the layout allows (a captured CUDA graph holds
their addresses), let go with the weights, inference tensors kept."""
import gc
from typing import NamedTuple

import torch

from torch_argon.experts.derived_cache import DerivedCache


class Counting:
    """derive() for a cache: the sum of the tensors along their last dim (a tensor of one
    layout per input layout), counting its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, tensors):
        def derive():
            self.calls += 1
            return sum(t.sum(-1) for t in tensors)
        return derive


def test_made_once_then_found():
    cache, derive = DerivedCache(), Counting()
    w = torch.randn(4, 8, 16)
    first = cache.get((w,), derive((w,)))
    assert cache.has((w,)) and cache.get((w,), derive((w,))) is first
    assert derive.calls == 1 and torch.equal(first, w.sum(-1))


def test_fresh_views_find_their_entry_and_views_differ():
    cache, derive = DerivedCache(), Counting()
    w = torch.randn(4, 8, 16)
    share = cache.get((w[1:3],), derive((w[1:3],)))
    assert cache.get((w[1:3],), derive((w[1:3],))) is share  # a new view object, same view
    assert not cache.has((w[0:2],))  # another offset: another entry
    assert torch.equal(cache.get((w[0:2],), derive((w[0:2],))), w[0:2].sum(-1))
    assert derive.calls == 2 and len(cache.entries) == 1


def test_an_in_place_change_refreshes_the_same_buffer():
    cache, derive = DerivedCache(), Counting()
    w = torch.randn(4, 8, 16)
    first = cache.get((w,), derive((w,)))
    address = first.data_ptr()
    w.mul_(2)
    assert not cache.has((w,))
    again = cache.get((w,), derive((w,)))
    assert again is first and again.data_ptr() == address
    assert torch.equal(again, w.sum(-1))


def test_a_replaced_storage_is_seen():
    """A parameter whose .data is replaced keeps its version counter: the storage tells."""
    cache, derive = DerivedCache(), Counting()
    w = torch.nn.Parameter(torch.randn(2, 32, 8), requires_grad=False)
    made = cache.get((w,), derive((w,)))
    w.data = torch.randn(2, 32, 8)
    assert not cache.has((w,))
    assert torch.equal(cache.get((w,), derive((w,))), w.detach().sum(-1))
    assert cache.get((w,), derive((w,))).data_ptr() == made.data_ptr()


def test_a_replaced_second_tensor_is_seen():
    """The entry is keyed by the first tensor: a second one swapped for another of the same
    geometry (which may reuse a freed one's id or address) derives again."""
    cache, derive = DerivedCache(), Counting()
    gate, up = torch.randn(2, 8, 4), torch.randn(2, 8, 4)
    cache.get((gate, up), derive((gate, up)))
    other = up.clone()
    other.add_(1)
    assert not cache.has((gate, other))
    assert torch.equal(cache.get((gate, other), derive((gate, other))),
                       gate.sum(-1) + other.sum(-1))


class Pair(NamedTuple):
    a: torch.Tensor
    b: torch.Tensor
    tag: str


def test_tuple_values_refresh_in_place_and_a_new_layout_replaces():
    cache = DerivedCache()
    w = torch.randn(3, 5)
    made = cache.get((w,), lambda: Pair(w * 2, w.sum(0), "x"))
    pointers = (made.a.data_ptr(), made.b.data_ptr())
    w.add_(1)
    again = cache.get((w,), lambda: Pair(w * 2, w.sum(0), "x"))
    assert again is made and (again.a.data_ptr(), again.b.data_ptr()) == pointers
    assert torch.equal(again.a, w * 2)
    w.add_(1)  # a value of another layout (or other fields) cannot go in the old buffers
    other = cache.get((w,), lambda: Pair(w[:1] * 2, w.sum(0), "x"))
    assert other is not made and torch.equal(other.a, w[:1] * 2)
    w.add_(1)
    tagged = cache.get((w,), lambda: Pair(w[:1] * 2, w.sum(0), "y"))
    assert tagged is not other and tagged.tag == "y"


def test_the_cache_lets_go_of_freed_weights():
    cache, derive = DerivedCache(), Counting()
    w = torch.randn(2, 32, 8)
    cache.get((w,), derive((w,)))
    cache.get((w[:1],), derive((w[:1],)))
    assert len(cache.entries) == 1
    del w
    gc.collect()
    assert len(cache.entries) == 0


def test_inference_tensors_are_cached_without_a_version():
    cache, derive = DerivedCache(), Counting()
    with torch.inference_mode():
        w = torch.randn(2, 32, 8)
        made = cache.get((w,), derive((w,)))
    assert cache.get((w,), derive((w,))) is made and derive.calls == 1
