"""The one flow of a layer call's experts: Prepare, Experts, Finalize.

    (route)   moe_layer and nn.MoE route first (the router GEMM, scores, top-k); moe_experts
              and the hooks get the routing from their caller
    prepare   the tokens this process's experts run (PrepareFinalize.prepare: locally the
              caller's own; expert parallel, the ones the other ranks send here), then the plan
              over this process's experts and the gather of the rows (unless the
              implementation's GEMMs gather as they read)
    experts   the chosen implementation's GEMMs (registry.py): y [R, H] in plan row order
    finalize  the combine (+ shared, + residual, one rounding), then PrepareFinalize.finalize
              (locally nothing more; expert parallel, the outputs' way back to their ranks)

moe_layer, moe_experts, nn.MoE, the transformers integration, GGUF models and the expert-parallel
layer (distributed.py, whose two modes are PrepareFinalize variants) all run through `run`.
"""
from typing import NamedTuple, Optional

import torch


class Batch(NamedTuple):
    """The tokens the local experts run and how their combine is done: x [T, H]; topk_ids
    [T, K] (ids of this process's experts, or -1); topk_weights [T, K]; shared / residual
    ([T, H] or None) and out_dtype for the combine; n_entries: the routed entries expected, for
    the tile_m rules (T * K locally); state: what finalize needs."""
    x: torch.Tensor
    topk_ids: torch.Tensor
    topk_weights: torch.Tensor
    shared: Optional[torch.Tensor]
    residual: Optional[torch.Tensor]
    out_dtype: torch.dtype
    n_entries: int
    state: object = None


class PrepareFinalize:
    """Where the local experts' tokens come from and where their outputs go. This one: the
    caller's tokens, all experts here, the combine's output returned as it is."""

    def prepare(self, x, topk_ids, topk_weights, *, shared=None, residual=None,
                out_dtype=None) -> Batch:
        return Batch(x, topk_ids, topk_weights, shared, residual, out_dtype or x.dtype,
                     topk_ids.numel())

    def finalize(self, out, batch: Batch):
        return out


LOCAL = PrepareFinalize()


def run_batch(impl, call, batch: Batch):
    """Plan, gather, the implementation's GEMMs and the combine, for one batch of tokens over
    the experts of call.weights. Returns [T, H] in batch.out_dtype."""
    ops, weights = call.ops, call.weights
    plan = ops.moe_plan(batch.topk_ids, batch.topk_weights, weights.n_experts,
                        impl.tile_m(call, batch.n_entries))
    workspace = impl.workspace(call, plan.sorted_token.shape[0])
    xs = None if impl.fuses_gather else ops.moe_gather(batch.x, plan, out=workspace.get("xs"))
    y = impl.apply(call, batch.x, xs, plan, workspace)
    return ops.moe_combine(y, plan, batch.topk_weights, shared=batch.shared,
                           residual=batch.residual, out_dtype=batch.out_dtype)


def run(impl, call, topk_ids, topk_weights, *, prepare_finalize=LOCAL, shared=None,
        residual=None, out_dtype=None):
    """The experts of one layer call on the tokens call.x routed by (topk_ids, topk_weights),
    run by `impl` (registry.choose's pick for `call`; arguments checked by the caller's entry).
    Returns [T, H] in out_dtype (default x's)."""
    batch = prepare_finalize.prepare(call.x, topk_ids, topk_weights, shared=shared,
                                     residual=residual, out_dtype=out_dtype)
    return prepare_finalize.finalize(run_batch(impl, call, batch), batch)
