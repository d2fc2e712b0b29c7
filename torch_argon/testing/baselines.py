"""What people write today without torch_argon, for the benchmarks and the main job to race.

Each is plain torch, written the way model libraries and users write it, and timed as is
(including its host syncs, where it has them).
"""
import torch
import torch.nn.functional as F

from .._shapes import plan_rows


def plan_argsort(topk_ids, topk_weights, n_expert, tile_m=16):
    """A stable plan in plain torch with fixed output sizes: argsort, bincount, cumsum, scatter.
    Returns (sorted_token, sorted_weight, pos, offsets) with the contract's values."""
    T, K = topk_ids.shape
    E, tm = n_expert, tile_m
    R = plan_rows(T, K, E, tm)
    key = topk_ids.reshape(-1).long()
    key = torch.where(key < 0, E, key)  # skipped entries sort last, into a dummy expert
    order = torch.argsort(key, stable=True)
    counts = torch.bincount(key, minlength=E + 1)
    padded = (counts[:E] + tm - 1) // tm * tm
    offsets = torch.cat([padded.new_zeros(1), padded.cumsum(0)])
    key_sorted = key[order]
    first = counts.cumsum(0) - counts
    rank = torch.arange(key.numel(), device=key.device) - first[key_sorted]
    offsets_ext = torch.cat([offsets, offsets.new_full((1,), R)])  # dummy expert -> row R
    rows = torch.where(key_sorted < E, offsets_ext[key_sorted] + rank, R)
    sorted_token = torch.full((R + 1,), -1, dtype=torch.int32, device=key.device)
    sorted_token[rows] = (order // K).int()
    sorted_weight = torch.zeros(R + 1, dtype=torch.float32, device=key.device)
    sorted_weight[rows] = topk_weights.reshape(-1)[order].float()
    pos = torch.empty(T * K, dtype=torch.int32, device=key.device)
    pos[order] = torch.where(rows < R, rows, -1).int()
    return sorted_token[:R], sorted_weight[:R], pos.view(T, K), offsets.int()


def gather_index_select(x, sorted_token):
    """The rows by torch.index_select (padding rows read row 0 instead of being zeroed)."""
    return x.index_select(0, sorted_token.clamp(min=0))


def combine_torch(y, pos, topk_weights):
    """The combine as users write it: gather [T, K, H], scale, sum over k."""
    return (y[pos].float() * topk_weights[..., None]).sum(1).to(y.dtype)


def swiglu_torch(gate_up):
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def layer_per_expert_loop(x, router_weight, w_gate_up, w_down, top_k, *, scoring="softmax",
                          renormalize=False):
    """A MoE layer the way model libraries run it eagerly: one Python iteration per expert
    that received tokens (which needs the routing on the host)."""
    from ..routing import route

    ids, weights = route(x, router_weight, top_k, scoring=scoring, renormalize=renormalize,
                         topk="torch")
    inter = w_down.shape[2]
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    hit = torch.bincount(ids[ids >= 0].reshape(-1), minlength=w_gate_up.shape[0]).nonzero()
    for e in hit.reshape(-1).tolist():
        t, k = torch.where(ids == e)
        gu = x[t] @ w_gate_up[e].T
        h = F.silu(gu[:, :inter]) * gu[:, inter:]
        out.index_add_(0, t, (h @ w_down[e].T).float() * weights[t, k, None])
    return out.to(x.dtype)


def has_grouped_mm(device, dtype):
    """Whether this torch offers torch._grouped_mm for the device and dtype."""
    if not hasattr(torch, "_grouped_mm"):
        return False
    try:
        a = torch.zeros(16, 16, device=device, dtype=dtype)
        b = torch.zeros(1, 16, 16, device=device, dtype=dtype)
        torch._grouped_mm(a, b.transpose(1, 2), offs=torch.tensor([16], dtype=torch.int32,
                                                                   device=device))
        return True
    except (RuntimeError, NotImplementedError):
        return False


# The argsort + grouped_mm layer, stage by stage (the main job times each stage).
def argsort_plan(topk_ids, n_expert):
    """Entries stably sorted by expert, and each expert's end in that order (int32)."""
    flat = topk_ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    ends = torch.bincount(flat, minlength=n_expert).cumsum(0).int()
    return order, ends


def argsort_gather(x, order, top_k):
    return x[order // top_k]


def grouped_mm(xs, w, ends):
    """xs [rows, Kd] grouped by expert (group e ends at ends[e]) times w [E, N, Kd]^T."""
    return torch._grouped_mm(xs, w.transpose(1, 2), offs=ends)


def argsort_combine(y, order, topk_weights, top_k, n_tokens):
    scaled = y.float() * topk_weights.reshape(-1)[order, None].float()
    out = torch.zeros(n_tokens, y.shape[1], dtype=torch.float32, device=y.device)
    out.index_add_(0, order // top_k, scaled)
    return out.to(y.dtype)


def layer_argsort_grouped_mm(x, router_weight, w_gate_up, w_down, top_k, *, scoring="softmax",
                             renormalize=False):
    """The best plain-torch layer: stable argsort of the entries by expert, one
    torch._grouped_mm per projection over unpadded groups, and a scatter-add combine."""
    from ..routing import route

    ids, weights = route(x, router_weight, top_k, scoring=scoring, renormalize=renormalize,
                         topk="torch")
    order, ends = argsort_plan(ids, w_gate_up.shape[0])
    gate_up = grouped_mm(argsort_gather(x, order, top_k), w_gate_up, ends)
    h = swiglu_torch(gate_up)
    y = grouped_mm(h, w_down, ends)
    return argsort_combine(y, order, weights, top_k, x.shape[0])
