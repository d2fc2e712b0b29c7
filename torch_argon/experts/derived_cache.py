"""Tensors derived once from the experts' weights and kept beside them: the fused gate/up GEMM's
interleaved stack (cuda_hopper_padded), the mixed-input GEMM's repacked codes
(cuda_quantized_mixed). Both are made at a layer's first call and must follow the weights.

An entry is keyed weakly by the base tensor of the first weight tensor it was derived from (it
goes when that tensor goes) and, under it, by the geometry of every weight tensor it came from
(storage offset, shape, strides, dtype): views made afresh at every call (select_experts, the
expert-parallel shard) find their entry. It is fresh while every weight tensor has the storage
and the version counter it had (a parameter whose .data was replaced keeps its counter: the
storage tells; an inference tensor has no counter, and cannot change outside inference mode) and
the other tensors' bases are the ones it was made from (a freed tensor's id and address can be
reused).

A stale entry is refreshed in place where the new value has the old one's shapes: a CUDA graph
that captured a GEMM reading it holds its buffers' addresses, which must stay valid and come to
hold the new weights (an eager call refreshes them; the graph's replays then read them).
"""
import threading
import weakref

import torch
from torch.utils.weak import WeakIdKeyDictionary


def _base(t):
    return t._base if t._base is not None else t


def _geometry(t):
    return (t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)


def _marks(tensors):
    """What an entry must match to be fresh: each tensor's storage and version counter."""
    return tuple((t.untyped_storage().data_ptr(), None if t.is_inference() else t._version)
                 for t in tensors)


def _buffers(value):
    """The tensors of a value (a tensor, or a tuple such as MixedWeights), in order."""
    return [value] if isinstance(value, torch.Tensor) else [
        v for v in value if isinstance(v, torch.Tensor)]


def _same_layout(stale, fresh):
    """Whether fresh can be copied into stale's buffers: the same tensors' shapes, dtypes and
    devices, and the same other fields."""
    if isinstance(stale, torch.Tensor) != isinstance(fresh, torch.Tensor):
        return False
    if not isinstance(stale, torch.Tensor):
        if type(stale) is not type(fresh) or len(stale) != len(fresh):
            return False
        if any(a != b for a, b in zip(stale, fresh)
               if not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor)):
            return False
    old, new = _buffers(stale), _buffers(fresh)
    return len(old) == len(new) and all(
        (a.shape, a.dtype, a.device) == (b.shape, b.dtype, b.device) for a, b in zip(old, new))


class DerivedCache:
    """Values derived from weight tensors, one per (tensors' base, their views), kept fresh
    (module doc)."""

    def __init__(self):
        self.entries = WeakIdKeyDictionary()  # base of the first tensor -> {views: entry}
        self.lock = threading.Lock()

    @staticmethod
    def _key(tensors):
        return _base(tensors[0]), tuple(_geometry(t) for t in tensors)

    def _entry(self, tensors):
        base, views = self._key(tensors)
        with self.lock:
            return self.entries.get(base, {}).get(views)

    @staticmethod
    def _fresh(entry, tensors):
        marks, other_bases, _ = entry
        return marks == _marks(tensors) and all(
            ref() is _base(t) for ref, t in zip(other_bases, tensors[1:]))

    def has(self, tensors) -> bool:
        """Whether a fresh value for `tensors` is held (get would derive nothing)."""
        entry = self._entry(tensors)
        return entry is not None and self._fresh(entry, tensors)

    def get(self, tensors, derive):
        """The value for `tensors`: the held one while fresh, else derive() (no arguments),
        copied into the stale value's buffers where it has their layout."""
        entry = self._entry(tensors)
        if entry is not None and self._fresh(entry, tensors):
            return entry[2]
        with torch.no_grad():
            value = derive()
            if entry is not None and _same_layout(entry[2], value):
                for old, new in zip(_buffers(entry[2]), _buffers(value)):
                    old.copy_(new)
                value = entry[2]
        base, views = self._key(tensors)
        fresh = (_marks(tensors), tuple(weakref.ref(_base(t)) for t in tensors[1:]), value)
        with self.lock:
            per_base = self.entries.get(base)
            if per_base is None:
                per_base = self.entries[base] = {}
            per_base[views] = fresh
        return value

    def clear(self):
        with self.lock:
            self.entries.clear()
