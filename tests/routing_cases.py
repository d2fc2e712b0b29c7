"""Routings for the parity tests (torch_argon.testing.routing: random, skewed and adversarial
top-k ids, made reproducibly from a seed), and garbage-filled output buffers."""
import torch

from torch_argon.testing.routing import DISTRIBUTIONS, make_ids, make_weights  # noqa: F401


def garbage_like(t, seed=123):
    """A buffer of t's shape and dtype filled with random bits (NaNs and huge values included)."""
    g = torch.Generator().manual_seed(seed)
    nbytes = t.numel() * t.element_size()
    raw = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=g)
    return raw.view(t.dtype).view(t.shape).to(t.device) if nbytes else torch.empty_like(t)
