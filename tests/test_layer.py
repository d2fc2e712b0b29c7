"""The whole layer (route, plan, gather, gate/up, SwiGLU, down, combine) on each backend
against the float64 per-expert reference. Relative Frobenius error per dtype: fp32 1e-5,
fp16 2e-3, bf16 1.5e-2 (bf16 rounds the gathered rows, h and y once each)."""
import pytest
import torch

import torch_argon
from torch_argon import reference

REL_TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.5e-2}


@pytest.mark.parametrize("dtype", list(REL_TOL))
@pytest.mark.parametrize("T,H,E,I,K,renorm", [(1, 32, 4, 16, 1, False), (64, 64, 16, 32, 4, True),
                                              (150, 48, 32, 24, 8, False)])
def test_layer_matches_reference(backend, dtype, T, H, E, I, K, renorm):
    torch.manual_seed(T + E)
    d = backend.device
    x = torch.randn(T, H).to(dtype)
    rw = torch.randn(E, H).to(dtype)
    wgu = (torch.randn(E, 2 * I, H) / H ** 0.5).to(dtype)
    wd = (torch.randn(E, H, I) / I ** 0.5).to(dtype)
    residual = torch.randn(T, H).to(dtype)
    ids, w = torch_argon.route(x, rw, K, renormalize=renorm)
    want = reference.moe_layer(x, rw, (wgu, wd), K, residual=residual, topk_ids=ids, topk_weights=w)
    got = torch_argon.moe_layer(x.to(d), rw.to(d), (wgu.to(d), wd.to(d)), K, renormalize=renorm,
                                residual=residual.to(d), ops=backend.ops).cpu()
    err = float((got.double() - want.double()).norm() / want.double().norm())
    assert err < REL_TOL[dtype], err


@pytest.mark.parametrize("mode", ["inference_mode", "no_grad"])
def test_layer_under_inference_mode(backend, mode):
    """Serving code runs under torch.inference_mode(): every op must accept inference tensors
    (kernels that call torch ops on worker threads must not trip over them)."""
    torch.manual_seed(1)
    d = backend.device
    T, H, E, I, K = 300, 64, 16, 32, 4
    x, rw = torch.randn(T, H), torch.randn(E, H)
    wgu, wd = torch.randn(E, 2 * I, H) / H ** 0.5, torch.randn(E, H, I) / I ** 0.5
    ids, w = torch_argon.route(x, rw, K)
    want = reference.moe_layer(x, rw, (wgu, wd), K, topk_ids=ids, topk_weights=w)
    ctx = torch.inference_mode() if mode == "inference_mode" else torch.no_grad()
    with ctx:
        got = torch_argon.moe_layer(x.to(d), rw.to(d), (wgu.to(d), wd.to(d)), K,
                                    ops=backend.ops).cpu()
    err = float((got.double() - want.double()).norm() / want.double().norm())
    assert err < REL_TOL[torch.float32], err
