"""cuda_quantized_tiled (torch_argon/experts/cuda_quantized_tiled.py: the plan and the combine
around the tile-decode GEMM) against the float64 layer through the host emulation on the CPU
(and on CUDA), and how the layer chooses it: by name always, automatically only from the
measured rows of experts/quantized_crossover.py (none yet: it declines, saying why)."""
import pytest
import torch

from gpuq_cases import NAMES
from test_cuda_quantized import (call_of, layer_error, quantized_experts,
                                 on_cuda)  # noqa: F401 (a fixture)
from torch_argon import reference

import torch_argon
from torch_argon.experts import ExpertsCall, quantized_crossover, registry
from torch_argon.quant import FORMATS
from torch_argon.testing import backends  # noqa: F401  (loads torch_argon._C_test: the emulation)

TILED = registry.BY_NAME["cuda_quantized_tiled"]
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device"))]
# each weight rounded once to the activations' dtype (the dequant path's numerics), against the
# float64 layer on the exact weights
TOL = {torch.bfloat16: 1.5e-2, torch.float16: 4e-3}


def tiled_case(name, device, dtype=torch.bfloat16, *, T=40, split=None, down=None, **kwargs):
    """cuda_quantized_tiled's experts path against reference.moe_layer: the relative error
    (one 256-value block per row for the K- and IQ-quants: the emulation runs every lane)."""
    dims = (256, 256) if FORMATS[name].block_elems == 256 or split or down else None
    return layer_error("cuda_quantized_tiled", name, device, dtype, T=T, split=split, down=down,
                       dims=dims, **kwargs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["Q4_K", "Q8_0", "IQ4_XS", "IQ2_XS", "Q6_K", "Q4_0"])
def test_layer_path(device, name):
    assert tiled_case(name, device, seed=NAMES.index(name)) < TOL[torch.bfloat16]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kwargs", [
    dict(name="Q4_K", dtype=torch.float16, tm=128, T=70),
    dict(name="Q5_K", activation="gelu"),
    dict(name="Q4_K", split="IQ4_XS", down="Q6_K", activation="gelu_tanh"),
    dict(name="Q3_K", dist="neg_all"),
    dict(name="Q2_K", dist="one_expert", E=4),
    dict(name="MXFP4", dist="zipf", E=4, K=3),
], ids=lambda k: "-".join(f"{v}" for v in k.values()).replace("torch.", ""))
def test_layer_path_cases(device, kwargs):
    kwargs = dict(kwargs)
    name, dtype = kwargs.pop("name"), kwargs.pop("dtype", torch.bfloat16)
    assert tiled_case(name, device, dtype, **kwargs) < TOL[dtype]


def test_layer_path_no_tokens():
    """T = 0: an empty output (the flow's plan has no rows; nothing is launched)."""
    experts = quantized_experts("Q4_K", E=3)
    x = torch.randn(0, experts.hidden, dtype=torch.bfloat16)
    ids, w = torch.empty(0, 2, dtype=torch.long), torch.empty(0, 2)
    got = torch_argon.experts.run_implementation("cuda_quantized_tiled", x, ids, w, experts)
    assert got.shape == (0, experts.hidden)


def test_not_chosen_automatically_until_measured(on_cuda):
    """No measured rows: path="auto" and path="triton" decline it with the reason and choose as
    before (cuda_quantized at small T, cuda_quantized_dequant at large T); its name runs it."""
    assert quantized_crossover.TILED_FROM_ROWS == {}
    experts = quantized_experts("Q4_K", E=128)
    for T, before in ((128, "cuda_quantized"), (16384, "cuda_quantized_dequant")):
        call = call_of(experts, T=T, K=8, dtype=torch.bfloat16, cuda=True)
        assert TILED.supports(call) == ""
        for path in ("auto", "triton"):
            why = dict(registry.explain(call, path))["cuda_quantized_tiled"]
            assert "no measured win for Q4_K" in why  # measured on the H200, and lost
            assert registry.choose(call, path).name == before
        assert registry.choose(call, "cuda_quantized_tiled") is TILED
    # a format no GPU run has measured says so
    unmeasured = call_of(quantized_experts("Q6_K", E=128), T=16384, K=8, dtype=torch.bfloat16,
                         cuda=True)
    assert "not yet measured on a GPU for Q6_K" in TILED.auto_refusal(unmeasured)


def test_chosen_from_its_measured_rows(on_cuda, monkeypatch):
    """With a measured row for a format, the automatic choice takes it from that many rows per
    expert on (before the dequant path, after gpuq's GEMMs where those run)."""
    monkeypatch.setitem(quantized_crossover.TILED_FROM_ROWS, "Q4_K", 64)
    experts = quantized_experts("Q4_K", E=128)
    small = call_of(experts, T=512, K=8, dtype=torch.bfloat16, cuda=True)  # 32 rows
    large = call_of(experts, T=2048, K=8, dtype=torch.bfloat16, cuda=True)  # 128 rows
    assert "32 rows per expert: it runs from 64" in dict(registry.explain(small))[
        "cuda_quantized_tiled"]
    assert registry.choose(large).name == "cuda_quantized_tiled"
    unknown = call_of(experts, T=2048, K=8, dtype=torch.bfloat16, cuda=True, n_entries=None)
    assert "unknown count" in TILED.auto_refusal(unknown)
    # a part whose format has no measured row: not chosen
    mixed = quantized_experts("Q4_K", E=128, down="Q6_K")
    assert "not yet measured on a GPU for Q6_K" in TILED.auto_refusal(
        call_of(mixed, T=2048, K=8, dtype=torch.bfloat16, cuda=True))


def test_tile_m_rule_and_refusals(on_cuda):
    experts = quantized_experts("Q4_K", E=4)
    call = call_of(experts, T=8, K=2, dtype=torch.bfloat16, cuda=True)
    assert TILED.default_tile_m(call, 8 * 2) == 64
    assert TILED.default_tile_m(call, 4 * 128) == 128
    odd = ExpertsCall.of(call.x, experts, ops=torch_argon.argon_ops, tile_m=32)
    assert "tile_m=32: its GEMM takes plan tiles of 64 or 128 rows" in TILED.supports(odd)
    assert "fp16 / bf16 activations" in TILED.supports(
        call_of(experts, dtype=torch.float32, cuda=True))
    assert "activation_quant='q8'" in registry.refusal(
        TILED, call_of(experts, dtype=torch.bfloat16, cuda=True, activation_quant="q8"))
    assert "run on CUDA tensors" in TILED.supports(call_of(experts))
    other_ops = ExpertsCall.of(call.x, experts, ops=reference)
    assert "OpSet" in TILED.supports(other_ops)
