"""Routings for the parity tests: random, skewed and adversarial top-k ids, made reproducibly
from a seed. Every case is a (T, K, E) shape and a distribution name."""
import torch

DISTRIBUTIONS = (
    "uniform",      # top-k of random scores: K distinct experts per token
    "zipf",         # Zipf(1.2) expert popularity, K distinct experts per token
    "one_expert",   # every entry to the same expert (ids repeat within a token)
    "repeated",     # ids drawn with replacement: repeats within a token
    "empty",        # only every third expert is ever used
    "neg_some",     # uniform with about a third of the entries -1
    "neg_all",      # every entry -1
)


def make_ids(T, K, E, dist, seed=0, dtype=torch.int64):
    g = torch.Generator().manual_seed(seed)
    if T == 0:
        return torch.empty(0, K, dtype=dtype)
    if dist in ("uniform", "neg_some") and K <= E:
        ids = torch.rand(T, E, generator=g).topk(K, dim=1).indices
    elif dist == "zipf" and K <= E:
        p = 1.0 / torch.arange(1, E + 1, dtype=torch.float64) ** 1.2
        p = p[torch.randperm(E, generator=g)]
        ids = torch.multinomial(p.expand(T, E), K, replacement=False, generator=g)
    elif dist == "one_expert":
        ids = torch.full((T, K), int(torch.randint(E, (1,), generator=g)))
    elif dist == "empty":
        ids = torch.randint(0, (E + 2) // 3, (T, K), generator=g) * 3
        ids = ids.clamp(max=E - 1)
    elif dist == "neg_all":
        ids = torch.full((T, K), -1)
    else:  # repeated, and uniform/zipf with K > E
        ids = torch.randint(0, E, (T, K), generator=g)
    if dist == "neg_some":
        ids = torch.where(torch.rand(T, K, generator=g) < 0.33, -1, ids)
    return ids.to(dtype)


def make_weights(T, K, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed + 1)
    return torch.rand(T, K, generator=g).to(dtype)


def garbage_like(t, seed=123):
    """A buffer of t's shape and dtype filled with random bits (NaNs and huge values included)."""
    g = torch.Generator().manual_seed(seed)
    nbytes = t.numel() * t.element_size()
    raw = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=g)
    return raw.view(t.dtype).view(t.shape).to(t.device) if nbytes else torch.empty_like(t)
