"""Router: scores, top-k and the model's weight normalisation, in plain torch (it is one small
GEMM and a top-k; torch's own kernels are the right tools)."""
import torch


def route(x, router_weight, top_k, *, scoring="softmax", renormalize=False):
    """Returns (topk_ids int64 [T, K], topk_weights float32 [T, K]).

    scoring: "softmax" (Qwen, Mixtral, OLMoE) or "sigmoid" (sigmoid scores, top-k on them).
    renormalize: divide the k kept weights by their sum (norm_topk_prob in transformers).
    """
    logits = torch.nn.functional.linear(x, router_weight).float()
    if scoring == "softmax":
        scores = logits.softmax(dim=-1)
    elif scoring == "sigmoid":
        scores = logits.sigmoid()
    else:
        raise ValueError(f"scoring must be 'softmax' or 'sigmoid', got {scoring!r}")
    weights, ids = torch.topk(scores, top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return ids, weights
