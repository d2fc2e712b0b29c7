"""The Triton GEMMs (gather and SwiGLU fused) and the Triton top-k of torch_argon/triton_ops,
against torch_argon.reference: on CUDA (bf16 and fp16, outputs over NaN-filled memory,
adversarial routings, strided weights, opcheck, the layer under torch.compile), and on the CPU
through the Triton interpreter (fp16; see tests/triton_interpreter_run.py)."""
import json
import os
import subprocess
import sys

import pytest
import torch

import torch_argon
from torch_argon import reference, triton_ops
from torch_argon.testing import backends
from torch_argon.triton_ops import configs
from torch_argon.triton_ops.configs import MMConfig
from triton_cases import (CASES, REL_TOL, VARIANT_CASES, run_case, run_corrupt_tokens_case,
                          run_shipped_case, run_topk_case, shipped_case_name,
                          shipped_config_pairs, variant_configs, variant_table)

HERE = os.path.dirname(os.path.abspath(__file__))
CUDA_REASON = (triton_ops.REASON or
               ("" if torch.cuda.is_available() else "torch sees no CUDA device") or
               ("" if backends.get("cuda").available else backends.get("cuda").reason))
needs_cuda = pytest.mark.skipif(bool(CUDA_REASON), reason=CUDA_REASON or "ok")
needs_triton = pytest.mark.skipif(not triton_ops.AVAILABLE, reason=triton_ops.REASON or "ok")


# ---- CUDA ------------------------------------------------------------------------------------

@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", list(CASES))
def test_triton_gemms_cuda(case, dtype):
    assert run_case(case, "cuda", dtype, backends.get("cuda").ops) == []


def _sm90_reason():
    if CUDA_REASON:
        return CUDA_REASON
    if torch.version.hip is not None or torch.cuda.get_device_capability()[0] < 9:
        return "the tma kernel needs an NVIDIA GPU of compute capability 9.0 or newer"
    return ""


needs_sm90 = pytest.mark.skipif(bool(_sm90_reason()), reason=_sm90_reason() or "ok")


@needs_sm90
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("variant,case", VARIANT_CASES)
def test_triton_tma_variants_cuda(variant, case, dtype):
    assert run_case(case, "cuda", dtype, backends.get("cuda").ops, variant=variant) == []


def _shipped_pairs_on_this_gpu():
    return [] if _sm90_reason() else shipped_config_pairs(torch.cuda.get_device_name())


@needs_sm90
@pytest.mark.parametrize("tile_m,gate_up_cfg,down_cfg", _shipped_pairs_on_this_gpu() or
                         [pytest.param(0, None, None, marks=pytest.mark.skip(
                             reason="the shipped table holds no config for this GPU"))])
def test_triton_shipped_table_configs_cuda(tile_m, gate_up_cfg, down_cfg):
    assert run_shipped_case(tile_m, gate_up_cfg, down_cfg, "cuda", torch.bfloat16,
                            backends.get("cuda").ops) == []


def _table_for_layer_problem(tile_m=32):
    """A table that sends _layer_problem's layer (bf16, E=16, H=64, I=32) down the tma kernel
    (persistent, half blocks) at tile_m."""
    gu, dn = variant_configs("tma_p", tile_m)
    return variant_table("cuda", torch.bfloat16, 16, 64, 32, tile_m, gu, dn)


@needs_sm90
def test_layer_tma_kernel_compiles_and_graphs_cuda():
    """The tma kernel (descriptors built on the device, Triton's scratch allocator) under
    torch.compile(fullgraph) and under CUDA graph capture, chosen through the table."""
    x, rw, wgu, wd = _layer_problem(T=70)
    K = 4
    ids, w = torch_argon.route(x, rw, K)
    want = reference.moe_layer(x.cpu(), rw.cpu(), (wgu.cpu(), wd.cpu()), K, topk_ids=ids.cpu(),
                               topk_weights=w.cpu())
    configs.set_table(_table_for_layer_problem())
    try:
        assert configs.layer_tile_m(70 * K, 16, hidden=64, inter=32, dtype=torch.bfloat16,
                                    device_name=torch.cuda.get_device_name()) == 32
        eager = torch_argon.moe_layer(x, rw, (wgu, wd), K, path="triton")
        torch._dynamo.reset()
        compiled = torch.compile(torch_argon.moe_layer, fullgraph=True)(x, rw, (wgu, wd), K,
                                                                        path="triton")
        static_out = torch_argon.moe_layer(x, rw, (wgu, wd), K, path="triton")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = torch_argon.moe_layer(x, rw, (wgu, wd), K, path="triton")
        static_out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
    finally:
        configs.set_table(None)
    for got in (eager, compiled, static_out):
        err = float((got.cpu().double() - want.double()).norm() / want.double().norm())
        assert err < REL_TOL[torch.bfloat16], err
    torch.testing.assert_close(compiled, eager, atol=2e-2, rtol=2e-2)


@needs_cuda
def test_triton_corrupt_tokens_cuda():
    assert run_corrupt_tokens_case("cuda", torch.bfloat16) == []


@needs_cuda
def test_triton_topk_cuda():
    assert run_topk_case("cuda") == []


@needs_cuda
@pytest.mark.parametrize("T,E,K", [(2048, 512, 10), (300, 64, 8), (5, 128, 1)])
def test_triton_topk_router_scores_cuda(T, E, K):
    """On softmax scores of bf16 logits (many exact ties): torch.topk's values and expert set."""
    torch.manual_seed(T)
    logits = torch.randn(T, E, device="cuda").bfloat16()
    scores = torch.softmax(logits, dim=-1, dtype=torch.float32)
    v, i = triton_ops.topk_triton(scores, K)
    tv, ti = torch.topk(scores, K, dim=-1)
    assert torch.equal(v, tv)
    assert torch.equal(i.sort(1).values, ti.sort(1).values)


def _layer_problem(T=300, H=64, E=16, I=32, dtype=torch.bfloat16, device="cuda"):
    torch.manual_seed(3)
    x = torch.randn(T, H).to(dtype)
    rw = torch.randn(E, H).to(dtype)
    wgu = (torch.randn(E, 2 * I, H) / H ** 0.5).to(dtype)
    wd = (torch.randn(E, H, I) / I ** 0.5).to(dtype)
    return [t.to(device) for t in (x, rw, wgu, wd)]


@needs_cuda
@pytest.mark.parametrize("tile_m", [None, 16, 64])
def test_layer_triton_path_cuda(tile_m):
    x, rw, wgu, wd = _layer_problem()
    K = 4
    ids, w = torch_argon.route(x, rw, K)
    want = reference.moe_layer(x.cpu(), rw.cpu(), (wgu.cpu(), wd.cpu()), K, topk_ids=ids.cpu(),
                               topk_weights=w.cpu())
    for path in ("triton", "ops"):
        got = torch_argon.moe_layer(x, rw, (wgu, wd), K, tile_m=tile_m, path=path).cpu()
        err = float((got.double() - want.double()).norm() / want.double().norm())
        assert err < REL_TOL[torch.bfloat16], (path, err)


@needs_cuda
def test_layer_triton_path_refusals():
    x, rw, wgu, wd = _layer_problem()
    with pytest.raises(ValueError, match="power of two >= 16"):
        torch_argon.moe_layer(x, rw, (wgu, wd), 2, tile_m=8, path="triton")
    with pytest.raises(ValueError, match="fp16 / bf16"):
        torch_argon.moe_layer(x.float(), rw.float(), (wgu.float(), wd.float()), 2, path="triton")
    # "auto" falls back to the ops path where Triton cannot run
    torch_argon.moe_layer(x.float(), rw.float(), (wgu.float(), wd.float()), 2)


@needs_cuda
def test_layer_triton_compiles_fullgraph_cuda():
    x, rw, wgu, wd = _layer_problem(T=40)
    torch._dynamo.reset()
    compiled = torch.compile(torch_argon.moe_layer, fullgraph=True)
    eager = torch_argon.moe_layer(x, rw, (wgu, wd), 2, renormalize=True, path="triton")
    got = compiled(x, rw, (wgu, wd), 2, renormalize=True, path="triton")
    torch.testing.assert_close(got, eager, atol=2e-2, rtol=2e-2)


@needs_cuda
def test_triton_ops_opcheck_cuda():
    T, H, E, I, K, tm = 24, 64, 6, 32, 3, 16
    x, _, wgu, wd = _layer_problem(T=T, H=H, E=E, I=I)
    ids = torch.randint(0, E, (T, K), device="cuda")
    plan = torch_argon.moe_plan(ids, torch.rand(T, K, device="cuda"), E, tm)
    h = triton_ops.moe_gate_up_swiglu_triton(x, wgu, plan.tile_expert, plan.meta, tm,
                                             plan.sorted_token)
    ns = torch.ops.argon
    # zero_unused=True throughout: with False, rows of unused tiles are left unwritten, so two
    # runs differ there and opcheck's eager-vs-traced comparison cannot hold.
    cases = [
        (ns.moe_gate_up_swiglu_triton, (x, wgu, plan.tile_expert, plan.meta, tm,
                                        plan.sorted_token, True)),
        (ns.moe_mm_triton, (h, wd, plan.tile_expert, plan.meta, tm, None, True)),
        (ns.moe_mm_triton, (x, wgu, plan.tile_expert, plan.meta, tm, plan.sorted_token, True)),
        (ns.moe_mm_triton, (h, wd, plan.tile_expert, plan.meta, tm, None, True,
                            plan.sorted_token)),
        (ns.topk_triton, (torch.rand(T, 64, device="cuda"), 5)),
    ]
    for op, args in cases:
        torch.library.opcheck(op, args)


# ---- the Triton interpreter on the CPU ---------------------------------------------------------

@pytest.fixture(scope="module")
def interpreter_results():
    if not triton_ops.AVAILABLE:
        pytest.skip(triton_ops.REASON)
    run = subprocess.run([sys.executable, os.path.join(HERE, "triton_interpreter_run.py")],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", list(CASES) + ["topk", "corrupt_tokens"] +
                         [f"{v}:{c}" for v, c in VARIANT_CASES] +
                         [shipped_case_name(*p) for p in shipped_config_pairs()])
def test_triton_interpreter_cpu(interpreter_results, case):
    assert interpreter_results[case] == []


# ---- the config table and the kernel choice (no launch) ----------------------------------------

def _table(device="NVIDIA H200"):
    cfg = lambda bn, **kw: MMConfig(block_n=bn, block_k=64, num_warps=8, num_stages=3,  # noqa
                                    **kw).to_dict()
    return {
        "gemm": {configs.gemm_key(device, torch.bfloat16, "gate_up", 128, 1536, 2048): [
            {"rows_per_expert": 32.0, "tile_m": 64, "config": cfg(64)},
            {"rows_per_expert": 512.0, "tile_m": 64, "config": cfg(128, kernel="tma")},
            {"rows_per_expert": 512.0, "tile_m": 128, "config": cfg(256, kernel="tma",
                                                                    skip_padding=True)}]},
        "tile_m": {configs.tile_m_key(device, torch.bfloat16, 128, 2048, 768): [
            {"rows_per_expert": 8.0, "tile_m": 16}, {"rows_per_expert": 128.0, "tile_m": 64},
            {"rows_per_expert": 512.0, "tile_m": 128}]},
    }


@needs_triton
def test_config_table_lookup():
    configs.set_table(_table())
    try:
        look = lambda dtype, tm, rows: configs.tuned_config(  # noqa: E731
            "NVIDIA H200", dtype, "gate_up", 128, 1536, 2048, tm, rows)
        assert look(torch.bfloat16, 64, 40.0).block_n == 64  # nearest in log(rows): 32
        assert look(torch.bfloat16, 64, 300.0).kernel == "tma"  # nearest: 512
        assert look(torch.bfloat16, 128, 200.0).skip_padding  # the only tile_m=128 entry
        assert look(torch.float16, 64, 300.0).kernel == "tma"  # fp16 takes bf16's entries
        assert look(torch.bfloat16, 32, 40.0) is None  # no entry of this tile_m
        assert configs.tuned_config("NVIDIA A100", torch.bfloat16, "gate_up", 128, 1536, 2048,
                                    64, 40.0) is None
        tm = lambda T, dev="NVIDIA H200": configs.layer_tile_m(  # noqa: E731
            T * 8, 128, hidden=2048, inter=768, dtype=torch.bfloat16, device_name=dev)
        assert [tm(T) for T in (64, 128, 400, 1024, 8192, 32768)] == [16, 16, 16, 64, 128, 128]
        # loads more than 4x from every measured one take the default rule
        assert tm(16) == configs.default_tile_m(16 * 8, 128)  # 1 row per expert, 8 measured
        assert tm(65536) == configs.default_tile_m(65536 * 8, 128)  # 4096 rows, 512 measured
        assert look(torch.bfloat16, 64, 4.0) is None  # 32 measured
        assert tm(8192, "NVIDIA A100") == configs.default_tile_m(8192 * 8, 128)  # not in table
        assert configs.layer_tile_m(8192 * 8, 128) == configs.default_tile_m(8192 * 8, 128)
    finally:
        configs.set_table(None)


@needs_triton
def test_config_table_file_round_trip(tmp_path, monkeypatch):
    """ARGON_TRITON_CONFIGS names the table file; the sweep's JSON form loads as written."""
    path = tmp_path / "table.json"
    path.write_text(json.dumps(_table("Some GPU")))
    monkeypatch.setenv("ARGON_TRITON_CONFIGS", str(path))
    assert configs.tuned_config("Some GPU", torch.bfloat16, "gate_up", 128, 1536, 2048, 128,
                                512.0).block_n == 256


def test_config_lookup_traces_under_fullgraph_compile():
    """The layer looks its configs up while torch.compile traces it: no file access there."""
    def tile_m(x):
        return x + configs.layer_tile_m(8192 * 8, 128, hidden=2048, inter=768,
                                        dtype=torch.bfloat16, device_name="NVIDIA H200")

    x = torch.zeros(2)
    assert torch.equal(torch.compile(tile_m, fullgraph=True, backend="eager")(x), tile_m(x))


def test_mm_config_refuses_tma_options_on_classic():
    with pytest.raises(ValueError, match="need kernel='tma'"):
        MMConfig(128, 64, 4, 3, skip_padding=True)
    with pytest.raises(ValueError, match="need kernel='tma'"):
        MMConfig(128, 64, 4, 3, persistent=1)
    with pytest.raises(ValueError, match="need kernel='tma'"):
        MMConfig(128, 64, 4, 3, tma_store=True)
    with pytest.raises(ValueError, match="kernel must be one of"):
        MMConfig(128, 64, 4, 3, kernel="cutlass")
    assert MMConfig.from_dict(MMConfig(64, 64, 4, 3, kernel="tma", persistent=2).to_dict()) == \
        MMConfig(64, 64, 4, 3, kernel="tma", persistent=2)


@needs_triton
def test_tma_refusals_name_the_reason():
    from torch_argon.triton_ops.ops import tma_refusal
    cfg = MMConfig(64, 64, 4, 3, kernel="tma", skip_padding=True)
    w = torch.empty(4, 64, 32, dtype=torch.bfloat16)
    a = torch.empty(64, 32, dtype=torch.bfloat16)
    tokens = torch.full((64,), -1, dtype=torch.int32)
    assert "compute capability 9.0" in tma_refusal(a, w, None, 32, cfg, tokens)
    if torch.cuda.is_available() and not _sm90_reason():
        a, w, tokens = a.cuda(), w.cuda(), tokens.cuda()
        assert tma_refusal(a, w, None, 32, cfg, tokens) == ""
        assert "contiguous rows" in tma_refusal(a, w.transpose(1, 2).contiguous().transpose(
            1, 2), None, 32, cfg, tokens)
        assert "contiguous rows" in tma_refusal(a, w[:, :, 1:9], None, 32, cfg, tokens)
        assert "skip_padding needs" in tma_refusal(a, w, None, 16, cfg, tokens)
        assert "skip_padding needs" in tma_refusal(a, w, None, 32, cfg, None)


# ---- bad input (checked before any launch, so CPU tensors do) ----------------------------------


def _bad_input_args():
    T, H, E, I, tm = 8, 32, 4, 16, 16
    x = torch.randn(T, H, dtype=torch.float16)
    wgu = torch.randn(E, 2 * I, H, dtype=torch.float16)
    plan = reference.moe_plan(torch.randint(0, E, (T, 2)), torch.rand(T, 2), E, tm)
    return x, wgu, plan.tile_expert, plan.meta, tm, plan.sorted_token


@needs_triton
@pytest.mark.parametrize("change,match", [
    (lambda a: {**a, "x": a["x"].float()}, "a and w must both be fp16 or bf16"),
    (lambda a: {**a, "w": a["w"].bfloat16()}, "a and w must both be fp16 or bf16"),
    (lambda a: {**a, "w": a["w"][:, :, :-1]}, r"a \[rows, Kd\] and w \[E, N, Kd\] do not fit"),
    (lambda a: {**a, "w": a["w"][:, :-1]}, r"w must be \[E, 2I, Kd\]"),
    (lambda a: {**a, "tile_m": 8}, "power-of-two tile_m >= 16"),
    (lambda a: {**a, "tile_expert": a["tile_expert"].long()}, "tile_expert must be int32"),
    (lambda a: {**a, "tile_expert": a["tile_expert"][:-1]},
     r"sorted_token must have tile_expert.size\(0\) \* tile_m = \d+ rows"),
    (lambda a: {**a, "meta": a["meta"][:2]}, "meta must hold moe_plan's 4 counters"),
    (lambda a: {**a, "sorted_token": a["sorted_token"].long()}, "sorted_token must be a 1-D int32"),
    (lambda a: {**a, "sorted_token": a["sorted_token"][:-1]}, "sorted_token must have tile_expert"),
    (lambda a: {**a, "meta": a["meta"].to("meta")}, "meta must be on cpu like a, got meta"),
])
def test_triton_gemm_bad_input_names_argument(change, match):
    args = change(dict(zip(("x", "w", "tile_expert", "meta", "tile_m", "sorted_token"),
                           _bad_input_args())))
    with pytest.raises(ValueError, match=match):
        triton_ops.moe_gate_up_swiglu_triton(args["x"], args["w"], args["tile_expert"],
                                             args["meta"], args["tile_m"], args["sorted_token"])


@needs_triton
@pytest.mark.parametrize("gather,row_token,match", [
    (True, lambda t: t, "row_token is for a row-ordered a"),
    (False, lambda t: t.long(), "row_token must be a 1-D int32 tensor from moe_plan"),
    (False, lambda t: t[:-1], r"row_token must be the plan's sorted_token of \d+ rows"),
    (False, lambda t: t.to("meta"), "row_token must be on cpu like a, got meta"),
])
def test_triton_mm_bad_row_token_names_argument(gather, row_token, match):
    x, wgu, tile_expert, meta, tm, tokens = _bad_input_args()
    a = x if gather else torch.zeros(tokens.shape[0], x.shape[1], dtype=x.dtype)
    with pytest.raises(ValueError, match=match):
        triton_ops.moe_mm_triton(a, wgu, tile_expert, meta, tm, tokens if gather else None,
                                 True, row_token(tokens))


@needs_triton
@pytest.mark.parametrize("scores,k,match", [
    (torch.rand(4, 8, 2), 2, r"scores must be a \[T, E\] float tensor"),
    (torch.randint(0, 9, (4, 8)), 2, r"scores must be a \[T, E\] float tensor"),
    (torch.rand(4, 8), 9, "need 0 < k <= E"),
    (torch.rand(4, 8), 0, "need 0 < k <= E"),
])
def test_triton_topk_bad_input_names_argument(scores, k, match):
    with pytest.raises(ValueError, match=match):
        triton_ops.topk_triton(scores, k)
