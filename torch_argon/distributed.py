"""Expert parallelism on torch.distributed: one MoE layer's experts split across the ranks of a
process group. The same code runs CUDA tensors over NCCL and CPU tensors over gloo.

Who owns what. With E experts over a group of W ranks, rank r owns the contiguous range
    [start(r), start(r + 1)),   start(r) = r * (E // W) + min(r, E % W),
so the first E % W ranks own one expert more (E=10 over W=4: 3, 3, 2, 2). Every rank owns at
least one (E >= W). The router is replicated: each rank routes its tokens over all E experts.

Two dispatch modes, the same result (docs/distributed.md):

  "all_to_all"  each rank plans its tokens over all E experts (the plan sorts entries by expert,
                hence by owning rank) and trades a small header and the per-rank row counts with
                one all_to_all_single, read on the host: the one host sync, for the split sizes
                (and the cross-rank checks). It then sends each entry's row of x, and the row's
                expert id local to the receiver, to the owner; the owner runs its experts on the
                rows it got (one slot of weight 1 per row, which returns each expert output
                exactly); the rows go back, and the sender combines them with the
                routing weights by moe_combine: ascending k, fp32, one rounding, as the
                single-process layer does. Each expert sees the same rows in the same order as in
                the single-process layer over the ranks' tokens concatenated in rank order.
  "no_sync"     each rank runs its experts on the whole token set with other ranks' ids masked
                to -1, keeping fp32 partial sums (the combine unrounded); the partials are summed
                across ranks in rank order by this code, not inside a collective: an
                all_to_all_single of equal splits hands each rank every rank's partial of its
                block of tokens (the traffic of a reduce-scatter), and for replicated tokens an
                all-gather of the rounded blocks follows (the traffic of an all-reduce). No size
                depends on data: no host sync, capturable in CUDA graphs, traced by
                torch.compile; and the same bytes run to run and on every rank, whatever
                algorithm the backend picks. The sum order differs from the single-process
                combine's (rank by rank, ascending k within a rank), so it matches that layer
                within fp32 rounding, not bit for bit.

Tokens: "sharded" (each rank passes its own tokens and gets their outputs; "no_sync" all-gathers
x, ids and weights first, so it needs the same T on every rank) or "replicated" (every rank
passes the same tokens and gets the whole output; "all_to_all" then dispatches one block of
ceil(T / W) tokens per rank and all-gathers the outputs).

Both modes are PrepareFinalize variants of the layer's one experts flow (experts/flow.py:
AllToAll and NoSync below): they decide which tokens the local experts run and where the outputs
go; the plan, gather, GEMMs and combine of the local experts are the flow's, run by the
implementation the registry chose once for the call (with its tile_m rule, applied to the
entries this rank's experts expect).

Errors: every argument error, cross-rank mismatch (n_experts, expert weights' shapes or types,
dtypes, a group other than the one the weights were split for) and out-of-range id is found by
one collective every rank reaches (the header trade) before any data collective, and every rank
raises a ValueError saying which rank is wrong and how.
"""
import functools
import math
import zlib
from typing import NamedTuple, Optional

import torch
import torch.distributed as dist

from .experts import flow, registry
from .experts.arguments import check_experts_arguments
from .experts.base import ExpertsCall, weight_tensors
from .experts.flow import Batch, PrepareFinalize
from .ops import argon_ops
from .weights import as_expert_weights

MODES = ("auto", "all_to_all", "no_sync")
TOKENS = ("sharded", "replicated")

# mode="auto": at or below this many tokens per rank, "no_sync" (the all_to_all mode's host sync
# and its three collectives' latency dominate there); above, the mode that moves fewer bytes
# (see choose_mode). A first guess to be tuned on the 2-GPU run (issue 36).
NO_SYNC_MAX_TOKENS = 256


# ---- who owns which experts -----------------------------------------------------------------

def expert_starts(n_experts: int, world_size: int) -> list:
    """The W + 1 range boundaries: rank r owns experts [starts[r], starts[r + 1]); the first
    E % W ranks own one more than the rest."""
    q, extra = divmod(n_experts, world_size)
    return [r * q + min(r, extra) for r in range(world_size + 1)]


def local_expert_range(n_experts: int, group=None) -> tuple:
    """(start, end) of the experts this rank owns in `group` (default: the world)."""
    W, rank = _group_size_rank(group)
    starts = expert_starts(n_experts, W)
    return starts[rank], starts[rank + 1]


def shard_experts(experts, n_experts: int, group=None):
    """This rank's experts out of all E: views of the float stacks (nothing is copied). An
    object that already holds fewer than E experts is returned as it is (taken to be this rank's
    share; ep_moe_experts checks that it is)."""
    experts = as_expert_weights(experts)
    if experts.n_experts != n_experts:
        return experts
    start, end = local_expert_range(n_experts, group)
    if (start, end) == (0, n_experts):
        return experts
    return experts.select_experts(start, end)


def keep_local_experts_(module, n_experts: int, group=None) -> tuple:
    """Shrinks an experts module (gate_up_proj / down_proj stacks, experts first, as ours and
    transformers' are) in place to this rank's experts: each stack becomes a copy of its slice,
    so the full stacks' memory is freed once nothing else holds them. Returns (start, end).
    Idempotent: a module already holding end - start experts is left as it is."""
    start, end = local_expert_range(n_experts, group)
    for name in ("gate_up_proj", "down_proj"):
        stack = getattr(module, name)
        if stack.shape[0] == end - start:
            continue
        if stack.shape[0] != n_experts:
            raise ValueError(f"{type(module).__name__}.{name} holds {stack.shape[0]} experts; "
                             f"expected all {n_experts} or this rank's {end - start}")
        local = torch.nn.Parameter(stack.detach()[start:end].clone(),
                                   requires_grad=stack.requires_grad)
        setattr(module, name, local)
    if hasattr(module, "num_experts"):
        module.num_experts = end - start
    return start, end


def _group_size_rank(group):
    group = group if group is not None else dist.group.WORLD
    return dist.get_world_size(group), dist.get_rank(group)


# ---- which mode -------------------------------------------------------------------------------

def choose_mode(T: int, *, top_k: int, itemsize: int, world_size: int, tokens: str = "sharded",
                same_T_everywhere: bool = True) -> str:
    """mode="auto"'s choice, from values every rank agrees on: after the header trade, the ranks'
    T (the largest, and whether they are all equal); without it, this rank's own T, which must
    then be the same on every rank.

    T: the rows of x on each rank. "no_sync" with different T on the ranks' sharded tokens is
    impossible (it all-gathers them). Otherwise "no_sync" up to NO_SYNC_MAX_TOKENS tokens per
    rank, else the mode that moves fewer bytes per rank. Per token of the rank's share and
    element of H, with W ranks and K slots:
      sharded     no_sync: (W-1) * (itemsize + 4)    x all-gathered, fp32 partials traded
                  all_to_all: 2 * K * (W-1)/W * itemsize   rows out and back
      replicated  no_sync: (W-1) * 4, all_to_all: 2 * K * (W-1)/W * itemsize, plus the same
                  all-gather of the outputs on both sides.
    """
    W = world_size
    if W == 1:
        return "no_sync"
    if tokens == "sharded" and not same_T_everywhere:
        return "all_to_all"
    share = T if tokens == "sharded" else math.ceil(T / W)
    if share <= NO_SYNC_MAX_TOKENS:
        return "no_sync"
    gather = itemsize if tokens == "sharded" else 0
    no_sync = (W - 1) * (gather + 4)
    all_to_all = 2 * top_k * (W - 1) / W * itemsize
    return "no_sync" if no_sync <= all_to_all else "all_to_all"


# ---- the header every rank trades first -------------------------------------------------------

_MAGIC = 0x41524730  # "ARG0": a rank whose row lacks it is not in the same call
_FIELDS = ("magic", "error", "mode", "tokens", "hidden", "top_k", "n_experts", "local_experts",
           "inter", "x_dtype", "ids_dtype", "weights_dtype", "experts", "T", "bad_ids", "rows")
_F = {name: i for i, name in enumerate(_FIELDS)}
# Fields every rank must agree on, with the words an error uses for them.
_AGREED = (("mode", "mode"), ("tokens", "tokens"), ("hidden", "the hidden size H"),
           ("top_k", "top_k (topk_ids' columns)"), ("n_experts", "n_experts"),
           ("inter", "the experts' intermediate size"), ("x_dtype", "x's dtype"),
           ("ids_dtype", "topk_ids' dtype"), ("weights_dtype", "topk_weights' dtype"),
           ("experts", "the expert weights' kind and dtype"))
_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64,
           torch.int16, torch.int8, torch.uint8)


def _code(value) -> int:
    """A small int naming a dtype or string, the same in every process (hash() is not)."""
    if isinstance(value, torch.dtype) and value in _DTYPES:
        return _DTYPES.index(value) + 1
    return zlib.crc32(str(value).encode()) & 0x7FFFFFFF


class _Handshake(NamedTuple):
    headers: list  # one list of _FIELDS values per rank of the group
    send_rows: list  # rows this rank sends to each rank (all_to_all)
    recv_rows: list  # rows each rank sends to this one


def _handshake(header, bad_ids, send_rows, *, group, W, device):
    """One all_to_all_single of a [W, len(_FIELDS)] int64 tensor: row s carries this rank's
    header and the rows it sends to rank s. Every rank gets every rank's header (and the rows
    coming to it) and reads them on the host: the one sync of the all_to_all mode."""
    send = torch.tensor([header] * W, dtype=torch.int64).to(device)
    if bad_ids is not None:
        send[:, _F["bad_ids"]] = bad_ids
    if send_rows is not None:
        send[:, _F["rows"]] = send_rows
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    host = torch.cat([send[:, _F["rows"]], recv.flatten()]).tolist()  # the host sync
    headers = [host[W + s * len(_FIELDS):W + (s + 1) * len(_FIELDS)] for s in range(W)]
    return _Handshake(headers, host[:W], [h[_F["rows"]] for h in headers])


def _verdict(hs, *, rank, W, local_error):
    """Raises the same ValueError on every rank if any rank's header is wrong (the rank whose
    own arguments were refused raises its own error)."""
    headers = hs.headers
    col = {name: [h[i] for h in headers] for name, i in _F.items()}
    if any(m != _MAGIC for m in col["magic"]):
        bad = [s for s, m in enumerate(col["magic"]) if m != _MAGIC]
        raise RuntimeError(f"ep_moe_experts: ranks {bad} of the group sent no header: they are not "
                           "in an ep_moe_experts call (every rank of the group must make the same "
                           "calls in the same order)")
    refused = [s for s, e in enumerate(col["error"]) if e]
    if refused:
        if local_error is not None:
            raise local_error
        raise ValueError(f"ep_moe_experts: rank(s) {refused} of the group refused their "
                         "arguments (their error says why); every rank stops here")
    for name, words in _AGREED:
        if len(set(col[name])) > 1:
            shown = col[name] if name not in ("experts",) else ["..." for _ in col[name]]
            if name in ("x_dtype", "ids_dtype", "weights_dtype"):
                shown = [_DTYPES[c - 1] if 0 < c <= len(_DTYPES) else c for c in col[name]]
            elif name == "mode":
                shown = [MODES[c] for c in col[name]]
            elif name == "tokens":
                shown = [TOKENS[c] for c in col[name]]
            raise ValueError(f"ep_moe_experts: {words} differs across the group's ranks "
                             f"(rank by rank: {shown})")
    E = col["n_experts"][0]
    if E < W:
        raise ValueError(f"ep_moe_experts: n_experts={E} cannot be split over a group of {W} "
                         "ranks: every rank must own at least one expert")
    starts = expert_starts(E, W)
    for s, held in enumerate(col["local_experts"]):
        owned = starts[s + 1] - starts[s]
        if held != owned:
            raise ValueError(
                f"ep_moe_experts: rank {s} holds {held} experts, but with n_experts={E} over a "
                f"group of {W} ranks it owns {owned} (experts [{starts[s]}, {starts[s + 1]}); "
                f"the first E % W ranks own one more): were the weights split for another "
                "group?")
    bad = [(s, n) for s, n in enumerate(col["bad_ids"]) if n]
    if bad:
        where = ", ".join(f"rank {s}: {n}" for s, n in bad)
        raise ValueError(f"ep_moe_experts: topk_ids hold ids outside [0, n_experts={E}) other "
                         f"than -1 ({where})")
    if col["tokens"][0] == TOKENS.index("replicated") and len(set(col["T"])) > 1:
        raise ValueError("ep_moe_experts: tokens='replicated' needs the same tokens on every "
                         f"rank, got T = {col['T']} rank by rank")
    if (col["mode"][0] == MODES.index("no_sync") and len(set(col["T"])) > 1):
        raise ValueError("ep_moe_experts: mode='no_sync' with sharded tokens needs the same T on "
                         f"every rank (it all-gathers them), got T = {col['T']} rank by rank; "
                         "use mode='all_to_all' or 'auto'")


# ---- the layer ----------------------------------------------------------------------------------

def _capturing() -> bool:
    """Inside torch.compile's tracing or a CUDA graph capture, where nothing may be read back."""
    if torch.compiler.is_compiling():
        return True
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _argument_error(x, topk_ids, topk_weights, experts, n_experts, mode, tokens, shared,
                    residual, activation, activation_quant):
    """The first thing wrong with this rank's own arguments, as a ValueError, or None."""
    if mode not in MODES:
        return ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if tokens not in TOKENS:
        return ValueError(f"tokens must be one of {TOKENS}, got {tokens!r}")
    if isinstance(n_experts, bool) or not isinstance(n_experts, int) or n_experts < 1:
        return ValueError(f"n_experts must be a positive int, got {n_experts!r}")
    try:
        check_experts_arguments(x, topk_ids, topk_weights, experts, shared=shared,
                                residual=residual, activation=activation,
                                activation_quant=activation_quant)
    except ValueError as e:
        return e
    return None


def _refuse_gradients(x, topk_weights, local_experts, shared, residual):
    """Expert parallel is inference only: the collectives carry no autograd, so gradients of
    tokens sent to other ranks would be lost without a word. In grad mode a tensor that requires
    grad raises (on every rank alike, as every rank calls with the same kind of tensors)."""
    if not torch.is_grad_enabled():
        return
    try:
        stacks = weight_tensors(as_expert_weights(local_experts))
    except (TypeError, ValueError):
        stacks = []  # the argument checks below say what is wrong, on every rank

    named = [("x", x), ("topk_weights", topk_weights), ("shared", shared),
             ("residual", residual)] + [("local_experts", t) for t in stacks]
    for name, t in named:
        if isinstance(t, torch.Tensor) and t.requires_grad:
            raise NotImplementedError(
                f"ep_moe_experts: {name} requires grad, but expert parallel is inference only "
                "(no autograd through the collectives): call it under torch.no_grad() / "
                "torch.inference_mode(), or train without process_group")


def ep_moe_experts(x, topk_ids, topk_weights, local_experts, *, n_experts: int, group=None,
                   mode: str = "auto", tokens: str = "sharded", tile_m: Optional[int] = None,
                   shared=None, residual=None, ops=argon_ops, path: str = "auto",
                   check: bool = True, activation: str = "silu", activation_quant: str = "auto"):
    """The routed experts of one layer with the experts split over the ranks of `group`.

    Every rank of the group calls it, with the same n_experts, mode, tokens and dtypes.
    x: [T, H] this rank's tokens (tokens="sharded") or all tokens, the same on every rank
        (tokens="replicated"). topk_ids: [T, K] global expert ids in [0, n_experts) or -1
        (skipped). topk_weights: [T, K].
    local_experts: this rank's experts (an expert-weights object or a (w_gate_up, w_down) pair
        holding experts [start, end) of local_expert_range), or all n_experts of them (sliced
        here, views).
    group: a torch.distributed process group (default: the world).
    mode: "auto", "all_to_all" or "no_sync" (module docstring; "auto": choose_mode).
    tokens: "sharded" or "replicated".
    shared, residual: optional [T, H] added in the combine, as moe_experts does.
    tile_m, ops, path, activation, activation_quant: as moe_experts, for the local experts.
    check: trade a header first and raise on every rank if any rank is wrong (one small
        collective read on the host). The all_to_all mode trades it anyway (it carries the split
        sizes); for "no_sync" it is the only host sync, skipped inside torch.compile and CUDA
        graph capture, or with check=False: then ranks' arguments are not compared, a rank's
        own argument error raises on that rank only, out-of-range ids are dropped like -1, and
        mode="auto" decides on this rank's T (which must then be the same on every rank).
    Returns [T, H] in x's dtype: this rank's tokens' outputs (sharded) or all of them
    (replicated).
    """
    _refuse_gradients(x, topk_weights, local_experts, shared, residual)
    W, rank = _group_size_rank(group)
    experts = impl = call = None
    try:
        experts = shard_experts(local_experts, n_experts, group)
        local_error = _argument_error(x, topk_ids, topk_weights, experts, n_experts, mode,
                                      tokens, shared, residual, activation, activation_quant)
        if local_error is None:  # the implementation, chosen once for the local experts
            call = ExpertsCall.of(x, experts, ops=ops, tile_m=tile_m, activation=activation,
                                  activation_quant=activation_quant, routing=topk_weights)
            impl = registry.choose(call, path)
    except (TypeError, ValueError) as e:
        local_error = e
    capturing = _capturing()
    trade = check and not capturing
    if local_error is not None and not trade and mode != "all_to_all":
        raise local_error  # the others may not trade headers: no collective to tell them by
    if mode == "auto" and not trade:
        mode = "no_sync" if capturing else choose_mode(
            x.shape[0], top_k=topk_ids.shape[1], itemsize=x.element_size(), world_size=W,
            tokens=tokens)
    block = hs = None
    if mode != "no_sync" or trade:
        mode, block, hs = _trade_headers(x, topk_ids, topk_weights, experts, n_experts, mode,
                                         tokens, shared, residual, local_error, group=group,
                                         W=W, rank=rank, ops=ops)
    starts = expert_starts(n_experts, W)
    if mode == "all_to_all":
        dispatch = AllToAll(block, hs, group=group, W=W, starts=starts, ops=ops)
    else:
        dispatch = NoSync(starts[rank], starts[rank + 1], tokens=tokens, group=group, W=W,
                          rank=rank)
    return flow.run(impl, call, topk_ids, topk_weights, prepare_finalize=dispatch,
                    shared=shared, residual=residual)


def _trade_headers(x, topk_ids, topk_weights, experts, n_experts, mode, tokens, shared, residual,
                   local_error, *, group, W, rank, ops):
    """The header trade: (mode, block, handshake), "auto" resolved on every rank alike, or the
    same ValueError on every rank. For all_to_all (or auto, which may take it) the block is
    planned first: the header carries its rows per rank."""
    block = send_rows = bad_ids = None
    if local_error is None:
        bad = (topk_ids < -1) | (topk_ids >= n_experts)
        bad_ids = bad.sum()
        if mode != "no_sync":
            # bad ids planned as -1: the plan must not raise here, on this rank alone
            block = _Block.of(x, topk_ids.masked_fill(bad, -1), topk_weights, shared, residual,
                              tokens=tokens, W=W, rank=rank, n_experts=n_experts, ops=ops)
            send_rows = block.rows_per_rank(expert_starts(n_experts, W))
    header = _header(x, topk_ids, topk_weights, experts, n_experts, mode, tokens, local_error)
    hs = _handshake(header, bad_ids, send_rows, group=group, W=W,
                    device=_handshake_device(group, x))
    _verdict(hs, rank=rank, W=W, local_error=local_error)
    if mode == "auto":
        Ts = [h[_F["T"]] for h in hs.headers]
        mode = choose_mode(max(Ts), top_k=topk_ids.shape[1], itemsize=x.element_size(),
                           world_size=W, tokens=tokens, same_T_everywhere=len(set(Ts)) == 1)
    return mode, block, hs


def _handshake_device(group, x):
    """Where the header goes: a CUDA device for NCCL (which takes no CPU tensors), else x's."""
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return x.device if isinstance(x, torch.Tensor) else torch.device("cpu")


def _header(x, topk_ids, topk_weights, experts, n_experts, mode, tokens, local_error):
    header = [0] * len(_FIELDS)
    header[_F["magic"]] = _MAGIC
    if local_error is not None:
        header[_F["error"]] = 1
        return header
    values = dict(mode=MODES.index(mode), tokens=TOKENS.index(tokens), hidden=x.shape[1],
                  top_k=topk_ids.shape[1], n_experts=n_experts, local_experts=experts.n_experts,
                  inter=getattr(experts, "inter", 0), x_dtype=_code(x.dtype),
                  ids_dtype=_code(topk_ids.dtype), weights_dtype=_code(topk_weights.dtype),
                  experts=_code(_signature(experts)), T=x.shape[0])
    for name, v in values.items():
        header[_F[name]] = int(v)
    return header


def _signature(experts) -> str:
    """The experts' kind and number format, as the ranks must agree on them."""
    if experts.kind == "dense":
        return f"dense:{experts.dtype}"
    return "quantized:" + ",".join(f"{part}={w.qtype.name}"
                                   for part, w in experts.parts().items())


class _Block(NamedTuple):
    """The tokens this rank dispatches in the all_to_all mode, planned over all E experts: its
    own (sharded), or block `rank` of ceil(T / W) tokens of the replicated set, padded with
    -1 ids."""
    x: torch.Tensor
    ids: torch.Tensor
    weights: torch.Tensor
    shared: Optional[torch.Tensor]
    residual: Optional[torch.Tensor]
    plan: object
    T_full: int  # replicated: the T of the whole set (-1 when sharded)

    @classmethod
    def of(cls, x, topk_ids, topk_weights, shared, residual, *, tokens, W, rank, n_experts, ops):
        T_full = -1
        if tokens == "replicated":
            T_full = x.shape[0]
            C = math.ceil(T_full / W)
            lo, hi = min(rank * C, T_full), min((rank + 1) * C, T_full)
            pad = C - (hi - lo)

            def part(t, fill):
                if t is None:
                    return None
                p = t[lo:hi]
                return torch.cat([p, p.new_full((pad, *p.shape[1:]), fill)]) if pad else p
            x, topk_ids, topk_weights = part(x, 0), part(topk_ids, -1), part(topk_weights, 0)
            shared, residual = part(shared, 0), part(residual, 0)
        plan = ops.moe_plan(topk_ids, topk_weights, n_experts, 1)
        return cls(x, topk_ids, topk_weights, shared, residual, plan, T_full)

    def rows_per_rank(self, starts):
        """[W] rows this block sends to each rank (device tensor): with tile_m 1 the plan's
        offsets count entries, so rank s's rows are offsets[starts[s]:starts[s+1]]."""
        at = torch.tensor(starts, device=self.plan.offsets.device)
        off = self.plan.offsets.long()[at]
        return off[1:] - off[:-1]

    def finish(self, out, *, group, W):
        """The layer's output from this block's: as is (sharded), or all blocks gathered."""
        if self.T_full < 0:
            return out
        return _all_gather(out, group=group, W=W)[:self.T_full]


@functools.lru_cache(maxsize=64)
def _local_index(n_experts, starts, device):
    """[E] int32: each expert's index among its owner's experts."""
    idx = torch.empty(n_experts, dtype=torch.int32)
    for lo, hi in zip(starts[:-1], starts[1:]):
        idx[lo:hi] = torch.arange(hi - lo, dtype=torch.int32)
    return idx.to(device)


class AllToAll(PrepareFinalize):
    """The all_to_all mode (module docstring): prepare sends each planned entry's row of x, with
    the row's expert id local to the receiver, to the rank owning the expert, and hands the
    local experts the rows this rank got, one slot of weight 1 each (so each expert output
    comes back exactly); finalize sends the outputs back and combines them with the routing
    weights, in this rank's plan of its block."""

    def __init__(self, block, hs, *, group, W, starts, ops):
        self.block, self.hs, self.group, self.W = block, hs, group, W
        self.starts, self.ops = starts, ops

    def prepare(self, x, topk_ids, topk_weights, *, shared=None, residual=None, out_dtype=None):
        block, send, recv = self.block, self.hs.send_rows, self.hs.recv_rows
        n_send, n_recv = sum(send), sum(recv)
        plan, H = block.plan, block.x.shape[1]
        # The plan's first n_send rows are the valid entries, sorted by expert, hence by owner.
        rows = self.ops.moe_gather(block.x, plan)[:n_send]
        row_ids = torch.repeat_interleave(
            _local_index(len(plan.counts), tuple(self.starts), block.x.device),
            plan.counts.long(), output_size=n_send)
        got = block.x.new_empty((n_recv, H))
        dist.all_to_all_single(got, rows, recv, send, group=self.group)
        got_ids = row_ids.new_empty((n_recv,))
        dist.all_to_all_single(got_ids, row_ids, recv, send, group=self.group)
        ones = torch.ones((n_recv, 1), dtype=torch.float32, device=got.device)
        return Batch(got, got_ids[:, None], ones, None, None, block.x.dtype, n_recv)

    def finalize(self, done, batch):
        block, send, recv = self.block, self.hs.send_rows, self.hs.recv_rows
        back = block.x.new_empty((sum(send), block.x.shape[1]))
        dist.all_to_all_single(back, done, send, recv, group=self.group)
        out = self.ops.moe_combine(back, block.plan, block.weights, shared=block.shared,
                                   residual=block.residual, out_dtype=block.x.dtype)
        return block.finish(out, group=self.group, W=self.W)


# torch 2.13 renames all_gather_into_tensor (2.11, on the GPU machines, has only that name).
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _all_gather(t, *, group, W):
    out = t.new_empty((W * t.shape[0], *t.shape[1:]))
    _all_gather_single(out, t.contiguous(), group=group)
    return out


class NoSync(PrepareFinalize):
    """The no_sync mode (module docstring): prepare hands the local experts every token of the
    group (all-gathered when sharded) with other ranks' experts masked to -1, combined into
    unrounded fp32 partial sums; finalize trades the partials so each rank sums its block of
    tokens' in rank order, adds shared and residual, rounds once (and all-gathers the rounded
    blocks for replicated tokens)."""

    def __init__(self, lo, hi, *, tokens, group, W, rank):
        self.lo, self.hi, self.tokens = lo, hi, tokens
        self.group, self.W, self.rank = group, W, rank

    def prepare(self, x, topk_ids, topk_weights, *, shared=None, residual=None, out_dtype=None):
        W, T = self.W, x.shape[0]
        if self.tokens == "sharded":
            x_all = _all_gather(x, group=self.group, W=W)
            ids_all = _all_gather(topk_ids, group=self.group, W=W)
            w_all = _all_gather(topk_weights, group=self.group, W=W)
            C = T
        else:
            x_all, ids_all, w_all = x, topk_ids, topk_weights
            C = math.ceil(T / W)
        mine = (ids_all >= self.lo) & (ids_all < self.hi)
        local_ids = torch.where(mine, ids_all - self.lo, torch.full_like(ids_all, -1))
        # n_entries: the entries expected here (1/W of them), not all the masked ones
        return Batch(x_all, local_ids, w_all, None, None, torch.float32, ids_all.numel() // W,
                     state=(x, shared, residual, C))

    def finalize(self, partial, batch):
        x, shared, residual, C = batch.state
        W, (T, H) = self.W, x.shape
        if partial.shape[0] < W * C:  # replicated, T not a multiple of W
            partial = torch.cat([partial, partial.new_zeros((W * C - partial.shape[0], H))])
        # Every rank's partial of this rank's block of C tokens, then their sum in rank order.
        parts = torch.empty_like(partial)
        dist.all_to_all_single(parts, partial, group=self.group)
        parts = parts.view(W, C, H)
        acc = parts[0].clone()
        for s in range(1, W):
            acc += parts[s]
        if self.tokens == "sharded":
            for t in (shared, residual):
                if t is not None:
                    acc += t.float()
            return acc.to(x.dtype)
        rows = slice(min(self.rank * C, T), min((self.rank + 1) * C, T))
        for t in (shared, residual):
            if t is not None:
                acc[:rows.stop - rows.start] += t[rows].float()
        full = _all_gather(acc.to(x.dtype), group=self.group, W=W)
        return full[:T]
