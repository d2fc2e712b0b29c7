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
from triton_cases import CASES, REL_TOL, run_case, run_corrupt_tokens_case, run_topk_case

HERE = os.path.dirname(os.path.abspath(__file__))
CUDA_REASON = (triton_ops.REASON or
               ("" if torch.cuda.is_available() else "torch sees no CUDA device") or
               ("" if backends.get("cuda").available else backends.get("cuda").reason))
needs_cuda = pytest.mark.skipif(bool(CUDA_REASON), reason=CUDA_REASON or "ok")


# ---- CUDA ------------------------------------------------------------------------------------

@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", list(CASES))
def test_triton_gemms_cuda(case, dtype):
    assert run_case(case, "cuda", dtype, backends.get("cuda").ops) == []


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


@pytest.mark.parametrize("case", list(CASES) + ["topk", "corrupt_tokens"])
def test_triton_interpreter_cpu(interpreter_results, case):
    assert interpreter_results[case] == []


# ---- bad input (checked before any launch, so CPU tensors do) ----------------------------------

needs_triton = pytest.mark.skipif(not triton_ops.AVAILABLE, reason=triton_ops.REASON or "ok")


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
    (lambda a: {**a, "tile_expert": a["tile_expert"].long()}, "tile_expert must be a 1-D int32"),
    (lambda a: {**a, "tile_expert": a["tile_expert"][:-1]}, "do not make .* tiles"),
    (lambda a: {**a, "meta": a["meta"][:2]}, "meta must hold moe_plan's 4 counters"),
    (lambda a: {**a, "sorted_token": a["sorted_token"].long()}, "sorted_token must be a 1-D int32"),
    (lambda a: {**a, "sorted_token": a["sorted_token"][:-1]}, "do not make .* tiles"),
    (lambda a: {**a, "meta": a["meta"].to("meta")}, "meta is on meta"),
])
def test_triton_gemm_bad_input_names_argument(change, match):
    args = change(dict(zip(("x", "w", "tile_expert", "meta", "tile_m", "sorted_token"),
                           _bad_input_args())))
    with pytest.raises(ValueError, match=match):
        triton_ops.moe_gate_up_swiglu_triton(args["x"], args["w"], args["tile_expert"],
                                             args["meta"], args["tile_m"], args["sorted_token"])


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
