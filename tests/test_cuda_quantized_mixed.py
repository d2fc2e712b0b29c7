"""The mixed-input Hopper experts (experts/cuda_quantized_mixed.py) and their GEMM op
(argon::hopper_mixed_mm, csrc/hopper/hopper_mixed_gemm.cuh: CUTLASS 4.2's sm90 mixed-input
mainloop with our per-32-group conversion of 4- or 8-bit codes, over the padded plan).

On every machine: where the registry puts it and why it declines (on the CPU; neither GEMM in
a format it converts, plain-float parts, fp16, tile_m other than its token tiles (128 or 64;
128 only for a hybrid); under path="auto" / "triton" below the
rows per expert of experts/quantized_crossover.py MIXED_FROM_ROWS for its split of GEMMs, at an
unknown count and for a split without a row; gpuq's GEMMs declining for it from there), the op's
fakes and their argument errors, the repack cache (tests/test_derived_cache.py: the cache itself), the
decoded GEMMs' workspace, the implementation's stages with the CUDA ops (the mixed-input GEMM,
and the padded dense GEMM of a decoded GEMM: Q4_K gate/up with Q6_K down, Q6_K gate/up with
Q4_K down) emulated in torch. On a GPU of compute capability 9.0 with the Hopper units built
(234 passed on an H100, 2026-12-06, with the codes' earlier row-major layout; not yet run with
the reordered blocks): the GEMM of every format on every used tile against
float64 on the kernel's own weights (mixed_dequantize: tight) and on the exact dequant (the
scaled tolerance), -1 ids, experts with 0 rows, T = 0, garbage-filled outputs (tiles past the
used count untouched), the whole experts path against the layer reference (one format, two
formats of one width, the hybrids), CUDA graph replay."""
import dataclasses
import itertools

import pytest
import torch

import torch_argon
from gpuq_cases import SCALED_TOL
from hopper_cases import assert_bits_equal, assert_replays_like_eager, needs_kernel
from routing_cases import garbage_like, make_ids, make_weights
from torch_argon import reference
from torch_argon.experts import (ExpertsCall, cuda_hopper_padded, cuda_quantized_dequant,
                                  cuda_quantized_mixed, quantized_crossover, registry)
from torch_argon.hopper import configs, mixed_ops
from torch_argon.testing import backends  # noqa: F401  (torch_argon._C_test: gpuq's CPU emulation)
from torch_argon.quant import (QuantizedExperts, QuantizedWeight, dequantize_reference,
                               random_quantized)
from torch_argon.quant import mixed_repack as mr

MIXED = registry.BY_NAME["cuda_quantized_mixed"]
TILE = configs.PADDED_TILE_M


def mixed_refusal():
    return mixed_ops.refusal("cuda") if torch.cuda.is_available() else "no CUDA device"


needs_mixed = needs_kernel(mixed_refusal())


def q_experts(E=4, H=256, I=256, name="Q4_K", down_name=None, device="cpu", seed=0,
              fused=True, up_name=None):
    """gate/up in `name` (gate and up as two stacks where not fused, up in up_name where given),
    down in down_name (default `name`)."""
    g = torch.Generator().manual_seed(seed)
    gu = random_quantized(name, 2 * I, H, leading=(E,), std=0.05, generator=g)
    dn = random_quantized(down_name or name, H, I, leading=(E,), std=0.05, generator=g)
    down = QuantizedWeight(dn.to(device), down_name or name, I)
    if fused:
        return QuantizedExperts(down=down, gate_up=QuantizedWeight(gu.to(device), name, H))
    up = (gu[:, I:] if up_name is None else
          random_quantized(up_name, I, H, leading=(E,), std=0.05, generator=g))
    return QuantizedExperts(down=down, gate=QuantizedWeight(gu[:, :I].to(device), name, H),
                            up=QuantizedWeight(up.contiguous().to(device), up_name or name, H))


def cuda_call(experts, T=64, K=2, dtype=torch.bfloat16, tile_m=None):
    """A call whose x stands for a CUDA tensor (what supports() reads; no GPU needed)."""
    from types import SimpleNamespace
    x = SimpleNamespace(device=torch.device("cuda"), dtype=dtype, shape=(T, experts.hidden),
                        requires_grad=False)
    return ExpertsCall.of(x, experts, ops=torch_argon.argon_ops, n_entries=T * K, tile_m=tile_m,
                          activation_quant="none")


@pytest.fixture
def on_hopper(monkeypatch):
    """supports() past its device checks (the mixed-input GEMM's, gpuq's for a decoded GEMM)."""
    monkeypatch.setattr(cuda_quantized_mixed.mixed_ops, "refusal", lambda device: "")
    monkeypatch.setattr(cuda_quantized_mixed.gpuq, "refusal", lambda device: "")


# ---- where it sits and why it declines (every machine) -----------------------------------------

def test_registry_lists_it_after_gpuq_and_before_the_dequant_path():
    names = [impl.name for impl in registry.IMPLEMENTATIONS]
    assert (names.index("cuda_quantized") < names.index("cuda_quantized_mixed")
            == names.index("cuda_quantized_dequant") - 1)
    assert (MIXED.path, MIXED.kind, MIXED.fuses_gather) == ("triton", "quantized", False)
    assert "cuda_quantized_mixed" in registry.PATHS


def test_on_the_cpu_it_says_cuda():
    x = torch.randn(8, 256, dtype=torch.bfloat16)
    why = dict(torch_argon.experts.explain(x, q_experts(), activation_quant="none"))
    assert why["cuda_quantized_mixed"] == "the Hopper GEMMs run on CUDA tensors, not cpu"


@pytest.mark.parametrize("kwargs,formats", [
    (dict(name="Q6_K"), "gate_up Q6_K, down Q6_K"),
    (dict(name="IQ2_XS", down_name="Q3_K"), "gate_up IQ2_XS, down Q3_K"),
    # gate Q4_K, up Q8_0: two code widths, not one stack; down 16-value groups
    (dict(fused=False, up_name="Q8_0", down_name="Q6_K"), "gate Q4_K, up Q8_0, down Q6_K"),
])
def test_it_declines_where_neither_gemm_is_in_its_formats(on_hopper, kwargs, formats):
    assert MIXED.supports(cuda_call(q_experts(**kwargs))) == (
        f"neither GEMM's weights are in a format it converts ({formats}): the mixed-input GEMM "
        "takes Q4_K, Q4_0, Q5_K, Q5_0, Q8_0, IQ4_NL, IQ4_XS (gate/up, with gate and up of one "
        "code width where they are two parts, or down at least, the other decoded); "
        "cuda_quantized_dequant decodes both")


@pytest.mark.parametrize("kwargs,mixed,split", [
    (dict(), ("gate_up", "down"), ("Q4_K", "Q4_K")),
    (dict(fused=False), ("gate_up", "down"), ("Q4_K", "Q4_K")),
    (dict(down_name="Q6_K"), ("gate_up",), ("Q4_K", "decoded")),  # Q4_K_M's usual layer
    (dict(down_name="Q5_K"), ("gate_up", "down"), ("Q4_K", "Q5_K")),
    (dict(name="IQ4_XS", down_name="Q8_0"), ("gate_up", "down"), ("IQ4_XS", "Q8_0")),
    (dict(name="Q6_K", down_name="Q4_K"), ("down",), ("decoded", "Q4_K")),
    (dict(fused=False, up_name="Q4_0"), ("gate_up", "down"), ("Q4_0+Q4_K", "Q4_K")),
    (dict(fused=False, up_name="Q8_0"), ("down",), ("decoded", "Q4_K")),  # two widths
])
def test_it_takes_either_gemm_in_its_formats_the_other_decoded(on_hopper, kwargs, mixed, split):
    q = q_experts(**kwargs)
    assert cuda_quantized_mixed.mixed_gemms(q) == mixed
    assert MIXED.supports(cuda_call(q)) == ""
    assert MIXED.gemm_split(q) == split


def test_it_declines_a_k_not_a_multiple_of_64(on_hopper):
    """Q8_0 rows of 96 values: three 32-value blocks, one and a half of the GEMM's K tiles."""
    q = q_experts(name="Q8_0", H=96, I=64)
    assert MIXED.supports(cuda_call(q)) == (
        "gate_up is [128, 96]: the mixed-input GEMM needs K a multiple of 64 and N of 16")


def test_it_declines_plain_float_parts_naming_the_formats(on_hopper):
    g = torch.Generator().manual_seed(0)
    q = q_experts()
    for fmt in ("F16", "BF16"):
        down = QuantizedWeight(random_quantized(fmt, 256, 256, leading=(4,), generator=g), fmt,
                               256)
        hybrid = QuantizedExperts(down=down, gate_up=q.gate_up)
        assert MIXED.supports(cuda_call(hybrid)) == (
            f"down stored as plain floats (gate_up Q4_K, down {fmt}): it runs GGUF blocks and "
            "decodes the formats it cannot convert only")


def test_a_decoded_gemm_needs_gpuq(on_hopper, monkeypatch):
    monkeypatch.setattr(cuda_quantized_mixed.gpuq, "refusal", lambda device: "no gpuq here")
    assert MIXED.supports(cuda_call(q_experts())) == ""  # nothing decoded
    assert MIXED.supports(cuda_call(q_experts(down_name="Q6_K"))) == (
        "no gpuq here: the other GEMM's weights (gate_up Q4_K, down Q6_K) are decoded by gpuq")


# ---- the automatic choice: experts/quantized_crossover.py MIXED_FROM_ROWS ----------------------

GPUQ = registry.BY_NAME["cuda_quantized"]
DEQUANT = registry.BY_NAME["cuda_quantized_dequant"]

# (the experts' formats, their split: how gate/up and down run, the split in the reasons' words)
SPLITS = [
    (dict(), ("Q4_K", "Q4_K"), "gate_up Q4_K, down Q4_K"),
    (dict(fused=False), ("Q4_K", "Q4_K"), "gate_up Q4_K, down Q4_K"),
    (dict(down_name="Q6_K"), ("Q4_K", "decoded"), "gate_up Q4_K, down decoded"),  # Q4_K_M's
]


@pytest.fixture
def on_h100(on_hopper, monkeypatch):
    """Every CUDA quantized path past its device checks (the dequant path's Triton GEMMs too),
    as on the H100 the rows were measured on, with the kernel's GPU tests passed."""
    monkeypatch.setattr(cuda_quantized_dequant, "triton_refusal", lambda call: "")
    monkeypatch.setattr(quantized_crossover, "MIXED_KERNEL_PASSED_GPU_TESTS", True)


def test_auto_passes_it_by_until_its_gpu_tests_pass(on_hopper, monkeypatch):
    """With MIXED_KERNEL_PASSED_GPU_TESTS False (the reordered codes built, not yet run on a
    GPU), the automatic choice passes it by at any rows and gpuq's GEMMs keep the call; by
    name it runs."""
    monkeypatch.setattr(cuda_quantized_dequant, "triton_refusal", lambda call: "")
    monkeypatch.setattr(quantized_crossover, "MIXED_KERNEL_PASSED_GPU_TESTS", False)
    call = rows_call(q_experts(), 32)
    assert MIXED.supports(call) == ""
    assert MIXED.auto_refusal(call) == (
        "its kernel as built (the reordered codes) has not yet passed its GPU tests "
        "(experts/quantized_crossover.py MIXED_KERNEL_PASSED_GPU_TESTS): "
        "path='cuda_quantized_mixed' runs it")
    assert GPUQ.supports(call) == "" and registry.choose(call) is GPUQ
    assert registry.choose(call, "cuda_quantized_mixed") is MIXED


def rows_call(experts, rows, **kwargs):
    """A CUDA call of `rows` mean rows per expert (q_experts' 4 experts, top-2)."""
    return cuda_call(experts, T=2 * rows, K=2, **kwargs)


def test_the_measured_rows():
    """bench/results/h100_quant_mixed.json: all Q4_K between 20 rows per expert (gpuq 0.93x
    its time) and 32 (it 0.75x gpuq's); down decoded between 40 (level) and 64 (0.76x);
    h100_quant_mixed_formats.json: the other formats (experts/quantized_crossover.py)."""
    assert quantized_crossover.MIXED_FROM_ROWS == {
        ("Q4_K", "Q4_K"): 24, ("Q4_K", "decoded"): 48, ("IQ4_XS", "IQ4_XS"): 24,
        ("Q4_0", "Q4_0"): 24, ("IQ4_NL", "IQ4_NL"): 24, ("Q5_K", "Q5_K"): 24,
        ("Q5_0", "Q5_0"): 16, ("Q8_0", "Q8_0"): 10, ("Q5_K", "decoded"): 40}


@pytest.mark.parametrize("kwargs,split,words", SPLITS)
def test_auto_takes_it_from_its_split_rows_per_expert(on_h100, kwargs, split, words):
    q = q_experts(**kwargs)
    start = quantized_crossover.MIXED_FROM_ROWS[split]
    below, at = rows_call(q, start - 1), rows_call(q, start)
    assert MIXED.supports(below) == MIXED.supports(at) == ""
    for path in ("auto", "triton"):
        assert dict(registry.explain(below, path))["cuda_quantized_mixed"] == (
            f"{start - 1} rows per expert: with {words} it runs from {start}, where it measured "
            "faster than gpuq's GEMMs (experts/quantized_crossover.py)")
        assert registry.choose(below, path) is GPUQ
        assert dict(registry.explain(at, path))["cuda_quantized_mixed"] == ""
        assert registry.choose(at, path) is MIXED
    assert registry.choose(below, "cuda_quantized_mixed") is MIXED  # its name: at any rows


@pytest.mark.parametrize("kwargs,split,words", SPLITS)
def test_gpuq_declines_for_it_from_its_rows(on_h100, kwargs, split, words):
    q = q_experts(**kwargs)
    start = quantized_crossover.MIXED_FROM_ROWS[split]
    assert start < quantized_crossover.dequant_from_rows(q)  # so it is not the dequant path's
    assert GPUQ.supports(rows_call(q, start - 1)) == ""
    assert GPUQ.supports(rows_call(q, start)) == (
        f"{start} rows per expert: from {start}, cuda_quantized_mixed is faster "
        "(experts/quantized_crossover.py)")


def test_a_decoded_gemm_needs_more_rows(on_h100):
    """At 32 rows per expert (E128 T=512: 0.75x gpuq's time all Q4_K, 1.19x with Q6_K down)
    the all-Q4_K layer takes it and the one with a decoded down does not, until 48."""
    hybrid = q_experts(down_name="Q6_K")
    assert registry.choose(rows_call(q_experts(), 32)) is MIXED
    assert registry.choose(rows_call(hybrid, 32)) is GPUQ
    assert "it runs from 48" in MIXED.auto_refusal(rows_call(hybrid, 32))
    assert registry.choose(rows_call(hybrid, 48)) is MIXED


def test_unknown_rows_per_expert_leave_the_call_to_gpuq(on_h100):
    call = dataclasses.replace(rows_call(q_experts(), 128), n_entries=None)
    assert MIXED.supports(call) == ""
    assert MIXED.auto_refusal(call) == (
        "an unknown count of rows per expert: with gate_up Q4_K, down Q4_K it runs from 24, "
        "where it measured faster than gpuq's GEMMs (experts/quantized_crossover.py)")
    assert GPUQ.supports(call) == "" and registry.choose(call) is GPUQ


def test_gpuq_keeps_what_it_cannot_run(on_h100, monkeypatch):
    """From its rows (32 here; the dequant path's 55 not reached) gpuq's GEMMs still take the
    calls the mixed GEMM declines: fp16, another tile_m, q8, a GPU without the mixed GEMM."""
    q = q_experts()
    q8 = dataclasses.replace(rows_call(q, 32), activation_quant="q8")
    for call in (rows_call(q, 32, dtype=torch.float16), rows_call(q, 32, tile_m=32), q8):
        assert registry.refusal(MIXED, call)  # its supports() or its activation_quant
        assert GPUQ.supports(call) == "" and registry.choose(call) is GPUQ
    monkeypatch.setattr(cuda_quantized_mixed.mixed_ops, "refusal", lambda device: "not sm_90")
    assert GPUQ.supports(rows_call(q, 32)) == "" and registry.choose(rows_call(q, 32)) is GPUQ


def test_it_comes_before_the_dequant_path(on_h100):
    """All Q4_K from the dequant path's rows: both run the call, this one is taken."""
    q = q_experts()
    call = rows_call(q, 128)
    assert registry.refusal(DEQUANT, call) == "" and registry.refusal(MIXED, call) == ""
    assert registry.choose(call) is MIXED
    assert "cuda_quantized_mixed is faster" in GPUQ.supports(call)


@pytest.mark.parametrize("name", ["Q6_K", "IQ2_XS"])
def test_other_formats_still_take_the_dequant_path(on_h100, name):
    call = rows_call(q_experts(name=name), 128)
    assert MIXED.supports(call).startswith("neither GEMM's weights are in a format it converts")
    assert registry.choose(call) is DEQUANT
    assert "cuda_quantized_dequant is faster" in GPUQ.supports(call)


@pytest.mark.parametrize("name", ["Q8_0", "IQ4_XS", "Q4_0", "IQ4_NL", "Q5_K", "Q5_0"])
def test_the_measured_formats_take_it_from_their_rows(on_h100, name):
    q = q_experts(name=name)
    start = quantized_crossover.MIXED_FROM_ROWS[(name, name)]
    assert registry.choose(rows_call(q, start)) is MIXED
    assert registry.choose(rows_call(q, start - 1)) is GPUQ
    assert registry.choose(rows_call(q, 128)) is MIXED  # before the dequant path


@pytest.mark.parametrize("kwargs,split,start", [
    (dict(name="IQ4_XS", down_name="Q8_0"), ("IQ4_XS", "Q8_0"), 24),       # rows 24 and 10
    (dict(name="Q5_0", down_name="Q8_0"), ("Q5_0", "Q8_0"), 16),           # rows 16 and 10
    (dict(fused=False, up_name="Q4_0"), ("Q4_0+Q4_K", "Q4_K"), 24),
])
def test_two_formats_on_the_mixed_gemm_take_the_larger_row(on_h100, kwargs, split, start):
    """No measured row for the split: the largest of its formats' one-format rows (the mixed
    path's time hardly depends on the format)."""
    q = q_experts(**kwargs)
    assert MIXED.gemm_split(q) == split and split not in quantized_crossover.MIXED_FROM_ROWS
    assert quantized_crossover.mixed_from_rows(*split) == start
    assert registry.choose(rows_call(q, start - 1)) is GPUQ
    assert registry.choose(rows_call(q, start)) is MIXED


def test_a_split_without_a_row_is_declined_until_one_is_added(on_h100, monkeypatch):
    """gate/up decoded, down Q4_K: not measured, the dequant path runs it (gate/up's Q6_K from
    54 rows); one row of MIXED_FROM_ROWS makes the automatic choice take it from there."""
    q = q_experts(name="Q6_K", down_name="Q4_K")
    call = rows_call(q, 128)
    assert MIXED.auto_refusal(call) == (
        "not measured with gate_up decoded, down Q4_K (experts/quantized_crossover.py "
        "MIXED_FROM_ROWS has no row for it): path='cuda_quantized_mixed' runs it")
    assert registry.choose(call) is DEQUANT
    assert registry.choose(call, "cuda_quantized_mixed") is MIXED
    monkeypatch.setitem(quantized_crossover.MIXED_FROM_ROWS, ("decoded", "Q4_K"), 100)
    assert registry.choose(call) is MIXED
    assert "from 100, cuda_quantized_mixed is faster" in GPUQ.supports(call)
    assert registry.choose(rows_call(q, 99)) is DEQUANT


def cpu_call(experts, T=8, requires_grad=False):
    x = torch.randn(T, experts.hidden, dtype=torch.bfloat16, requires_grad=requires_grad)
    return ExpertsCall.of(x, experts, ops=torch_argon.argon_ops, n_entries=2 * T)


@pytest.fixture
def shared_workspace():
    torch_argon.experts.clear_cuda_dequant_workspace()
    yield cuda_quantized_dequant.WORKSPACE
    torch_argon.experts.clear_cuda_dequant_workspace()


def test_workspace_holds_the_decoded_gemms_only(shared_workspace):
    E, H, I = 4, 256, 256
    assert MIXED.workspace(cpu_call(q_experts(E=E)), 128) == {}
    ws = MIXED.workspace(cpu_call(q_experts(E=E, down_name="Q6_K")), 128)
    assert list(ws) == ["down"] and ws["down"].shape == (E, H, I)
    ws = MIXED.workspace(cpu_call(q_experts(E=E, name="Q6_K", down_name="Q4_K")), 128)
    assert list(ws) == ["gate_up"] and ws["gate_up"].shape == (E, 2 * I, H)
    assert ws["gate_up"].dtype == torch.bfloat16
    # cuda_quantized_dequant's shared buffer, the same at the next call
    again = MIXED.workspace(cpu_call(q_experts(E=E, name="Q6_K", down_name="Q4_K")), 128)
    assert again["gate_up"].data_ptr() == ws["gate_up"].data_ptr()
    assert {key[0] for key in shared_workspace.buffers} == {"gate_up", "down"}
    # fresh where the decoded weights must outlive the call (here: autograd)
    with torch.enable_grad():
        fresh = MIXED.workspace(cpu_call(q_experts(E=E, down_name="Q6_K"), requires_grad=True),
                                128)
    assert list(fresh) == ["down"]
    assert all(fresh["down"].data_ptr() != buf.data_ptr()
               for buf in shared_workspace.buffers.values())


@pytest.mark.parametrize("rows,tile", [(1, 64), (64, 64), (64.5, 128), (1000, 128)])
def test_the_token_tile_is_64_up_to_64_rows_per_expert(monkeypatch, rows, tile):
    """Both GEMMs mixed: 64 rows a tile while an expert's mean rows fit in one (less tensor work
    on padding); a decoded GEMM or an unknown count of rows: 128. Until the 64-token tile is
    timed on a GPU, 128 everywhere."""
    q = q_experts(E=8)
    assert MIXED.default_tile_m(cuda_call(q), rows * 8) == 128
    monkeypatch.setattr(quantized_crossover, "MIXED_TOKEN_TILE_64_MEASURED", True)
    call = cuda_call(q)
    assert MIXED.default_tile_m(call, rows * 8) == tile
    assert MIXED.default_tile_m(call, None) == 128
    assert MIXED.default_tile_m(cuda_call(q_experts(E=8, down_name="Q6_K")), rows * 8) == 128


def test_it_declines_fp16_other_tile_m_and_autograd(on_hopper):
    q = q_experts()
    assert "bf16 activations" in MIXED.supports(cuda_call(q, dtype=torch.float16))
    assert MIXED.supports(cuda_call(q, tile_m=32)) == (
        "tile_m=32: the mixed-input GEMM runs plans of tile_m 128 or 64 (its token tile)")
    assert MIXED.supports(cuda_call(q, tile_m=128)) == ""
    assert MIXED.supports(cuda_call(q, tile_m=64)) == ""
    hybrid = q_experts(down_name="Q6_K")
    assert MIXED.supports(cuda_call(hybrid, tile_m=64)) == (
        "tile_m=64: with down decoded onto the padded dense GEMM the plan's tile_m is 128 "
        "(that GEMM's M tile)")
    x = torch.randn(8, 256, dtype=torch.bfloat16, requires_grad=True)
    with torch.enable_grad():
        call = ExpertsCall.of(x, q, ops=torch_argon.argon_ops, n_entries=16)
    assert MIXED.supports(call).startswith("autograd records this call")
    from torch_argon.testing import backends
    call = ExpertsCall.of(x.detach(), q, ops=backends.get("reference").ops, n_entries=16)
    assert MIXED.supports(call) == "an OpSet other than the argon library was passed"


def test_the_op_refuses_cpu_tensors_naming_the_device():
    m = mr.repack(q_experts(E=1).down.data, "Q4_K", 256)
    with pytest.raises(NotImplementedError, match="run on CUDA tensors, not cpu"):
        mixed_ops.mixed_mm(torch.zeros(TILE, 256, dtype=torch.bfloat16), m,
                           torch.zeros(1, dtype=torch.int32), torch.zeros(4, dtype=torch.int32))


def test_repack_cache_follows_the_weights_version():
    part = q_experts(E=2).down
    first = cuda_quantized_mixed.cached_repack([part])
    assert cuda_quantized_mixed.has_repacked([part])
    assert cuda_quantized_mixed.cached_repack([part]) is first
    old_scales = first.scales.clone()
    part.data[0, 0, 4] ^= 1  # an in-place change: repacked again, into the same buffers
    assert not cuda_quantized_mixed.has_repacked([part])
    second = cuda_quantized_mixed.cached_repack([part])
    assert second.scales.data_ptr() == first.scales.data_ptr()
    assert not torch.equal(second.scales, old_scales)
    want = mr.repack(part.data, "Q4_K", part.n_in)
    assert all(torch.equal(a, b) for a, b in zip(second[:3], want[:3]))


def test_repack_cache_takes_inference_tensors():
    """Weights made under inference_mode (as `python -m torch_argon --gguf` loads them) have no
    version counter: their entry is kept, never stale."""
    with torch.inference_mode():
        part = q_experts(E=2).down
    first = cuda_quantized_mixed.cached_repack([part])
    assert cuda_quantized_mixed.cached_repack([part]) is first


def test_repack_cache_finds_views_made_at_every_call():
    """An expert-parallel rank's share is a fresh view of the stack at every call
    (QuantizedExperts.select_experts): it finds its entry instead of repacking the layer."""
    q = q_experts(E=4)
    first = cuda_quantized_mixed.repacked(q.select_experts(1, 3), "down")
    assert cuda_quantized_mixed.repacked(q.select_experts(1, 3), "down") is first
    want = mr.repack(q.down.data[1:3], "Q4_K", q.down.n_in)
    assert torch.equal(first.codes, want.codes)


def test_separate_gate_and_up_are_concatenated_once():
    q = q_experts(E=2)
    gate = QuantizedWeight(q.gate_up.data[:, :256].clone(), "Q4_K", 256)
    up = QuantizedWeight(q.gate_up.data[:, 256:].clone(), "Q4_K", 256)
    first = cuda_quantized_mixed.cached_repack([gate, up])
    assert cuda_quantized_mixed.cached_repack([gate, up]) is first
    want = mr.repack(q.gate_up.data, "Q4_K", 256)
    assert torch.equal(first.codes, want.codes) and torch.equal(first.scales, want.scales)
    up.data[0, 0, 4] ^= 1  # a change to either part repacks the pair
    assert not cuda_quantized_mixed.has_repacked([gate, up])
    again = cuda_quantized_mixed.cached_repack([gate, up])
    want = mr.repack(torch.cat([gate.data, up.data], dim=1), "Q4_K", 256)
    assert torch.equal(again.scales, want.scales) and torch.equal(again.codes, want.codes)


def emulated_mm(x, m, tile_expert, meta, *, out=None):
    """The op's contract in torch on the CPU (the kernel's weights: mixed_dequantize; fp32
    accumulation, bf16 out; the used tiles only)."""
    w = mr.mixed_dequantize(m, torch.float32)
    if out is None:
        out = torch.zeros(x.shape[0], m.n_out, dtype=x.dtype)
    tile = x.shape[0] // max(tile_expert.shape[0], 1)  # the plan's tile_m: 128 or 64
    assert tile in mixed_ops.TOKEN_TILES or x.shape[0] == 0
    for t in range(int(meta[1])):
        rows = slice(t * tile, (t + 1) * tile)
        out[rows] = (x[rows].float() @ w[int(tile_expert[t])].T).to(out.dtype)
    return out


def emulated_padded_mm(a, w, tile_expert, meta, config, *, out=None):
    """The padded dense GEMM's contract in torch on the CPU (fp32 accumulation, out in a's
    dtype; the used tiles only)."""
    assert config in configs.PADDED_CONFIGS
    assert w.dtype == a.dtype == torch.bfloat16 and w.is_contiguous()
    if out is None:
        out = torch.zeros(a.shape[0], w.shape[1], dtype=a.dtype)
    for t in range(int(meta[1])):
        rows = slice(t * TILE, (t + 1) * TILE)
        out[rows] = (a[rows].float() @ w[int(tile_expert[t])].float().T).to(out.dtype)
    return out


@pytest.fixture
def emulated_ops(monkeypatch):
    """Both CUDA GEMMs replaced by their contracts, counting their calls (gpuq.dequantize runs
    its CPU emulation, torch_argon._C_test)."""
    calls = {"mixed": 0, "padded": 0}
    calls_configs = []  # (N of the padded GEMM's weights, its config), in call order

    def mixed(*args, **kwargs):
        calls["mixed"] += 1
        return emulated_mm(*args, **kwargs)

    def padded(a, w, tile_expert, meta, config, **kwargs):
        calls["padded"] += 1
        calls_configs.append((w.shape[1], config))
        return emulated_padded_mm(a, w, tile_expert, meta, config, **kwargs)

    monkeypatch.setattr(cuda_quantized_mixed.mixed_ops, "refusal", lambda device: "")
    monkeypatch.setattr(cuda_quantized_mixed.gpuq, "refusal", lambda device: "")
    monkeypatch.setattr(cuda_quantized_mixed.mixed_ops, "mixed_mm", mixed)
    monkeypatch.setattr(cuda_hopper_padded.hopper, "padded_mm", padded)
    torch_argon.experts.clear_cuda_dequant_workspace()
    yield calls, calls_configs
    torch_argon.experts.clear_cuda_dequant_workspace()


def padded_configs_wanted(T, K, E, H, I):
    """{N: config} the padded GEMM should run for gate/up (N = 2I) and down (N = H) at the
    call's mean rows per expert (cuda_hopper_padded's rule)."""
    from torch_argon.experts import cuda_hopper_dense
    gate_up, down = configs.choose_padded(T * K / E, cuda_hopper_dense.device_name(
        torch.device("cpu")), "bfloat16")
    return {2 * I: gate_up, H: down}


FLOW_CASES = [(f, fused) for f in (("Q4_K", "Q4_K"), ("Q4_K", "Q6_K"), ("Q6_K", "Q4_K"),
                                   ("IQ4_XS", "Q8_0"))
              for fused in (True, False)] + [(("Q4_K", "Q4_K", "Q6_K"), False),
                                             (("Q4_K", "Q4_K", "Q4_0"), False)]


@pytest.mark.parametrize("formats,fused", FLOW_CASES,
                         ids=["+".join(f) + ("" if fused else "-split") for f, fused in FLOW_CASES])
@pytest.mark.parametrize("dist,T", [("uniform", 300), ("neg_some", 77), ("empty", 40),
                                    ("uniform", 0)])
def test_experts_flow_on_the_cpu_with_the_ops_emulated(emulated_ops, monkeypatch, formats, fused,
                                                      dist, T):
    """The implementation's stages (plan of tile_m 128 or 64, gather, the repack (gate and up
    concatenated where they are two stacks) of the GEMMs in its formats, the decode of the others into
    the workspace, gate/up, swiglu, down, combine) with the CUDA GEMMs replaced by their
    contracts in torch: the layer's output within the scaled tolerance of the exact
    dequant's. neg_some: -1 ids; empty: experts with 0 rows; T = 0. formats: (gate/up, down),
    or (gate, down, up): up in another format than gate, so gate/up is decoded from two
    stacks (the only split form QuantizedExperts.from_parts keeps)."""
    E, K, H, I = 8, 4, 768, 256  # H != 2I: the padded GEMM's N tells the two GEMMs apart
    monkeypatch.setattr(quantized_crossover, "MIXED_TOKEN_TILE_64_MEASURED", True)  # both tiles
    name, down_name, up_name = (*formats, None)[:3]
    q = q_experts(E=E, H=H, I=I, name=name, down_name=down_name, seed=3, fused=fused,
                  up_name=up_name)
    g = torch.Generator().manual_seed(T)
    x = (torch.randn(T, H, generator=g) * 0.5).bfloat16()
    ids, w = make_ids(T, K, E, dist, seed=T), make_weights(T, K, seed=T)
    dense = (torch.cat([p.dequantize() for p in ([q.gate_up] if fused else [q.gate, q.up])], 1),
             q.down.dequantize())
    want = reference.moe_layer(x.float(), None, dense, K, topk_ids=ids, topk_weights=w)
    chosen = torch_argon.experts.choose(x, q, path="cuda_quantized_mixed", n_entries=T * K,
                                        activation_quant="none")
    decoded = {2 * I: len({mr.code_bits(f) for f in (name, up_name or name)}) != 1
               or mr.code_bits(name) == 0, H: mr.code_bits(down_name) == 0}
    tile = TILE if any(decoded.values()) or T * K / E > 64 else 64  # default_tile_m's rule
    assert (chosen.name, chosen.tile_m) == ("cuda_quantized_mixed", tile)
    got = torch_argon.moe_experts(x, ids, w, q, path="cuda_quantized_mixed",
                                  activation_quant="none")
    assert got.shape == want.shape and got.dtype == torch.bfloat16
    calls, calls_configs = emulated_ops  # decoded: by the GEMM's N, gate/up 2I, down H
    assert calls == {"mixed": 2 - sum(decoded.values()), "padded": sum(decoded.values())}
    # the decoded GEMMs ran on the padded GEMM with the configuration of their role
    wanted = padded_configs_wanted(T, K, E, H, I)
    assert calls_configs == [(n, wanted[n]) for n in (2 * I, H) if decoded[n]]
    if T:
        err = ((got.float() - want).norm() / want.norm()).item()
        assert err < SCALED_TOL, err


@pytest.fixture
def mixed_op_on_the_cpu(monkeypatch):
    """argon::hopper_mixed_mm(_out) given a CPU kernel (the op's contract: emulated_mm) for the
    test's life, and the device checks passed: the real op, its schema and fakes, dispatched on
    CPU tensors (what torch.compile traces)."""
    def weights(x, codes, scales, zeros):
        bits = 4 if codes.shape[3] == 128 else 8  # [E, K / 16, N / 16, 32 * bits]
        return mr.MixedWeights(codes, scales, zeros, x.shape[1], bits, "test")

    def mm(x, codes, scales, zeros, tile_expert, meta):
        return emulated_mm(x, weights(x, codes, scales, zeros), tile_expert, meta)

    def mm_out(x, codes, scales, zeros, tile_expert, meta, out):
        emulated_mm(x, weights(x, codes, scales, zeros), tile_expert, meta, out=out)

    lib = torch.library.Library("argon", "IMPL")
    lib.impl("hopper_mixed_mm", mm, "CPU")
    lib.impl("hopper_mixed_mm_out", mm_out, "CPU")
    monkeypatch.setattr(cuda_quantized_mixed.mixed_ops, "refusal", lambda device: "")
    monkeypatch.setattr(cuda_quantized_mixed.gpuq, "refusal", lambda device: "")
    yield
    lib._destroy()


@pytest.mark.parametrize("kwargs", [dict(), dict(fused=False), dict(name="IQ4_XS"),
                                    dict(name="IQ4_NL", fused=False, up_name="Q5_0"),
                                    dict(name="Q5_K", fused=False, up_name="Q8_0")],
                         ids=["Q4_K", "Q4_K-split", "IQ4_XS", "IQ4_NL+Q5_0-split",
                              "Q5_K+Q8_0-two-widths"])
def test_torch_compile_fullgraph_by_name_repacks_in_the_graph(mixed_op_on_the_cpu, kwargs):
    """Under torch.compile (fullgraph) the repack cache is not read (Python objects and a lock):
    the graph repacks, and gives the eager call's bits (gate and up concatenated as the cache
    does)."""
    torch._dynamo.reset()
    q = q_experts(E=4, H=256, I=256, **kwargs)
    T, K = 64, 2
    x = (torch.randn(T, 256, generator=torch.Generator().manual_seed(0)) * 0.5).bfloat16()
    ids, w = make_ids(T, K, 4, "uniform", seed=1), make_weights(T, K, seed=1)

    def run(x, ids, w):
        return torch_argon.moe_experts(x, ids, w, q, path="cuda_quantized_mixed",
                                       activation_quant="none")

    eager = run(x, ids, w)
    assert torch.equal(torch.compile(run, fullgraph=True)(x, ids, w), eager)


def test_under_torch_compile_the_automatic_choice_passes_it_by(on_h100, monkeypatch):
    """Traced, the mixed path would repack at every call: "auto" declines it and gpuq's GEMMs
    do not step aside for it (from their own crossover the dequant path runs)."""
    q = q_experts()
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    for rows, taken in ((32, GPUQ), (128, DEQUANT)):
        call = rows_call(q, rows)
        assert MIXED.auto_refusal(call).startswith("under torch.compile tracing")
        assert registry.choose(call) is taken
    assert registry.choose(rows_call(q, 128), "cuda_quantized_mixed") is MIXED


# ---- the op's fakes (torch.compile's shapes) --------------------------------------------------

def fake_args(tiles=3, K=512, N=48, E=4):
    from torch._subclasses.fake_tensor import FakeTensorMode
    mode = FakeTensorMode()
    with mode:
        return mode, (torch.empty(tiles * TILE, K, dtype=torch.bfloat16),
                      torch.empty(E, K // 16, N // 16, 128, dtype=torch.uint8),
                      torch.empty(E, K // 64, N, 2, dtype=torch.bfloat16),
                      torch.empty(E, K // 64, N, 2, dtype=torch.bfloat16),
                      torch.empty(tiles, dtype=torch.int32), torch.empty(4, dtype=torch.int32))


def test_fake_gives_out_shape_and_checks_arguments():
    mode, (x, codes, scales, zeros, tile_expert, meta) = fake_args()
    op, op_out = torch.ops.argon.hopper_mixed_mm, torch.ops.argon.hopper_mixed_mm_out
    with mode:
        out = op(x, codes, scales, zeros, tile_expert, meta)
        assert tuple(out.shape) == (3 * TILE, 48) and out.dtype == torch.bfloat16
        op_out(x, codes, scales, zeros, tile_expert, meta, out)
        bytes_codes = torch.empty(4, 32, 3, 256, dtype=torch.uint8)  # 8-bit codes
        assert tuple(op(x, bytes_codes, scales, zeros, tile_expert, meta).shape) == (384, 48)
        with pytest.raises(ValueError, match="x must be bfloat16"):
            op(x.half(), codes, scales, zeros, tile_expert, meta)
        with pytest.raises(ValueError, match="multiple of 64"):
            op(x[:, :480], codes, scales, zeros, tile_expert, meta)
        codes_words = (r"codes must be uint8 \[E, K / 16, N / 16, 128\] \(4-bit\) or "
                       r"\[E, K / 16, N / 16, 256\] \(8-bit\) with K = x's columns \(512\)")
        with pytest.raises(ValueError, match=codes_words):
            op(x, codes[..., :64], scales, zeros, tile_expert, meta)  # 64 bytes a block
        with pytest.raises(ValueError, match=codes_words):
            op(x, codes[:, :16], scales, zeros, tile_expert, meta)  # K / 16 blocks of 256
        with pytest.raises(ValueError, match=codes_words):
            op(x, codes.reshape(4, 32, 384), scales, zeros, tile_expert, meta)  # [E, N, K / 2]
        with pytest.raises(ValueError, match=r"N \(16 \* codes.size\(2\), its blocks of 16 "
                                             r"rows\) must be between 1 and 2\^31 - 1, got 0"):
            op(x, codes[:, :, :0], scales[:, :, :0], zeros[:, :, :0], tile_expert, meta)
        with pytest.raises(ValueError, match=r"scales must be bfloat16 \[E, K / 64, N, 2\] = "
                                             r"\[4, 8, 32, 2\]"):
            op(x, codes[:, :, :2], scales, zeros, tile_expert, meta)  # N 32 by the codes
        with pytest.raises(ValueError, match=r"scales must be bfloat16 \[E, K / 64, N, 2\]"):
            op(x, codes, scales[:, :4], zeros, tile_expert, meta)
        with pytest.raises(ValueError, match=r"zeros must be bfloat16 \[E, K / 64, N, 2\]"):
            op(x, codes, scales, zeros.float(), tile_expert, meta)
        with pytest.raises(ValueError, match="128 or 64 rows per tile of tile_expert"):
            op(x[:-1], codes, scales, zeros, tile_expert, meta)
        with pytest.raises(ValueError, match="128 or 64 rows per tile of tile_expert"):
            op(x[:96], codes, scales, zeros, tile_expert, meta)  # 32 rows a tile
        half = op(x[:3 * 64], codes, scales, zeros, tile_expert, meta)  # a plan of tile_m 64
        assert tuple(half.shape) == (3 * 64, 48)
        with pytest.raises(ValueError, match="tile_expert must be the plan's int32"):
            op(x, codes, scales, zeros, tile_expert.long(), meta)
        with pytest.raises(ValueError, match=r"meta must be int32 of shape \[4\]"):
            op(x, codes, scales, zeros, tile_expert, meta[:3])
        with pytest.raises(ValueError, match="out must be"):
            op_out(x, codes, scales, zeros, tile_expert, meta,
                   torch.empty(3 * TILE, 40, dtype=torch.bfloat16))


def test_fake_checks_the_int32_limits_as_the_op_does():
    """Rows past int32 (the kernel's row index): the op's ValueError from the fake too."""
    tiles = 2 ** 24 + 1  # 128-row tiles: 2^31 + 128 rows
    mode, args = fake_args(tiles=tiles)
    with mode, pytest.raises(ValueError, match="x's rows must fit in int32"):
        torch.ops.argon.hopper_mixed_mm(*args)


def test_opcheck_of_the_fakes():
    """torch.library.opcheck's schema and fake checks on meta tensors (the CUDA kernel itself is
    checked by the GPU tests)."""
    _, args = fake_args()
    meta_args = [torch.empty(a.shape, dtype=a.dtype, device="meta") for a in args]
    torch.library.opcheck(torch.ops.argon.hopper_mixed_mm.default, meta_args,
                          test_utils=("test_schema", "test_faketensor"))


def opcheck_both_forms(device):
    """torch.library.opcheck of both forms of the op, 4- and 8-bit codes, both token tiles, on
    a plan's tensors on `device`."""
    T, K, E, Kd, N = 64, 2, 4, 256, 32
    ids, w = make_ids(T, K, E, "uniform"), make_weights(T, K)
    for tile, qtype in itertools.product(mixed_ops.TOKEN_TILES, ("Q4_K", "Q8_0")):
        plan = torch_argon.argon_ops.moe_plan(ids.to(device), w.to(device), E, tile)
        x = torch.randn(plan.sorted_token.shape[0], Kd, device=device).bfloat16()
        g = torch.Generator().manual_seed(0)
        m = mr.repack(random_quantized(qtype, N, Kd, leading=(E,), generator=g).to(device),
                      qtype, Kd)
        args = (x, m.codes, m.scales, m.zeros, plan.tile_expert, plan.meta)
        torch.library.opcheck(torch.ops.argon.hopper_mixed_mm.default, args)
        out = torch.zeros(x.shape[0], N, dtype=torch.bfloat16, device=device)
        torch.library.opcheck(torch.ops.argon.hopper_mixed_mm_out.default, (*args, out))


def test_opcheck_with_the_op_on_the_cpu(mixed_op_on_the_cpu):
    """Every opcheck test (schema, autograd registration, fakes against the kernel, AOT
    dispatch) with the op's contract as its CPU kernel."""
    opcheck_both_forms("cpu")


@needs_mixed
def test_opcheck_on_the_gpu():
    opcheck_both_forms("cuda")


# ---- on a Hopper GPU with the units built ---------------------------------------------------

def plan_for(ids, w, E, tile=TILE):
    return torch_argon.argon_ops.moe_plan(ids.cuda(), w.cuda(), E, tile)


@needs_mixed
@pytest.mark.parametrize("qtype", list(mr.FORMATS))
@pytest.mark.parametrize("dist", ["uniform", "one_expert", "empty", "neg_some"])
@pytest.mark.parametrize("N", [256, 208, 48])  # 208, 48: a last M tile the TMA bounds clip
@pytest.mark.parametrize("tile", mixed_ops.TOKEN_TILES)
def test_gemm_on_every_used_tile(dist, N, qtype, tile):
    check_gemm_on_every_used_tile(dist, N, qtype, 512, tile)


@needs_mixed
@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0"])  # both widths, 32-value blocks
@pytest.mark.parametrize("Kd", [64, 192, 320])  # one K tile, odd counts of them
@pytest.mark.parametrize("tile", mixed_ops.TOKEN_TILES)
def test_gemm_with_k_of_few_or_odd_tiles(qtype, Kd, tile):
    check_gemm_on_every_used_tile("uniform", 208, qtype, Kd, tile)


def check_gemm_on_every_used_tile(dist, N, qtype, Kd, tile):
    T, K, E = 200, 4, 8  # 100 rows per expert: two 64-row tiles of most experts
    ids, w = make_ids(T, K, E, dist, seed=3), make_weights(T, K, seed=3)
    plan = plan_for(ids, w, E, tile)
    assert plan.sorted_token.shape[0] == tile * plan.tile_expert.shape[0]
    g = torch.Generator().manual_seed(4)
    x = (torch.randn(plan.sorted_token.shape[0], Kd, generator=g) * 0.5).bfloat16().cuda()
    w_q = random_quantized(qtype, N, Kd, leading=(E,), std=0.05, generator=g)
    m = mr.repack(w_q.cuda(), qtype, Kd)
    kernel_w = mr.mixed_dequantize(m._replace(codes=m.codes.cpu(), scales=m.scales.cpu(),
                                              zeros=m.zeros.cpu()), torch.float64)
    exact_w = dequantize_reference(w_q, qtype, Kd).double()
    out = garbage_like(torch.empty(x.shape[0], N, dtype=torch.bfloat16, device="cuda"))
    before = out.clone()
    mixed_ops.mixed_mm(x, m, plan.tile_expert, plan.meta, out=out)
    used = plan.n_tiles * tile
    x64 = x.double().cpu()
    for t, e in enumerate(plan.tile_expert.cpu().tolist()[:plan.n_tiles]):
        rows = slice(t * tile, (t + 1) * tile)
        got = out[rows].double().cpu()
        own = x64[rows] @ kernel_w[e].T  # the kernel's weights: fp32 accumulation, bf16 out
        assert (got - own).norm() <= 4e-3 * own.norm() + 1e-6, t
        exact = x64[rows] @ exact_w[e].T
        assert (got - exact).norm() <= SCALED_TOL * exact.norm() + 1e-6, t
    assert_bits_equal(out[used:], before[used:])  # the unused tiles, as they were
    functional = mixed_ops.mixed_mm(x, m, plan.tile_expert, plan.meta)
    assert_bits_equal(functional[:used], out[:used])
    assert not functional[used:].any()


@needs_mixed
@pytest.mark.parametrize("qtype", ["Q4_K", "Q8_0"])  # both code widths
@pytest.mark.parametrize("tile", mixed_ops.TOKEN_TILES)
def test_gemm_with_no_used_tiles_writes_nothing_and_t_0(qtype, tile):
    E = 4
    plan = plan_for(torch.full((6, 2), -1, dtype=torch.int64), make_weights(6, 2), E, tile)
    assert plan.n_tiles == 0
    m = mr.repack(q_experts(E=E, name=qtype, device="cuda").down.data, qtype, 256)
    x = torch.randn(plan.sorted_token.shape[0], 256, dtype=torch.bfloat16, device="cuda")
    out = garbage_like(torch.empty(x.shape[0], 256, dtype=torch.bfloat16, device="cuda"))
    before = out.clone()
    mixed_ops.mixed_mm(x, m, plan.tile_expert, plan.meta, out=out)
    assert_bits_equal(out, before)
    empty = torch.empty(0, 256, dtype=torch.bfloat16, device="cuda")
    got = mixed_ops.mixed_mm(empty, m, torch.empty(0, dtype=torch.int32, device="cuda"),
                             plan.meta)
    assert got.shape == (0, 256)


# (gate/up, down) formats: one format (4- and 8-bit codes), two widths in one layer, and the
# hybrids (one GEMM decoded onto the padded GEMM)
FORMATS = [("Q4_K", "Q4_K"), ("IQ4_XS", "IQ4_XS"), ("Q8_0", "Q8_0"), ("Q4_0", "Q5_K"),
           ("IQ4_NL", "Q5_0"), ("Q4_K", "Q6_K"), ("Q6_K", "Q4_K")]


def experts_case(T, dist, E=8, K=4, H=512, I=256, seed=1, formats=("Q4_K", "Q4_K")):
    name, down_name = formats
    q = q_experts(E=E, H=H, I=I, name=name, down_name=down_name, seed=seed)
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(T, H, generator=g) * 0.5).bfloat16()
    ids, w = make_ids(T, K, E, dist, seed=seed), make_weights(T, K, seed=seed)
    dense = (dequantize_reference(q.gate_up.data, name, H),
             dequantize_reference(q.down.data, down_name, I))
    want = reference.moe_layer(x.float(), None, dense, K, topk_ids=ids, topk_weights=w)
    return q.to("cuda"), x.cuda(), ids.cuda(), w.cuda(), want


@needs_mixed
@pytest.mark.parametrize("gate,up", [("Q4_K", "Q4_0"), ("Q8_0", "Q5_0")])
def test_experts_path_with_gate_and_up_in_two_formats(gate, up):
    """gate and up as two stacks of two formats of one width: concatenated along N by the
    cache (concat_n) and run as one gate/up GEMM."""
    E, K, H, I, T = 8, 4, 512, 256, 300
    q = q_experts(E=E, H=H, I=I, name=gate, fused=False, up_name=up, seed=2)
    g = torch.Generator().manual_seed(2)
    x = (torch.randn(T, H, generator=g) * 0.5).bfloat16()
    ids, w = make_ids(T, K, E, "uniform", seed=2), make_weights(T, K, seed=2)
    dense = (torch.cat([q.gate.dequantize(), q.up.dequantize()], 1), q.down.dequantize())
    want = reference.moe_layer(x.float(), None, dense, K, topk_ids=ids, topk_weights=w)
    got = torch_argon.moe_experts(x.cuda(), ids.cuda(), w.cuda(), q.to("cuda"),
                                  path="cuda_quantized_mixed", activation_quant="none")
    err = ((got.float().cpu() - want).norm() / want.norm()).item()
    assert err < SCALED_TOL, err


@needs_mixed
@pytest.mark.parametrize("formats", FORMATS, ids=lambda f: "+".join(f))
@pytest.mark.parametrize("dist", ["uniform", "neg_some", "one_expert", "empty"])
@pytest.mark.parametrize("T", [0, 1, 64, 300])  # 64: 32 rows per expert, a plan of tile_m 64
def test_experts_path_matches_the_reference(dist, T, formats):
    q, x, ids, w, want = experts_case(T, dist, formats=formats)
    got = torch_argon.moe_experts(x, ids, w, q, path="cuda_quantized_mixed",
                                  tile_m=64 if T == 64 else None, activation_quant="none")
    assert got.shape == want.shape and got.dtype == torch.bfloat16
    if T:
        err = ((got.float().cpu() - want).norm() / want.norm()).item()
        assert err < SCALED_TOL, err


@needs_mixed
@pytest.mark.parametrize("formats", FORMATS, ids=lambda f: "+".join(f))
@pytest.mark.parametrize("T,tile", [(256, 128), (64, 64)])  # 128 and 32 rows per expert
def test_cuda_graph_replay_equals_eager(formats, T, tile):
    q, x, ids, w, _ = experts_case(T, "uniform", formats=formats)

    def run():
        return torch_argon.moe_experts(x, ids, w, q, path="cuda_quantized_mixed", tile_m=tile,
                                       activation_quant="none")

    assert_replays_like_eager(run, x)  # its first eager call repacks, outside the capture


@needs_mixed
def test_a_captured_graph_reads_the_weights_repacked_again():
    """An in-place change of the weights after a capture: the next eager call repacks into the
    same buffers, so the graph's replay gives the new weights' result (not freed memory)."""
    from hopper_cases import capture
    q, x, ids, w, _ = experts_case(256, "uniform")

    def run():
        return torch_argon.moe_experts(x, ids, w, q, path="cuda_quantized_mixed",
                                       activation_quant="none")

    graph, captured = capture(run)
    before = run()
    q.down.data[:, :, 4] ^= 1  # Q4_K: a sub-block scale of every block
    after = run()
    assert not torch.equal(after, before)
    graph.replay()
    torch.cuda.synchronize()
    assert_bits_equal(captured, after)


@needs_mixed
@pytest.mark.parametrize("formats", [("Q4_K", "Q6_K"), ("IQ4_XS", "IQ4_XS")],
                         ids=lambda f: "+".join(f))
@pytest.mark.parametrize("T,tile", [(256, 128), (64, 64)])
def test_torch_compile_fullgraph_equals_eager(formats, T, tile):
    """By name under torch.compile (fullgraph): the repack in the graph, the same bits as the
    eager call, both token tiles (not yet run on a GPU)."""
    torch._dynamo.reset()
    q, x, ids, w, _ = experts_case(T, "uniform", formats=formats)

    def run(x, ids, w):
        return torch_argon.moe_experts(x, ids, w, q, path="cuda_quantized_mixed", tile_m=tile,
                                       activation_quant="none")

    assert torch.equal(torch.compile(run, fullgraph=True)(x, ids, w), run(x, ids, w))


def test_inside_a_graph_capture_it_waits_for_an_eager_first_call(on_h100, monkeypatch):
    """The repack (allocations, tables copied to the device) cannot be captured: inside a
    capture before the weights' first call "auto" declines and the cache refuses with a clear
    error; once repacked, both go ahead."""
    q = q_experts(name="IQ4_XS")
    call = rows_call(q, 128)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert MIXED.auto_refusal(call).startswith("inside a CUDA graph capture")
    assert registry.choose(call) is DEQUANT
    parts = [q.gate_up]
    with pytest.raises(RuntimeError, match="run the layer once before capturing"):
        cuda_quantized_mixed.cached_repack(parts)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    for role in ("gate_up", "down"):
        cuda_quantized_mixed.repacked(q, role)  # the eager first call
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert MIXED.auto_refusal(call) == "" and registry.choose(call) is MIXED
