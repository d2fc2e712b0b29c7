"""Routings for the tests, the benchmarks and the main job: random, skewed and adversarial top-k
ids and their weights, made reproducibly from a seed on any device (a generator of that device,
so a large routing costs no host work and no copy).

Imports torch only, so a script can load this file by path to time another tree's build with
the same routings (bench/plan_lean_ab.py).
"""
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


def make_ids(T, K, E, dist, seed=0, dtype=torch.int64, device="cpu"):
    """int ids [T, K] in [0, E) (or -1) of distribution `dist` (DISTRIBUTIONS)."""
    if dist not in DISTRIBUTIONS:
        raise ValueError(f"dist must be one of {DISTRIBUTIONS}, got {dist!r}")
    g = torch.Generator(device=device).manual_seed(seed)
    if T == 0:
        return torch.empty(0, K, dtype=dtype, device=device)
    if dist in ("uniform", "neg_some") and K <= E:
        ids = torch.rand(T, E, generator=g, device=device).topk(K, dim=1).indices
    elif dist == "zipf" and K <= E:
        p = 1.0 / torch.arange(1, E + 1, dtype=torch.float64, device=device) ** 1.2
        p = p[torch.randperm(E, generator=g, device=device)]
        ids = torch.multinomial(p.expand(T, E), K, replacement=False, generator=g)
    elif dist == "one_expert":
        expert = int(torch.randint(E, (1,), generator=g, device=device))
        ids = torch.full((T, K), expert, device=device)
    elif dist == "empty":
        ids = torch.randint(0, (E + 2) // 3, (T, K), generator=g, device=device) * 3
        ids = ids.clamp(max=E - 1)
    elif dist == "neg_all":
        ids = torch.full((T, K), -1, device=device)
    else:  # repeated, and uniform/zipf with K > E
        ids = torch.randint(0, E, (T, K), generator=g, device=device)
    if dist == "neg_some":
        ids = torch.where(torch.rand(T, K, generator=g, device=device) < 0.33, -1, ids)
    return ids.to(dtype)


def make_weights(T, K, dtype=torch.float32, seed=0, device="cpu"):
    """Routing weights [T, K], uniform in [0, 1)."""
    g = torch.Generator(device=device).manual_seed(seed + 1)
    return torch.rand(T, K, generator=g, device=device).to(dtype)


def routing(T, E, K, dist="uniform", seed=0, device="cpu"):
    """(int64 ids [T, K], float32 weights [T, K]): make_ids and make_weights of one seed."""
    return (make_ids(T, K, E, dist, seed=seed, device=device),
            make_weights(T, K, seed=seed, device=device))
