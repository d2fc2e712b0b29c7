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
from torch_argon import backends, reference, triton_ops
from triton_cases import CASES, REL_TOL, run_case, run_topk_case

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
    want = reference.moe_layer(x.cpu(), rw.cpu(), wgu.cpu(), wd.cpu(), K, topk_ids=ids.cpu(),
                               topk_weights=w.cpu())
    for path in ("triton", "ops"):
        got = torch_argon.moe_layer(x, rw, wgu, wd, K, tile_m=tile_m, path=path).cpu()
        err = float((got.double() - want.double()).norm() / want.double().norm())
        assert err < REL_TOL[torch.bfloat16], (path, err)


@needs_cuda
def test_layer_triton_path_refusals():
    x, rw, wgu, wd = _layer_problem()
    with pytest.raises(ValueError, match="power of two >= 16"):
        torch_argon.moe_layer(x, rw, wgu, wd, 2, tile_m=8, path="triton")
    with pytest.raises(ValueError, match="fp16 / bf16"):
        torch_argon.moe_layer(x.float(), rw.float(), wgu.float(), wd.float(), 2, path="triton")
    # "auto" falls back to the ops path where Triton cannot run
    torch_argon.moe_layer(x.float(), rw.float(), wgu.float(), wd.float(), 2)


@needs_cuda
def test_layer_triton_compiles_fullgraph_cuda():
    x, rw, wgu, wd = _layer_problem(T=40)
    torch._dynamo.reset()
    compiled = torch.compile(torch_argon.moe_layer, fullgraph=True)
    eager = torch_argon.moe_layer(x, rw, wgu, wd, 2, renormalize=True, path="triton")
    got = compiled(x, rw, wgu, wd, 2, renormalize=True, path="triton")
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
    if not backends.get("cpu").available:
        pytest.skip("the CPU backend is not built")
    run = subprocess.run([sys.executable, os.path.join(HERE, "triton_interpreter_run.py")],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", list(CASES) + ["topk"])
def test_triton_interpreter_cpu(interpreter_results, case):
    assert interpreter_results[case] == []
