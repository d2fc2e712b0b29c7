"""The CUDA quantized experts implementations around the gpuq kernels: cuda_quantized_dequant
(the experts decoded once per call into a workspace, then the dense Triton GEMMs) here, its
workspace and its choice by rows per expert. Its numbers against the float64 layer run through
the Triton interpreter (tests/quant_triton_cases.py: dequant_path_*, run by
tests/test_quant_triton.py) and on CUDA below."""
import pytest
import torch

import torch_argon
from torch_argon.experts import ExpertsCall, cuda_quantized_dequant, registry
from torch_argon.experts.quantized_crossover import (DEFAULT_DEQUANT_FROM_ROWS, DEQUANT_FROM_ROWS,
                                                     dequant_from_rows)
from torch_argon.quant import QuantizedExperts, QuantizedWeight, random_quantized
from torch_argon.testing import backends  # noqa: F401  (loads torch_argon._C_test: the emulation)

DEQUANT = registry.BY_NAME["cuda_quantized_dequant"]


def quantized_experts(name="Q4_K", E=4, H=256, I=256, seed=0, split=None, down=None):
    g = torch.Generator().manual_seed(seed)
    gu = random_quantized(name, 2 * I, H, leading=(E,), std=0.05, generator=g)
    dn = QuantizedWeight(random_quantized(down or name, H, I, leading=(E,), std=0.05,
                                          generator=g), down or name, I)
    if split:
        up = random_quantized(split, I, H, leading=(E,), std=0.05, generator=g)
        return QuantizedExperts(gate=QuantizedWeight(gu[:, :I].contiguous(), name, H),
                                up=QuantizedWeight(up, split, H), down=dn)
    return QuantizedExperts(gate_up=QuantizedWeight(gu, name, H), down=dn)


def call_of(experts, T=8, K=2, dtype=torch.float16, requires_grad=False, n_entries="TK"):
    x = torch.randn(T, experts.hidden, dtype=dtype, requires_grad=requires_grad)
    return ExpertsCall.of(x, experts, ops=torch_argon.argon_ops, activation_quant="none",
                          n_entries=T * K if n_entries == "TK" else n_entries)


@pytest.fixture
def on_cuda(monkeypatch):
    """supports() past its device checks (this machine has no GPU): what it decides from the
    call's shapes, dtypes and weights."""
    from torch_argon.experts import cuda_quantized_dequant as module
    monkeypatch.setattr(module, "triton_refusal", lambda call: "")
    monkeypatch.setattr(module.gpuq, "refusal", lambda device: "")


# ---- the workspace ---------------------------------------------------------------------------

@pytest.fixture
def clean_workspace():
    torch_argon.experts.clear_cuda_dequant_workspace()
    yield cuda_quantized_dequant.WORKSPACE
    torch_argon.experts.clear_cuda_dequant_workspace()


def test_workspace_kept_across_calls_and_grown(clean_workspace):
    big, small = quantized_experts(E=4), quantized_experts(E=2, seed=1)
    first = DEQUANT.workspace(call_of(big), rows=64)
    assert first["gate_up"].shape == (4, 512, 256) and first["down"].shape == (4, 256, 256)
    again = DEQUANT.workspace(call_of(big), rows=16)
    assert all(again[r].data_ptr() == first[r].data_ptr() for r in first)
    inner = DEQUANT.workspace(call_of(small), rows=8)  # a smaller layer: a view of the same
    assert inner["gate_up"].shape == (2, 512, 256)
    assert inner["gate_up"].data_ptr() == first["gate_up"].data_ptr()
    bigger = DEQUANT.workspace(call_of(quantized_experts(E=6)), rows=8)
    assert bigger["down"].shape == (6, 256, 256)
    assert len(clean_workspace.buffers) == 2  # grown in place of the old ones, not beside them
    other_dtype = DEQUANT.workspace(call_of(big, dtype=torch.bfloat16), rows=8)
    assert other_dtype["down"].dtype == torch.bfloat16 and len(clean_workspace.buffers) == 4
    torch_argon.experts.clear_cuda_dequant_workspace()
    assert not clean_workspace.buffers


def test_workspace_fresh_where_autograd_records(clean_workspace):
    experts = quantized_experts()
    fresh = DEQUANT.workspace(call_of(experts, requires_grad=True), rows=8)
    assert not clean_workspace.buffers
    with torch.no_grad():
        kept = DEQUANT.workspace(call_of(experts, requires_grad=True), rows=8)
    assert len(clean_workspace.buffers) == 2
    assert kept["down"].data_ptr() != fresh["down"].data_ptr()


# ---- the choice ------------------------------------------------------------------------------

def test_crossover_table():
    assert dequant_from_rows(quantized_experts("Q4_K")) == DEQUANT_FROM_ROWS["Q4_K"]
    assert dequant_from_rows(quantized_experts("Q5_K")) == DEFAULT_DEQUANT_FROM_ROWS
    # parts of several formats: the earliest switch
    mixed = quantized_experts("Q4_K", split="IQ4_XS", down="IQ2_XS")
    assert dequant_from_rows(mixed) == DEQUANT_FROM_ROWS["IQ2_XS"]


@pytest.mark.parametrize("T,K,E,runs", [(8, 2, 4, False), (2048, 8, 128, True),
                                        (128, 8, 128, False), (2048, 10, 512, False),
                                        (8192, 10, 512, True)])
def test_dequant_path_by_rows_per_expert(on_cuda, T, K, E, runs):
    experts = quantized_experts(E=E)
    why = DEQUANT.supports(call_of(experts, T=T, K=K))
    assert (why == "") == runs, why
    if not runs:
        assert "rows per expert" in why and "quantized_crossover" in why


def test_dequant_path_unknown_rows_runs(on_cuda):
    assert DEQUANT.supports(call_of(quantized_experts(), n_entries=None)) == ""


def test_dequant_path_declines(on_cuda):
    big = dict(T=4096, K=8)
    assert "fp16 / bf16 activations" in DEQUANT.supports(
        call_of(quantized_experts(), dtype=torch.float32, **big))
    f16 = QuantizedExperts(gate_up=QuantizedWeight(torch.zeros(4, 512, 512, dtype=torch.uint8),
                                                   "F16", 256),
                           down=quantized_experts().down)
    assert "gate_up stored as plain floats" in DEQUANT.supports(call_of(f16, **big))
    call = ExpertsCall.of(torch.randn(8, 256, dtype=torch.float16), quantized_experts(),
                          ops=torch_argon.argon_ops, activation_quant="q8", n_entries=1 << 20)
    assert "activation_quant='q8'" in registry.refusal(DEQUANT, call)


def test_explain_on_the_cpu_says_cuda():
    x = torch.randn(8, 256, dtype=torch.float16)
    reasons = dict(torch_argon.experts.explain(x, quantized_experts(), n_entries=16))
    assert "CUDA" in reasons["cuda_quantized_dequant"]


# ---- on CUDA ---------------------------------------------------------------------------------

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name,split,down", [("Q4_K", None, None), ("IQ2_XS", None, None),
                                             ("Q4_K", "IQ4_XS", "Q6_K")])
def test_dequant_path_cuda(dtype, name, split, down):
    from quant_triton_cases import QREL_TOL
    from triton_cases import rel_err
    from routing_cases import make_ids, make_weights
    from torch_argon import reference
    experts = quantized_experts(name, E=8, split=split, down=down).to("cuda")
    T, K = 300, 4
    x = (torch.randn(T, experts.hidden) * 0.5).to(dtype)
    ids, w = make_ids(T, K, 8, "neg_some", seed=1), make_weights(T, K, seed=1)
    want = reference.moe_layer(x, None, experts.to("cpu"), K, topk_ids=ids, topk_weights=w)
    for _ in range(2):  # the second call reuses the workspace
        got = torch_argon.experts.run_implementation(
            "cuda_quantized_dequant", x.cuda(), ids.cuda(), w.cuda(), experts)
        assert rel_err(got.cpu(), want) < QREL_TOL[dtype]
