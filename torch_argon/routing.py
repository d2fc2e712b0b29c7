"""Router: scores, top-k and the model's weight normalisation: torch's GEMM and softmax, and
on CUDA a Triton top-k (torch.topk's radix select and sort cost 74 us of the 89 us router at
T=2048, E=512 on the H200; the Triton one 12 us) where the Triton kernels can run
(triton_ops.refusal, the answer the experts' implementations get too)."""
import torch

from . import triton_ops

SCORINGS = ("softmax", "sigmoid")
TOPKS = ("auto", "torch", "triton")


def topk_experts(scores, top_k, impl="auto"):
    """(values, ids) of the top_k scores per row, largest first. "torch": torch.topk.
    "triton": triton_ops' kernel: the same experts and values as torch.topk (among equal
    scores at the cut, the lowest ids, as torch.topk picks them), ordered by score and, among
    equal scores, by ascending id, where torch.topk's CUDA sort leaves equal scores in no
    documented order. "auto": triton where its kernels can run (CUDA tensors, Triton
    importable) and autograd does not record the call (the Triton kernel has no backward:
    router gradients flow through torch.topk), else torch."""
    if impl not in TOPKS:
        raise ValueError(f"topk must be one of {TOPKS}, got {impl!r}")
    recorded = torch.is_grad_enabled() and scores.requires_grad
    if impl == "triton" or (impl == "auto" and not recorded
                            and not triton_ops.refusal(scores.device)):
        return triton_ops.topk_triton(scores, top_k)
    return torch.topk(scores, top_k, dim=-1)


def select_experts(logits, top_k, *, scoring="softmax", renormalize=False, topk="auto"):
    """From router logits [T, E] to (topk_ids int64 [T, K], topk_weights float32 [T, K]).

    scoring: "softmax" (Qwen, Mixtral, OLMoE) or "sigmoid" (sigmoid scores, top-k on them).
    renormalize: divide the k kept weights by their sum (norm_topk_prob in transformers).
    Scores are computed in fp32 from the logits, as transformers' routers do.
    topk: "auto", "torch" or "triton" (see topk_experts).
    """
    if scoring == "softmax":
        scores = torch.softmax(logits, dim=-1, dtype=torch.float32)  # one kernel, cast inside
    elif scoring == "sigmoid":
        scores = logits.float().sigmoid()
    else:
        raise ValueError(f"scoring must be one of {SCORINGS}, got {scoring!r}")
    weights, ids = topk_experts(scores, top_k, topk)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return ids, weights


def check_router(x, router_weight, top_k):
    """Raises a ValueError naming the caller's argument: x must be [T, H], router_weight [E, H]
    with x's H, dtype and device, and 0 < top_k <= E."""
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [T, H], got shape {tuple(x.shape)}")
    H = x.shape[1]
    if router_weight.dim() != 2 or router_weight.shape[1] != H:
        raise ValueError(f"router_weight must be [E, H={H}], got {tuple(router_weight.shape)}")
    if router_weight.dtype != x.dtype:
        raise ValueError(f"router_weight is {router_weight.dtype} but x is {x.dtype}: the router "
                         "must have x's dtype")
    if router_weight.device != x.device:
        raise ValueError(f"router_weight is on {router_weight.device} but x is on {x.device}")
    E = router_weight.shape[0]
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 0 < top_k <= E:
        raise ValueError(f"top_k must be an int in [1, E={E}], got {top_k!r}")


def route(x, router_weight, top_k, *, scoring="softmax", renormalize=False, return_logits=False,
          topk="auto"):
    """Returns (topk_ids int64 [T, K], topk_weights float32 [T, K]), and the router logits
    [T, E] (in x's dtype) as a third element when return_logits is set.

    x: [T, H]. router_weight: [E, H] of x's dtype. top_k: in [1, E]. See select_experts for
    scoring, renormalize and topk.
    """
    check_router(x, router_weight, top_k)
    return route_checked(x, router_weight, top_k, scoring=scoring, renormalize=renormalize,
                         return_logits=return_logits, topk=topk)


def route_checked(x, router_weight, top_k, *, scoring="softmax", renormalize=False,
                  return_logits=False, topk="auto"):
    """route() for arguments its caller has checked already (check_router)."""
    logits = torch.nn.functional.linear(x, router_weight)
    ids, weights = select_experts(logits, top_k, scoring=scoring, renormalize=renormalize,
                                  topk=topk)
    return (ids, weights, logits) if return_logits else (ids, weights)
