"""The expert-parallel cases test_distributed.py runs: each a function every rank of a gloo group
calls together, checking its own rank's result (an AssertionError or any exception fails it on
that rank). run_job spawns one process per rank, runs every case in one process group, and
reports each case's outcome per rank; a rank that hangs or dies leaves its cases unreported, and
the job is ended at its deadline, so a hang fails the tests instead of stalling CI.

References: the single-process layer (torch_argon.moe_experts, nn.MoE, the unpatched
transformers model) on the ranks' tokens concatenated in rank order. Tolerances:
- mode "all_to_all": bit for bit. Each expert gets the same rows in the same order as in the
  single-process layer (its GEMMs see the same operands; CPU, tile_m 1), and the sender's combine
  is the single-process one (ascending k, fp32, one rounding).
- mode "no_sync": fp32 rtol = atol = 1e-5, bf16 one rounding step of the output (rtol 1e-2,
  atol 1e-2 on values of order 1): the experts' outputs are the same bits, but the sum over the
  slots is taken rank by rank (ascending k within a rank), not in ascending k across all slots.
Every case also runs twice and compares the bytes (run-to-run identity).
"""
import datetime
import os
import queue
import tempfile
import time
import traceback

import torch

CASES = {}  # name -> (function, world sizes it runs at)


def case(*worlds):
    def register(fn):
        CASES[fn.__name__] = (fn, worlds)
        return fn
    return register


def cases_for(world):
    return [name for name, (_, worlds) in CASES.items() if world in worlds]


# ---- the job: one process per rank ---------------------------------------------------------------

def _worker(rank, world, init_file, names, results):
    torch.set_num_threads(1)  # W processes on a 2-core machine
    import torch.distributed as dist
    try:
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=60))
        ctx = Ctx(rank, world)
        for name in names:
            try:
                CASES[name][0](ctx)
                results.put((rank, name, "ok", ""))
            except Skip as e:
                results.put((rank, name, "skip", str(e)))
            except BaseException:  # noqa: B902  every failure is a report
                results.put((rank, name, "fail", traceback.format_exc(limit=6)))
        dist.destroy_process_group()
    except BaseException:  # noqa: B902
        results.put((rank, None, "fail", traceback.format_exc(limit=6)))
    results.put((rank, None, "done", ""))


def run_job(world, names, timeout_s):
    """{case: {rank: (status, message)}} for every case that reported, plus "__job__": notes on
    ranks that never finished (hung or died) within timeout_s."""
    import torch.multiprocessing as mp
    mp_ctx = mp.get_context("spawn")
    results = mp_ctx.Queue()
    init_file = tempfile.mktemp(prefix="argon_dist_")
    procs = [mp_ctx.Process(target=_worker, args=(r, world, init_file, names, results),
                            daemon=True) for r in range(world)]
    for p in procs:
        p.start()
    out, done = {"__job__": {}}, set()
    deadline = time.monotonic() + timeout_s
    while len(done) < world:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            rank, name, status, msg = results.get(timeout=min(left, 1.0))
        except queue.Empty:
            if all(not p.is_alive() for p in procs) and results.empty():
                break
            continue
        if status == "done":
            done.add(rank)
        else:
            out.setdefault(name or "__job__", {})[rank] = (status, msg)
    for r, p in enumerate(procs):
        p.join(timeout=max(0.0, deadline - time.monotonic()) if r in done else 0)
        if p.is_alive():
            p.terminate()
            p.join(5)
            out["__job__"].setdefault(r, ("fail", f"rank {r} did not finish within {timeout_s} s "
                                               "(hung in a collective?); it was terminated"))
        elif r not in done:
            out["__job__"].setdefault(r, ("fail", f"rank {r} died (exit code {p.exitcode})"))
    if os.path.exists(init_file):
        os.remove(init_file)
    return out


class Skip(Exception):
    pass


class Ctx:
    """What a case knows: its rank, the world, its device (CPU with gloo, a CUDA device with
    NCCL), and groups made once for every case."""

    def __init__(self, rank, world, device="cpu"):
        import torch.distributed as dist
        self.rank, self.world = rank, world
        self.device = torch.device(device)
        # Bit-for-bit against the single-process layer on the CPU only: on CUDA the GEMMs' tile
        # shapes follow the rows per expert, which differ between the two.
        self.exact = self.device.type == "cpu"
        self.group = dist.group.WORLD
        # Groups of one (a world of 1 on each rank) and, at 4 ranks, two groups of two: every
        # rank makes every group, in the same order, as new_group requires.
        singles = [dist.new_group([r]) for r in range(world)]
        self.single = singles[rank]
        self.pair = None
        if world == 4:
            pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
            self.pair = pairs[rank // 2]


# ---- data --------------------------------------------------------------------------------------

def make_experts(E, H, I, *, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    gate_up = (torch.randn(E, 2 * I, H, generator=g) / H ** 0.5).to(dtype)
    down = (torch.randn(E, H, I, generator=g) / I ** 0.5).to(dtype)
    return gate_up, down


def make_tokens(T, K, E, H, *, seed=1, dtype=torch.float32, ids="uniform", lo=0, hi=None,
                neg=0.0):
    """x [T, H], ids [T, K] drawn from experts [lo, hi) (distinct per token where possible),
    about `neg` of them -1, weights [T, K] fp32."""
    g = torch.Generator().manual_seed(seed)
    hi = E if hi is None else hi
    x = torch.randn(T, H, generator=g).to(dtype)
    n = hi - lo
    if K <= n:
        topk = torch.rand(T, n, generator=g).topk(K, dim=1).indices + lo
    else:
        topk = torch.randint(lo, hi, (T, K), generator=g)
    if ids == "one_expert":
        topk = torch.full((T, K), hi - 1)
    if neg:
        topk = torch.where(torch.rand(T, K, generator=g) < neg, -1, topk)
    w = torch.rand(T, K, generator=g)
    return x, topk, w


def on(ctx, *ts):
    return tuple(t.to(ctx.device) for t in ts)


def shard(t, counts, rank):
    if t is None:
        return None
    start = sum(counts[:rank])
    return t[start:start + counts[rank]]


def assert_bytes(a, b, what):
    assert a.dtype == b.dtype and a.shape == b.shape, f"{what}: {a.dtype}{tuple(a.shape)} vs " \
                                                      f"{b.dtype}{tuple(b.shape)}"
    ia = a.contiguous().view(torch.int16 if a.element_size() == 2 else torch.int32)
    ib = b.contiguous().view(ia.dtype)
    if not torch.equal(ia, ib):
        bad = (ia != ib).nonzero()
        raise AssertionError(f"{what}: {bad.shape[0]} of {a.numel()} elements differ, first at "
                             f"{tuple(bad[0].tolist())}: {a[tuple(bad[0])]} vs {b[tuple(bad[0])]}")


def assert_close(a, b, mode, what, exact=True):
    if mode == "all_to_all" and exact:
        assert_bytes(a, b, what)
    elif a.dtype == torch.bfloat16:
        torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-2, msg=lambda m: f"{what}: {m}")
    else:
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m: f"{what}: {m}")


def check_against_reference(ctx, *, group=None, E=7, H=24, I=16, K=3, counts=None,
                            modes=("all_to_all", "no_sync"), tokens="sharded", dtype=torch.float32,
                            with_extras=True, local_only=True, **token_kw):
    """The EP layer on this rank's shard equals the single-process layer on all tokens, twice with
    the same bytes. counts: tokens per rank of `group` (sharded)."""
    import torch.distributed as dist
    import torch_argon
    from torch_argon.distributed import ep_moe_experts, local_expert_range
    group = group or ctx.group
    W, rank = dist.get_world_size(group), dist.get_rank(group)
    counts = counts or [6] * W
    T = sum(counts) if tokens == "sharded" else counts[0]
    gate_up, down = on(ctx, *make_experts(E, H, I, dtype=dtype))
    x, ids, w = on(ctx, *make_tokens(T, K, E, H, dtype=dtype, **token_kw))
    g = torch.Generator().manual_seed(7)
    shared = torch.randn(T, H, generator=g).to(ctx.device, dtype) if with_extras else None
    residual = torch.randn(T, H, generator=g).to(ctx.device, dtype) if with_extras else None
    ref = torch_argon.moe_experts(x, ids, w, (gate_up, down), shared=shared, residual=residual)
    if tokens == "sharded":
        x, ids, w, shared, residual, ref = (shard(t, counts, rank)
                                            for t in (x, ids, w, shared, residual, ref))
    start, end = local_expert_range(E, group)
    experts = (gate_up[start:end].clone(), down[start:end].clone()) if local_only \
        else (gate_up, down)
    for mode in modes:
        outs = [ep_moe_experts(x, ids, w, experts, n_experts=E, group=group, mode=mode,
                               tokens=tokens, shared=shared, residual=residual)
                for _ in range(2)]
        what = f"rank {rank}/{W} mode={mode} tokens={tokens} E={E} counts={counts}"
        assert_close(outs[0], ref, mode, what, ctx.exact)
        assert_bytes(outs[1], outs[0], what + " (second run)")
        if tokens == "replicated":  # the same bytes on every rank
            every = [torch.empty_like(outs[0]) for _ in range(W)]
            dist.all_gather(every, outs[0].contiguous(), group=group)
            for s, o in enumerate(every):
                assert_bytes(o, outs[0], what + f" (rank {s}'s copy)")


# ---- correctness --------------------------------------------------------------------------------

@case(1, 2, 4)
def uneven_experts_and_tokens(ctx):
    # E=7: 4+3 experts at W=2, 2+2+2+1 at W=4; uneven tokens per rank, -1 ids, shared, residual.
    counts = [5, 9, 3, 7][:ctx.world]
    check_against_reference(ctx, E=7, counts=counts, modes=("all_to_all",), neg=0.2)
    check_against_reference(ctx, E=7, counts=[6] * ctx.world, neg=0.2)


@case(1, 2, 4)
def all_experts_given_sliced_here(ctx):
    check_against_reference(ctx, E=9, local_only=False, counts=[4] * ctx.world)


@case(1, 2, 4)
def everything_to_one_rank(ctx):
    # Every id in rank 0's experts: the other ranks receive nothing and send everything.
    check_against_reference(ctx, E=8, lo=0, hi=2, K=2)
    # And every entry to the very last expert (a repeated id within each token).
    check_against_reference(ctx, E=8, ids="one_expert", K=3)


@case(1, 2, 4)
def no_tokens_on_one_rank(ctx):
    counts = [4, 0, 5, 3][:ctx.world]
    check_against_reference(ctx, counts=counts, modes=("all_to_all", "auto"))


@case(1, 2, 4)
def no_tokens_anywhere(ctx):
    check_against_reference(ctx, counts=[0] * ctx.world)


@case(1, 2, 4)
def all_ids_skipped(ctx):
    check_against_reference(ctx, neg=1.0)


@case(1, 2, 4)
def replicated_tokens(ctx):
    check_against_reference(ctx, tokens="replicated", counts=[13] * ctx.world, neg=0.1)
    check_against_reference(ctx, tokens="replicated", counts=[1] * ctx.world)  # T < W


@case(1, 2)
def bfloat16(ctx):
    check_against_reference(ctx, dtype=torch.bfloat16, counts=[7] * ctx.world)
    check_against_reference(ctx, dtype=torch.bfloat16, counts=[5] * ctx.world,
                            tokens="replicated")


@case(1, 2, 4)
def int32_ids_and_bf16_weights(ctx):
    import torch.distributed as dist
    import torch_argon
    from torch_argon.distributed import ep_moe_experts
    E, H, I, K, T = 6, 16, 8, 2, 5
    gate_up, down = on(ctx, *make_experts(E, H, I))
    x, ids, w = on(ctx, *make_tokens(T * ctx.world, K, E, H))
    ids, w = ids.int(), w.bfloat16()
    ref = torch_argon.moe_experts(x, ids, w, (gate_up, down))
    counts = [T] * ctx.world
    for mode in ("all_to_all", "no_sync"):
        out = ep_moe_experts(shard(x, counts, ctx.rank), shard(ids, counts, ctx.rank),
                             shard(w, counts, ctx.rank), (gate_up, down), n_experts=E, mode=mode)
        assert_close(out, shard(ref, counts, ctx.rank), mode, f"mode={mode}", ctx.exact)
    dist.barrier()


@case(1, 2)
def world_of_one(ctx):
    # A group of one rank (each rank alone): both modes equal the single-process layer exactly.
    check_against_reference(ctx, group=ctx.single, counts=[11], E=5)
    check_against_reference(ctx, group=ctx.single, counts=[11], E=5, tokens="replicated")
    check_against_reference(ctx, group=ctx.single, counts=[11], E=5, modes=("no_sync",),
                            with_extras=False)


@case(4)
def two_groups_of_two(ctx):
    # Ranks 2 and 3 form group [2, 3]: group ranks differ from world ranks.
    check_against_reference(ctx, group=ctx.pair, counts=[3, 8], E=5, neg=0.1,
                            modes=("all_to_all", "auto"))
    check_against_reference(ctx, group=ctx.pair, counts=[4, 4], E=5, modes=("no_sync",))


@case(1, 2, 4)
def auto_mode_agrees_across_ranks(ctx):
    # Different T per rank, one of them above NO_SYNC_MAX_TOKENS: "auto" must still pick one
    # mode on every rank (all_to_all here, as T differs), after the header trade.
    from torch_argon import distributed as ep
    counts = [ep.NO_SYNC_MAX_TOKENS + 1 if r == 0 else 2 for r in range(ctx.world)]
    check_against_reference(ctx, counts=counts, H=8, I=8, modes=("auto",), with_extras=False)


@case(1, 2)
def no_sync_compiles_fullgraph(ctx):
    # The no_sync mode traces with no graph break (check is skipped while compiling).
    import torch_argon
    from torch_argon.distributed import ep_moe_experts
    E, H, I, K, T = 6, 16, 8, 2, 5
    gate_up, down = on(ctx, *make_experts(E, H, I))
    x, ids, w = on(ctx, *make_tokens(ctx.world * T, K, E, H))
    ref = torch_argon.moe_experts(x, ids, w, (gate_up, down))
    counts = [T] * ctx.world
    mine = [shard(t, counts, ctx.rank) for t in (x, ids, w)]
    torch._dynamo.reset()
    for tokens in ("sharded", "replicated"):
        args = mine if tokens == "sharded" else (x, ids, w)

        def layer(x, ids, w):
            return ep_moe_experts(x, ids, w, (gate_up, down), n_experts=E, mode="auto",
                                  tokens=tokens)
        got = torch.compile(layer, fullgraph=True, backend="eager")(*args)
        want = shard(ref, counts, ctx.rank) if tokens == "sharded" else ref
        assert_close(got, want, "no_sync", f"compiled, tokens={tokens}")


@case(1, 2, 4)
def nn_moe_with_process_group(ctx):
    # nn.MoE(process_group=...) holding its rank's experts, loaded from a whole MoE's state,
    # equals the whole MoE (shared expert and residual included).
    import torch.distributed as dist
    from torch_argon.distributed import local_expert_range
    from torch_argon.nn import MoE
    E, H, I, K = 7, 16, 8, 2
    torch.manual_seed(0)
    whole = MoE(H, I, E, K, renormalize=True, shared_intermediate_size=12).to(ctx.device)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2 * ctx.world, 3, H, generator=g).to(ctx.device)
    res = torch.randn(2 * ctx.world, 3, H, generator=g).to(ctx.device)
    with torch.no_grad():
        ref = whole(x, res)
    start, end = local_expert_range(E)
    state = whole.state_dict()
    for name in ("experts.gate_up_proj", "experts.down_proj"):
        state[name] = state[name][start:end]
    for tokens in ("sharded", "replicated"):
        for mode in ("all_to_all", "no_sync"):
            part = MoE(H, I, E, K, renormalize=True, shared_intermediate_size=12,
                       process_group=dist.group.WORLD, ep_mode=mode, ep_tokens=tokens,
                       device=ctx.device)
            assert part.experts.gate_up_proj.shape[0] == end - start
            part.load_state_dict(state)
            mine = slice(2 * ctx.rank, 2 * ctx.rank + 2) if tokens == "sharded" else slice(None)
            with torch.no_grad():
                got = part(x[mine], res[mine])
            assert_close(got, ref[mine], mode, f"nn.MoE tokens={tokens} mode={mode}", ctx.exact)


@case(2)
def transformers_patch_with_process_group(ctx):
    if ctx.device.type != "cpu":
        raise Skip("the tiny model runs on the CPU (gloo) only")
    try:
        import transformers
    except ImportError:
        raise Skip("transformers is not installed")
    import torch.distributed as dist
    from torch_argon.integrations import transformers as argon_hf
    config = transformers.Qwen3MoeConfig(
        vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=64, intermediate_size=48,
        moe_intermediate_size=16, num_experts=5, num_experts_per_tok=2, norm_topk_prob=True,
        initializer_range=0.1)
    g = torch.Generator().manual_seed(ctx.rank)  # each rank its own prompt: sharded tokens
    ids = torch.randint(3, 96, (1, 7 + ctx.rank), generator=g)
    for tokens in ("sharded", "replicated"):
        torch.manual_seed(0)
        model = transformers.Qwen3MoeForCausalLM(config).eval()
        prompt = ids if tokens == "sharded" else torch.arange(3, 12)[None]
        with torch.no_grad():
            ref = model(input_ids=prompt).logits
            names = argon_hf.patch(model, process_group=dist.group.WORLD, ep_tokens=tokens)
            assert len(names) == 2
            held = model.get_submodule(names[0]).experts.gate_up_proj.shape[0]
            assert held == (3 if ctx.rank == 0 else 2), held
            got = model(input_ids=prompt).logits
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
        try:
            argon_hf.unpatch(model)
            raise AssertionError("unpatch of a sharded model did not refuse")
        except ValueError as e:
            assert "share" in str(e)


@case(1, 2, 4)
def no_sync_in_a_cuda_graph(ctx):
    # The no_sync mode captured in a CUDA graph (NCCL collectives included): replays equal eager
    # calls on the same inputs, bit for bit, also after the inputs change in place.
    if ctx.device.type != "cuda":
        raise Skip("CUDA graphs need CUDA tensors (NCCL)")
    from torch_argon.distributed import ep_moe_experts
    E, H, I, K, T = 8, 64, 32, 2, 24
    experts = on(ctx, *make_experts(E, H, I, dtype=torch.bfloat16))
    x, ids, w = on(ctx, *make_tokens(T, K, E, H, seed=ctx.rank, dtype=torch.bfloat16))

    def layer():
        return ep_moe_experts(x, ids, w, experts, n_experts=E, mode="no_sync")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        layer()  # warm up outside the capture (Triton compiles, NCCL sets up)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = layer()
    for step in range(2):
        if step:
            x2, ids2, w2 = on(ctx, *make_tokens(T, K, E, H, seed=10 + ctx.rank,
                                                dtype=torch.bfloat16))
            x.copy_(x2), ids.copy_(ids2), w.copy_(w2)
        graph.replay()
        torch.cuda.synchronize()
        assert_bytes(captured, layer(), f"graph replay {step}")


# ---- bad input: the same kind of error on every rank, and the group still works after ------------

def expect_error(fn, *needles):
    try:
        fn()
    except ValueError as e:
        msg = str(e)
        assert any(n in msg for n in needles), f"error {msg!r} lacks any of {needles}"
        return msg
    raise AssertionError(f"no ValueError (wanted one saying {needles})")


def bad_call(ctx, *, mode, E=6, H=16, I=8, K=2, T=4, rank_change=None, expect=()):
    """Every rank calls with good arguments but `rank_change(rank, args)` may spoil some; all
    ranks must raise a ValueError with one of `expect`, then a good call must still work."""
    from torch_argon.distributed import ep_moe_experts, local_expert_range
    gate_up, down = on(ctx, *make_experts(E, H, I))
    x, ids, w = on(ctx, *make_tokens(T, K, E, H, seed=ctx.rank))
    start, end = local_expert_range(E)
    args = dict(x=x, ids=ids, w=w, experts=(gate_up[start:end], down[start:end]), n_experts=E,
                mode=mode)
    if rank_change:
        rank_change(ctx.rank, args)
    expect_error(lambda: ep_moe_experts(args["x"], args["ids"], args["w"], args["experts"],
                                        n_experts=args["n_experts"], mode=args["mode"]), *expect)


BAD_MODES = ("all_to_all", "no_sync", "auto")


@case(2, 4)
def bad_n_experts_differs(ctx):
    for mode in BAD_MODES:
        def change(rank, a):
            if rank == 1:
                a["n_experts"] = 7  # weights still hold rank 1's share of 6
        bad_call(ctx, mode=mode, rank_change=change, expect=("n_experts differs",))


@case(2, 4)
def bad_weights_differ(ctx):
    for mode in BAD_MODES:
        def inter(rank, a):
            if rank == ctx.world - 1:
                gu, dn = a["experts"]
                a["experts"] = (torch.cat([gu, gu], 1), torch.cat([dn, dn], 2))  # I = 16
        bad_call(ctx, mode=mode, rank_change=inter, expect=("intermediate size differs",))

        def dtype(rank, a):  # x and the experts agree on rank 0, but not with the others
            if rank == 0:
                a["experts"] = tuple(t.double() for t in a["experts"])
                a["x"] = a["x"].double()
        bad_call(ctx, mode=mode, rank_change=dtype, expect=("x's dtype differs",))

        def quantized(rank, a):  # rank 0's share as Q8_0 blocks, the others' dense
            if rank == 0:
                a["experts"] = quantized_share(*a["experts"])
        bad_call(ctx, mode=mode, H=32, I=32, rank_change=quantized,
                 expect=("kind and dtype differs",))

        def experts_not_of_x_dtype(rank, a):  # refused by rank 0's own check
            if rank == 0:
                a["experts"] = tuple(t.double() for t in a["experts"])
        bad_call(ctx, mode=mode, rank_change=experts_not_of_x_dtype,
                 expect=("but x is torch.float32",) if ctx.rank == 0 else
                 ("refused their arguments",))


def quantized_share(gate_up, down):
    """QuantizedExperts (Q8_0) of the shapes of a dense share."""
    from torch_argon.quant import QuantizedExperts, QuantizedWeight, random_quantized
    (E, two_i, H), I = gate_up.shape, down.shape[2]
    g = torch.Generator().manual_seed(0)
    return QuantizedExperts(
        gate_up=QuantizedWeight(random_quantized("Q8_0", two_i, H, leading=(E,), generator=g)
                                .to(gate_up.device), "Q8_0", H),
        down=QuantizedWeight(random_quantized("Q8_0", H, I, leading=(E,), generator=g)
                             .to(gate_up.device), "Q8_0", I))


@case(2, 4)
def bad_group_size(ctx):
    # The weights were split for a group twice as big.
    from torch_argon.distributed import expert_starts
    E = 2 * ctx.world
    starts = expert_starts(E, 2 * ctx.world)

    def change(rank, a):
        gu, dn = a["experts"]
        gu_all, dn_all = on(ctx, *make_experts(E, 16, 8))
        mine = slice(starts[rank], starts[rank + 1])
        a["experts"] = (gu_all[mine], dn_all[mine])
        a["n_experts"] = E
        a["ids"] = a["ids"] % E
    for mode in BAD_MODES:
        bad_call(ctx, mode=mode, E=E, rank_change=change,
                 expect=("were the weights split for another group",))


@case(4)
def bad_fewer_experts_than_ranks(ctx):
    def change(rank, a):
        a["experts"] = tuple(t[:1] for t in a["experts"])
        a["n_experts"] = 3
        a["ids"] = a["ids"] % 3
    for mode in BAD_MODES:
        bad_call(ctx, mode=mode, rank_change=change, expect=("cannot be split over a group",))


@case(2, 4)
def bad_ids_out_of_range(ctx):
    for mode in BAD_MODES:
        for bad in (6, -2):
            def change(rank, a, bad=bad):
                if rank == ctx.world - 1:
                    a["ids"] = a["ids"].clone()
                    a["ids"][1, 0] = bad
            bad_call(ctx, mode=mode, rank_change=change,
                     expect=(f"rank {ctx.world - 1}: 1)",))


@case(2, 4)
def bad_argument_on_one_rank(ctx):
    for mode in BAD_MODES:
        def change(rank, a):
            if rank == 0:
                a["x"] = a["x"][0]  # 1-D
        bad_call(ctx, mode=mode, rank_change=change,
                 expect=("x must be 2-D",) if ctx.rank == 0 else ("refused their arguments",))


@case(2, 4)
def bad_modes_differ(ctx):
    def change(rank, a):
        a["mode"] = "no_sync" if rank == 1 else "all_to_all"
    bad_call(ctx, mode=None, rank_change=change, expect=("mode differs",))


@case(2, 4)
def bad_no_sync_with_different_T(ctx):
    def change(rank, a):
        if rank == 0:
            a["x"], a["ids"], a["w"] = a["x"][:2], a["ids"][:2], a["w"][:2]
    bad_call(ctx, mode="no_sync", rank_change=change, expect=("needs the same T on every rank",))


@case(1, 2, 4)
def group_still_works_after_errors(ctx):
    check_against_reference(ctx, counts=[3] * ctx.world)


# ---- on the GPUs: python -m torch.distributed.run --nproc_per_node=N tests/distributed_cases.py

def main():
    """Every case for this world size under torchrun: NCCL on CUDA (one GPU per rank) or gloo on
    the CPU. Rank 0 prints one line per case and writes --json; the exit status is 1 if any case
    failed on any rank."""
    import argparse
    import json
    import sys

    import torch.distributed as dist
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo
    p = argparse.ArgumentParser()
    p.add_argument("--json", default=None)
    p.add_argument("--cases", default=None, help="comma-separated case names (default: all)")
    args = p.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=120),
                            device_id=device if backend == "nccl" else None)
    ctx = Ctx(rank, world, device)
    names = args.cases.split(",") if args.cases else cases_for(world)
    mine = {}
    for name in names:
        t0 = time.perf_counter()
        try:
            CASES[name][0](ctx)
            mine[name] = ("ok", "")
        except Skip as e:
            mine[name] = ("skip", str(e))
        except Exception:  # noqa: BLE001  every failure is a report
            mine[name] = ("fail", traceback.format_exc(limit=6))
        mine[name] += (round(time.perf_counter() - t0, 2),)
    every = [None] * world
    dist.all_gather_object(every, mine)
    failed = False
    if rank == 0:
        report = {}
        for name in names:
            per_rank = [every[r][name] for r in range(world)]
            status = ("fail" if any(p[0] == "fail" for p in per_rank) else
                      "skip" if any(p[0] == "skip" for p in per_rank) else "ok")
            failed |= status == "fail"
            report[name] = dict(status=status, seconds=max(p[2] for p in per_rank),
                                ranks=[dict(status=p[0], message=p[1]) for p in per_rank])
            print(f"{status:4s} {name} ({report[name]['seconds']} s)")
            for r, p in enumerate(per_rank):
                if p[0] == "fail":
                    print(f"  rank {r}: {p[1].strip().splitlines()[-1]}")
        print(f"{backend}, {world} rank(s) on {device.type}: "
              f"{sum(r['status'] == 'ok' for r in report.values())} ok, "
              f"{sum(r['status'] == 'skip' for r in report.values())} skipped, "
              f"{sum(r['status'] == 'fail' for r in report.values())} failed")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(dict(backend=backend, world=world, device=str(device),
                               torch=torch.__version__, cases=report), f, indent=1)
    flag = torch.tensor([int(failed)], device=device)
    dist.broadcast(flag, 0)
    dist.destroy_process_group()
    sys.exit(int(flag.item()))


if __name__ == "__main__":
    main()
