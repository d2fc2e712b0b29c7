"""Router: scores, top-k and the model's weight normalisation, in plain torch (it is one small
GEMM and a top-k; torch's own kernels are the right tools)."""
import torch

SCORINGS = ("softmax", "sigmoid")


def select_experts(logits, top_k, *, scoring="softmax", renormalize=False):
    """From router logits [T, E] to (topk_ids int64 [T, K], topk_weights float32 [T, K]).

    scoring: "softmax" (Qwen, Mixtral, OLMoE) or "sigmoid" (sigmoid scores, top-k on them).
    renormalize: divide the k kept weights by their sum (norm_topk_prob in transformers).
    Scores are computed in fp32 from the logits, as transformers' routers do.
    """
    if scoring == "softmax":
        scores = torch.softmax(logits, dim=-1, dtype=torch.float32)  # one kernel, cast inside
    elif scoring == "sigmoid":
        scores = logits.float().sigmoid()
    else:
        raise ValueError(f"scoring must be one of {SCORINGS}, got {scoring!r}")
    weights, ids = torch.topk(scores, top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return ids, weights


def route(x, router_weight, top_k, *, scoring="softmax", renormalize=False, return_logits=False):
    """Returns (topk_ids int64 [T, K], topk_weights float32 [T, K]), and the router logits
    [T, E] (in x's dtype) as a third element when return_logits is set.

    router_weight: [E, H]. See select_experts for scoring and renormalize.
    """
    logits = torch.nn.functional.linear(x, router_weight)
    ids, weights = select_experts(logits, top_k, scoring=scoring, renormalize=renormalize)
    return (ids, weights, logits) if return_logits else (ids, weights)
