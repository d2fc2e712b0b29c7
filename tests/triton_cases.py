"""Cases for the Triton GEMMs and top-k (torch_argon/triton_ops), shared by the CUDA tests and
the Triton-interpreter run on the CPU (tests/triton_interpreter_run.py). Each case returns a
list of failure messages (empty = pass), checked against torch_argon.reference."""
import torch

from routing_cases import make_ids, make_weights
from torch_argon import reference, triton_ops
from torch_argon.experts import run_implementation
from torch_argon.triton_ops import configs
from torch_argon.triton_ops.configs import MMConfig

# name: (T, H, E, I, K, tile_m, routing distribution, transposed weight stacks)
CASES = {
    "uniform": (40, 64, 8, 32, 3, 16, "uniform", False),
    "neg_some": (33, 64, 8, 32, 4, 16, "neg_some", False),
    "one_expert": (70, 64, 8, 32, 2, 16, "one_expert", False),  # many tiles of one expert
    "empty_experts": (30, 64, 16, 32, 3, 32, "empty", False),
    "all_skipped": (12, 64, 8, 32, 2, 16, "neg_all", False),
    "k1": (25, 64, 8, 32, 1, 16, "uniform", False),
    "t0": (0, 64, 8, 32, 2, 16, "uniform", False),
    "tile64": (50, 64, 8, 32, 4, 64, "repeated", False),
    "tile128": (90, 64, 4, 32, 6, 128, "repeated", False),  # last tiles mostly padding
    "tile256": (40, 64, 4, 32, 8, 256, "repeated", False),  # two row blocks per tile
    "odd_dims_strided": (21, 48, 6, 24, 3, 16, "neg_some", True),  # K and N tails, strides
    "odd_dims": (21, 48, 6, 24, 3, 32, "neg_some", False),  # K and N tails, dense stacks
}
# The cases that also run the GeGLU epilogues (activation "gelu" and "gelu_tanh").
GEGLU_CASES = ("uniform", "odd_dims_strided")
# Relative Frobenius error per dtype, as tests/test_layer.py.
REL_TOL = {torch.float16: 2e-3, torch.bfloat16: 1.5e-2}

# The Hopper kernel's variants (moe_mm_tma_kernel.py), block shapes for these small stacks
# (the real ones come from the sweep's table), and the cases each runs on: "tma" as it is,
# "tma_p" on a persistent grid with half-height blocks over padding rows (tile_m >= 32) and
# its results stored through a descriptor.
TMA_VARIANTS = {
    "tma": (dict(kernel="tma"), ("neg_some", "all_skipped", "t0", "odd_dims", "k1")),
    "tma_p": (dict(kernel="tma", skip_padding=True, persistent=1, tma_store=True),
              ("empty_experts", "tile64", "tile128", "tile256", "odd_dims")),
}
VARIANT_CASES = [(v, c) for v, (_, cases) in TMA_VARIANTS.items() for c in cases]


def variant_configs(variant, tile_m):
    """(gate_up config, down config) of a variant for a case's tile_m."""
    opts = dict(TMA_VARIANTS[variant][0])
    if tile_m < 32:
        opts.pop("skip_padding", None)
    return (MMConfig(block_n=32, block_k=32, num_warps=4, num_stages=2, **opts),
            MMConfig(block_n=32, block_k=32, num_warps=4, num_stages=2, **opts))


# A case of each tile_m, for the shipped table's configs (their block shapes, meant for real
# layers, run on these small stacks as on large ones: tails masked, K clamped).
CASE_OF_TILE_M = {16: "neg_some", 32: "empty_experts", 64: "tile64", 128: "tile128"}


def shipped_config_pairs(device_name=None):
    """(tile_m, gate_up config, down config) for every config of the shipped table (only
    device_name's, when given), each paired with the default rule's config for the other GEMM."""
    pairs = set()
    for key, entries in configs.table()["gemm"].items():
        if device_name is not None and not key.startswith(device_name + "|"):
            continue
        for e in entries:
            tm, cfg = e["tile_m"], MMConfig.from_dict(e["config"])
            bm = min(tm, 128)
            if "|gate_up|" in key:
                pairs.add((tm, cfg, configs.config_for(False, bm, 1.0)))
            elif "|down|" in key:
                pairs.add((tm, configs.config_for(True, bm, 1.0), cfg))
    return sorted(pairs, key=str)


def shipped_case_name(tile_m, gate_up_cfg, down_cfg):
    return f"shipped:{tile_m} {gate_up_cfg.label()} / {down_cfg.label()}"


def run_shipped_case(tile_m, gate_up_cfg, down_cfg, device, dtype, ops):
    """One shipped config pair on the case of its tile_m (run_variant with these configs)."""
    return run_case(CASE_OF_TILE_M[tile_m], device, dtype, ops, variant="table",
                    configs_pair=(gate_up_cfg, down_cfg))


# Loads (mean rows per expert) 4x apart, so every load is within the lookup's 4x of one.
EVERY_LOAD = [4.0 ** k for k in range(-4, 8)]


def variant_table(device, dtype, E, H, I, tile_m, gate_up_cfg, down_cfg):
    """A config table (configs.set_table) that makes the ops choose these configs for this
    device, dtype and expert shape at tile_m and any load, and the layer choose tile_m, as
    the layer's lookup would."""
    name = triton_ops.device_name(torch.device(device))
    entry = lambda cfg: [{"rows_per_expert": r, "tile_m": tile_m, "config": cfg.to_dict()}  # noqa
                         for r in EVERY_LOAD]
    return {"gemm": {configs.gemm_key(name, dtype, "gate_up", E, 2 * I, H): entry(gate_up_cfg),
                     configs.gemm_key(name, dtype, "down", E, H, I): entry(down_cfg)},
            "tile_m": {configs.tile_m_key(name, dtype, E, H, I):
                       [{"rows_per_expert": r, "tile_m": tile_m} for r in EVERY_LOAD]}}


def rel_err(got, want):
    want = want.double().cpu()
    got = got.double().cpu()
    den = float(want.norm())
    return float((got - want).norm()) / den if den else float(got.norm())


def _weights(E, H, I, dtype, transposed, g):
    wgu = torch.randn(E, 2 * I, H, generator=g) / H ** 0.5
    wd = torch.randn(E, H, I, generator=g) / I ** 0.5
    if transposed:  # stored [E, Kd, N] as some checkpoints do, passed as a strided view
        return (wgu.transpose(1, 2).contiguous().to(dtype).transpose(1, 2),
                wd.transpose(1, 2).contiguous().to(dtype).transpose(1, 2))
    return wgu.to(dtype), wd.to(dtype)


def poison_allocator(device):
    """Fill freed CUDA cache blocks with NaN, so unwritten output elements show up."""
    if torch.device(device).type == "cuda":
        junk = torch.full((1 << 24,), float("nan"), device=device)
        del junk


def run_case(name, device, dtype, ops, variant=None, configs_pair=None):
    """ops: the OpSet for plan and combine on `device` (reference ops on the CPU). variant: a
    TMA_VARIANTS name, run instead of the default choice, or with configs_pair (gate_up, down)
    a name for those configs (see run_variant)."""
    if variant is not None:
        return run_variant(name, variant, device, dtype, ops, configs_pair)
    T, H, E, I, K, tm, dist, transposed = CASES[name]
    x, wgu, wd, ids, w = _case_data(name, dtype)
    plan = reference.moe_plan(ids, w, E, tm)
    xs = reference.moe_gather(x, plan.sorted_token)
    want_h = reference.swiglu(reference.moe_mm(xs, wgu, plan.tile_expert, tm))
    want_gu = reference.moe_mm(xs, wgu, plan.tile_expert, tm)
    want_y = reference.moe_mm(want_h, wd, plan.tile_expert, tm)
    want_layer = reference.moe_layer(x, None, (wgu, wd), K, topk_ids=ids, topk_weights=w)

    d = device
    dplan = plan.to(d)
    xd, wgud, wdd = x.to(d), wgu.to(d), wd.to(d)
    if transposed:  # .to() keeps the strides of a CPU view only on the same device
        wgud = wgu.transpose(1, 2).contiguous().to(d).transpose(1, 2)
        wdd = wd.transpose(1, 2).contiguous().to(d).transpose(1, 2)
    failures = []
    tol = REL_TOL[dtype]
    args = (dplan.tile_expert, dplan.meta, tm)

    def check(what, got, want):
        got = got.cpu()
        if got.shape != want.shape:
            failures.append(f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}")
            return
        if not torch.isfinite(got).all():
            failures.append(f"{what}: non-finite values (unwritten elements?)")
        err = rel_err(got, want)
        if err > tol:
            failures.append(f"{what}: rel err {err:.2e} > {tol:.0e}")
        unused = (plan.tile_expert < 0).repeat_interleave(tm)
        if unused.any() and not (got[unused] == 0).all():
            failures.append(f"{what}: rows of unused tiles are not zero")

    poison_allocator(d)
    check("gate_up_swiglu (gathered)", triton_ops.moe_gate_up_swiglu_triton(
        xd, wgud, *args, dplan.sorted_token), want_h)
    if name in GEGLU_CASES:
        for act in ("gelu", "gelu_tanh"):
            poison_allocator(d)
            check(f"gate_up_{act} (gathered)", triton_ops.moe_gate_up_swiglu_triton(
                xd, wgud, *args, dplan.sorted_token, activation=act),
                reference.swiglu(want_gu, activation=act))
    poison_allocator(d)
    check("gate_up (gathered, no swiglu)", triton_ops.moe_mm_triton(
        xd, wgud, *args, dplan.sorted_token), want_gu)
    poison_allocator(d)
    check("down (row-ordered)", triton_ops.moe_mm_triton(want_h.to(d), wdd, *args), want_y)
    poison_allocator(d)
    got = run_implementation("triton_dense", xd, ids.to(d), w.to(d), (wgud, wdd), tile_m=tm,
                             ops=ops)
    err = rel_err(got, want_layer)
    if got.shape != want_layer.shape or err > tol:
        failures.append(f"experts path: rel err {err:.2e} (shape {tuple(got.shape)})")
    return failures


def _case_data(name, dtype):
    T, H, E, I, K, tm, dist, transposed = CASES[name]
    g = torch.Generator().manual_seed(list(CASES).index(name))
    x = torch.randn(T, H + 8, generator=g).to(dtype)[:, 3:3 + H]  # rows strided, not dense
    wgu, wd = _weights(E, H, I, dtype, transposed, g)
    ids, w = make_ids(T, K, E, dist, seed=T + E), make_weights(T, K, seed=T)
    return x, wgu, wd, ids, w


def run_variant(name, variant, device, dtype, ops, configs_pair=None):
    """One Hopper-kernel variant on a case: the gathered gate/up + SwiGLU GEMM and the
    row-ordered down GEMM (with the plan's tokens, so padding may be skipped) launched into
    NaN-filled outputs (zero_unused: every row is written, unused tiles and padding rows with
    zeros), one GeGLU epilogue, then the experts path through the ops with a config table
    that selects the variant (zero_unused off, as the layer runs). configs_pair: (gate_up,
    down) configs to run instead of the variant's (variant then only names the run)."""
    from torch_argon.triton_ops.ops import choose_config, launch_moe_mm, tma_refusal

    T, H, E, I, K, tm, dist, transposed = CASES[name]
    x, wgu, wd, ids, w = _case_data(name, dtype)
    plan = reference.moe_plan(ids, w, E, tm)
    xs = reference.moe_gather(x, plan.sorted_token)
    want_gu = reference.moe_mm(xs, wgu, plan.tile_expert, tm)
    want_h = reference.swiglu(want_gu)
    want_y = reference.moe_mm(want_h, wd, plan.tile_expert, tm)
    want_layer = reference.moe_layer(x, None, (wgu, wd), K, topk_ids=ids, topk_weights=w)
    d = device
    dplan = plan.to(d)
    xd, wgud, wdd, hd = x.to(d), wgu.to(d), wd.to(d), want_h.to(d)
    cfg_gu, cfg_dn = configs_pair or variant_configs(variant, tm)
    failures = []
    block_m = min(tm, 128)
    for what, cfg, a, wt, out, tokens in (
            ("gate_up", cfg_gu, xd, wgud, None, dplan.sorted_token),
            ("down", cfg_dn, hd, wdd, None, dplan.sorted_token)):
        refusal = cfg.kernel == "tma" and tma_refusal(a, wt, out, block_m, cfg, tokens)
        if refusal:
            failures.append(f"{variant} {what}: the variant does not run here: {refusal}")
    if failures:
        return failures
    tol = REL_TOL[dtype]
    R = plan.sorted_token.shape[0]

    def check(what, got, want):
        got = got.cpu()
        if not torch.isfinite(got).all():
            failures.append(f"{variant} {what}: non-finite values (unwritten elements?)")
        err = rel_err(got, want)
        if err > tol:
            failures.append(f"{variant} {what}: rel err {err:.2e} > {tol:.0e}")
        unused = (plan.tile_expert < 0).repeat_interleave(tm)
        if unused.any() and not (got[unused] == 0).all():
            failures.append(f"{variant} {what}: rows of unused tiles are not zero")

    def launch(a, wt, n_out, cfg, swiglu, activation="silu", **kw):
        out = torch.full((R, n_out), float("nan"), dtype=dtype, device=d)
        if R:
            launch_moe_mm(a, wt, dplan.tile_expert, dplan.meta, tm, out=out, swiglu=swiglu,
                          zero_unused=True, activation=activation, config=cfg, **kw)
        return out

    check("gate_up_swiglu", launch(xd, wgud, I, cfg_gu, True,
                                   sorted_token=dplan.sorted_token), want_h)
    check("gate_up_gelu_tanh", launch(xd, wgud, I, cfg_gu, True, activation="gelu_tanh",
                                      sorted_token=dplan.sorted_token),
          reference.swiglu(want_gu, activation="gelu_tanh"))
    check("down", launch(hd, wdd, H, cfg_dn, False, sorted_token=None,
                         row_token=dplan.sorted_token), want_y)
    configs.set_table(variant_table(d, dtype, E, H, I, tm, cfg_gu, cfg_dn))
    try:
        load = configs.mean_rows_per_expert(R, E, tm)
        chosen = (choose_config(xd, wgud, tm, True, True, load),
                  choose_config(hd, wdd, tm, False, False, load))
        if chosen != (cfg_gu, cfg_dn):
            failures.append(f"{variant}: the table lookup chose {chosen}")
        poison_allocator(d)
        got = run_implementation("triton_dense", xd, ids.to(d), w.to(d), (wgud, wdd),
                                 tile_m=tm, ops=ops)
    finally:
        configs.set_table(None)
    err = rel_err(got, want_layer)
    if got.shape != want_layer.shape or not torch.isfinite(got.cpu()).all() or err > tol:
        failures.append(f"{variant} experts path: rel err {err:.2e} (shape {tuple(got.shape)})")
    return failures


def run_corrupt_tokens_case(device, dtype=torch.float16):
    """A plan whose sorted_token holds ids outside [0, T) (corrupt, or from another batch):
    the gathered GEMM reads those rows as zeros, like padding, and never reads outside x."""
    T, H, E, I, K, tm = 20, 64, 4, 32, 2, 16
    g = torch.Generator().manual_seed(11)
    x = torch.randn(T, H, generator=g).to(dtype)
    wgu, _ = _weights(E, H, I, dtype, False, g)
    plan = reference.moe_plan(make_ids(T, K, E, "uniform", seed=5), make_weights(T, K, seed=5),
                              E, tm)
    tokens = plan.sorted_token.clone()
    valid = (tokens >= 0).nonzero().flatten()
    bad_rows = valid[::3]
    tokens[bad_rows] = torch.tensor([T, T + 7, 1 << 30, -5], dtype=torch.int32).repeat(
        len(bad_rows))[:len(bad_rows)]
    want_tokens = torch.where((tokens >= 0) & (tokens < T), tokens, -1)
    want = reference.moe_mm(reference.moe_gather(x, want_tokens), wgu, plan.tile_expert, tm)
    poison_allocator(device)
    got = triton_ops.moe_mm_triton(x.to(device), wgu.to(device), plan.tile_expert.to(device),
                                   plan.meta.to(device), tm, tokens.to(device)).cpu()
    failures = []
    if not torch.isfinite(got).all():
        failures.append("corrupt tokens: non-finite values")
    if not (got[bad_rows] == 0).all():
        failures.append("corrupt tokens: rows with out-of-range tokens are not zero")
    err = rel_err(got, want)
    if err > REL_TOL[dtype]:
        failures.append(f"corrupt tokens: rel err {err:.2e}")
    return failures


def run_topk_case(device, T=37, E=64, K=10):
    """topk_triton on random, tied and constant scores: the values of torch.topk, and the ids
    of a stable descending sort (equal scores: ascending id). On CUDA also the same set of ids
    as torch.topk (whose CUDA kernel takes the lowest ids among equal scores at the cut; its
    CPU kernel does not, so the CPU run checks the stable-sort rule alone)."""
    g = torch.Generator().manual_seed(7)
    s = torch.rand(T, E, generator=g)
    failures = []
    for name, scores in (("random", s), ("ties", (s * 4).floor() / 4),
                         ("constant", torch.full_like(s, 0.25))):
        v, i = triton_ops.topk_triton(scores.to(device), K)
        v, i = v.cpu(), i.cpu()
        tv, ti = torch.topk(scores.to(device), K, dim=-1)
        if not torch.equal(v, tv.cpu()):
            failures.append(f"topk {name}: values differ from torch.topk")
        want = torch.sort(scores, dim=-1, descending=True, stable=True).indices[:, :K]
        if not torch.equal(i, want):
            failures.append(f"topk {name}: ids differ from the stable descending sort")
        if torch.device(device).type == "cuda" and not torch.equal(
                i.sort(1).values, ti.cpu().sort(1).values):
            failures.append(f"topk {name}: chosen ids differ from torch.topk's")
    return failures
