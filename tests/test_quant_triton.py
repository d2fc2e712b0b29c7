"""The quantized Triton kernels of torch_argon/triton_ops (quant_blocks, dequantize_kernel,
moe_qmm_kernel, quant_ops) and the triton_quantized experts (torch_argon/experts) against
torch_argon.quant.dequantize_reference and the fp32 / float64 references:
- CUDA, every format: dequantize bit for bit (NaN as NaN) with finite and with inf/NaN scales;
  the fused gather + gate/up + SwiGLU GEMM, the gathered and the row-ordered GEMM and the
  moe_qmm_out kernel within QREL_TOL of fp32 (tests/quant_triton_cases.py: relative Frobenius
  error 1.5e-2 bf16, 2e-3 fp16), over NaN-filled memory; adversarial routings, -1 ids, T = 0,
  tile_m 1 to 128; the experts path (fused and split gate/up, mixed formats) against the
  float64 layer; opcheck of the triton ops; torch.compile(fullgraph=True) and CUDA graph capture
  of the quantized experts.
- The CPU, through the Triton interpreter (fp16; tests/quant_triton_interpreter_run.py): the
  same cases at small sizes for every format, and the op registration through the dispatcher.
- Bad input: checked before any launch, so CPU tensors do.
"""
import json
import os
import re
import subprocess
import sys

import pytest
import torch

import torch_argon
from torch_argon import reference, triton_ops
from torch_argon.experts import run_implementation
from torch_argon.quant import FORMATS, dequantize_reference, qformat, random_quantized
from torch_argon.testing import backends
from routing_cases import make_ids, make_weights

HERE = os.path.dirname(os.path.abspath(__file__))
NAMES = list(FORMATS)
CUDA_REASON = (triton_ops.REASON or
               ("" if torch.cuda.is_available() else "torch sees no CUDA device") or
               ("" if backends.get("cuda").available else backends.get("cuda").reason))
needs_cuda = pytest.mark.skipif(bool(CUDA_REASON), reason=CUDA_REASON or "ok")
needs_triton = pytest.mark.skipif(not triton_ops.AVAILABLE, reason=triton_ops.REASON or "ok")

if triton_ops.AVAILABLE:
    from quant_triton_cases import (QE, QW, interpreter_cases, run_config_case,
                                    run_dequant_case, run_experts_case, run_partial_tile_case,
                                    run_qmm_case)
    from torch_argon.triton_ops import quant_blocks, quant_configs, quant_ops
    INTERPRETER_CASES = [name for name, _ in interpreter_cases()]
else:
    INTERPRETER_CASES = []


# ---- CUDA ------------------------------------------------------------------------------------

@needs_cuda
@pytest.mark.parametrize("finite", [True, False], ids=["finite", "inf_nan_scales"])
@pytest.mark.parametrize("name", NAMES)
def test_dequantize_cuda(name, finite):
    assert run_dequant_case(name, "cuda", finite) == []


@needs_cuda
@pytest.mark.parametrize("name", NAMES)
def test_qmm_cuda(name):
    assert run_qmm_case(name, "cuda", torch.bfloat16, T=40, E=6, K=3, full=True) == []


@needs_cuda
@pytest.mark.parametrize("name", ["Q4_K", "Q8_0", "IQ4_XS", "IQ2_XS", "F16"])
def test_qmm_fp16_cuda(name):
    assert run_qmm_case(name, "cuda", torch.float16, T=40, E=6, K=3) == []


@needs_cuda
@pytest.mark.parametrize("dist,T,E,K,tm", [
    ("uniform", 0, 8, 2, 16), ("neg_all", 12, 8, 2, 16), ("one_expert", 70, 8, 2, 16),
    ("empty", 30, 16, 3, 32), ("neg_some", 33, 8, 4, 16), ("zipf", 300, 16, 4, 64),
    ("uniform", 600, 8, 4, 128), ("repeated", 50, 4, 8, 256),
])
def test_qmm_routings_cuda(dist, T, E, K, tm):
    assert run_qmm_case("Q4_K", "cuda", torch.bfloat16, T=T, E=E, K=K, tm=tm, dist=dist,
                        full=True, experts=True) == []


@needs_cuda
@pytest.mark.parametrize("name,down,split", [
    ("Q4_K", None, None), ("Q8_0", None, None), ("IQ4_XS", None, None), ("IQ2_XS", None, None),
    ("MXFP4", None, None), ("Q4_K", "Q6_K", "IQ4_XS"), ("IQ2_XS", "IQ4_XS", None),
])
def test_quant_experts_cuda(name, down, split):
    """Fused gate/up (one format) or split (two: two GEMMs and the swiglu op); down in the same
    or another format."""
    assert run_experts_case(name, "cuda", torch.bfloat16, T=100, E=8, K=4, tm=16,
                            down_name=down, split=split) == []


@needs_cuda
def test_partial_tiles_cuda():
    assert run_partial_tile_case("cuda", torch.bfloat16) == []


@needs_cuda
def test_other_configs_cuda():
    assert run_config_case("cuda", torch.bfloat16) == []


def _small_problem(name="Q4_K", T=24, E=6, K=3, tm=16, device="cuda"):
    torch.manual_seed(0)
    H = I = 256
    x = torch.randn(T, H, device=device).bfloat16()
    wgu = random_quantized(name, 2 * I, H, leading=(E,), device=device)
    wd = random_quantized(name, H, I, leading=(E,), device=device)
    ids = torch.randint(0, E, (T, K), device=device)
    w = torch.rand(T, K, device=device)
    return x, wgu, wd, ids, w


@needs_cuda
def test_quant_triton_ops_opcheck_cuda():
    x, wgu, wd, ids, w = _small_problem()
    tm, q4k = 16, FORMATS["Q4_K"].type_id
    plan = torch_argon.moe_plan(ids, w, wgu.shape[0], tm)
    tables = triton_ops.quant_tables(x.device)
    h = triton_ops.moe_gate_up_swiglu_qmm_triton(x, wgu, "Q4_K", 256, plan.tile_expert,
                                                 plan.meta, tm, plan.sorted_token)
    ns = torch.ops.argon
    args = (plan.tile_expert, plan.meta, tm)
    # zero_unused=True: with False, rows of unused tiles are left unwritten (differ by run).
    for op, a in [
        (ns.moe_gate_up_swiglu_qmm_triton, (x, wgu, q4k, 256, tables, *args, plan.sorted_token,
                                            True)),
        (ns.moe_qmm_triton, (h, wd, q4k, 256, tables, *args, None, True)),
        (ns.moe_qmm_triton, (x, wgu, q4k, 256, tables, *args, plan.sorted_token, True)),
    ]:
        torch.library.opcheck(op, a)


@needs_cuda
def test_op_table_quant_ops_cuda():
    """argon::dequantize / moe_qmm (the op table's, where the extension has them) on CUDA run
    the Triton kernels: bit-exact dequant, the GEMM within tolerance, opcheck."""
    if not hasattr(torch.ops.argon, "moe_qmm_out"):
        pytest.skip("this build's op table has no quantized ops")
    assert torch._C._dispatch_has_kernel_for_dispatch_key("argon::moe_qmm_out", "CUDA")
    x, wgu, wd, ids, w = _small_problem()
    q4k = FORMATS["Q4_K"].type_id
    got = torch.ops.argon.dequantize(wd, q4k, 256)
    want = dequantize_reference(wd.cpu(), "Q4_K", 256)
    assert torch.equal(got.cpu().view(torch.int32), want.view(torch.int32))
    plan = torch_argon.moe_plan(ids, w, wgu.shape[0], 16)
    xs = torch_argon.moe_gather(x, plan)
    y = torch.ops.argon.moe_qmm(xs, wgu, q4k, 256, plan.tile_expert, 16)
    ref = reference.moe_mm(xs.cpu().float(), dequantize_reference(wgu.cpu(), "Q4_K", 256),
                           plan.tile_expert.cpu(), 16)
    err = float((y.cpu().double() - ref.double()).norm() / ref.double().norm())
    assert err < 1.5e-2
    torch.library.opcheck(torch.ops.argon.dequantize, (wd, q4k, 256))
    torch.library.opcheck(torch.ops.argon.moe_qmm, (xs, wgu, q4k, 256, plan.tile_expert, 16))


def _quant_experts(x, wgu, wd):
    return QE(down=QW(wd, qformat("Q4_K"), 256), gate_up=QW(wgu, qformat("Q4_K"), 256))


@needs_cuda
def test_quant_experts_compile_fullgraph_cuda():
    x, wgu, wd, ids, w = _small_problem(T=40)
    q = _quant_experts(x, wgu, wd)
    ops = backends.get("cuda").ops

    def experts(x, ids, w, q):
        return run_implementation("triton_quantized", x, ids, w, q, tile_m=16, ops=ops)

    eager = experts(x, ids, w, q)
    torch._dynamo.reset()
    got = torch.compile(experts, fullgraph=True)(x, ids, w, q)
    torch.testing.assert_close(got, eager, atol=2e-2, rtol=2e-2)


@needs_cuda
def test_quant_experts_cuda_graph():
    x, wgu, wd, ids, w = _small_problem(T=40)
    q = _quant_experts(x, wgu, wd)
    ops = backends.get("cuda").ops
    run = lambda: run_implementation("triton_quantized", x, ids, w, q, tile_m=16, ops=ops)  # noqa
    eager = run()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = run()
    out.fill_(float("nan"))
    graph.replay()
    torch.testing.assert_close(out, eager, atol=0, rtol=0)


# ---- the Triton interpreter on the CPU ---------------------------------------------------------

@pytest.fixture(scope="module")
def interpreter_results():
    """Runs the cases in two subprocesses (the CI machine has two cores), each a share."""
    if not triton_ops.AVAILABLE:
        pytest.skip(triton_ops.REASON)
    shares = [INTERPRETER_CASES[0::2], INTERPRETER_CASES[1::2]]
    runs = [subprocess.Popen([sys.executable, os.path.join(HERE, "quant_triton_interpreter_run.py"),
                              *share], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for share in shares]
    results = {}
    for run in runs:
        out, err = run.communicate(timeout=900)
        assert run.returncode == 0, err[-3000:]
        results.update(json.loads(out.strip().splitlines()[-1]))
    return results


@pytest.mark.parametrize("case", INTERPRETER_CASES)
def test_quant_triton_interpreter_cpu(interpreter_results, case):
    assert interpreter_results[case] == []


# ---- bad input, tables, configs (no kernel launch) -------------------------------------------

def _bad_args():
    T, E, tm, H, I = 8, 3, 16, 256, 256
    x = torch.randn(T, H, dtype=torch.float16)
    wgu = random_quantized("Q4_K", 2 * I, H, leading=(E,))
    plan = reference.moe_plan(torch.randint(0, E, (T, 2)), torch.rand(T, 2), E, tm)
    return dict(x=x, w=wgu, qtype="Q4_K", n_in=H, tile_expert=plan.tile_expert, meta=plan.meta,
                tile_m=tm, sorted_token=plan.sorted_token)


@needs_triton
@pytest.mark.parametrize("change,match", [
    (lambda a: {**a, "x": a["x"].float()}, "a must be float16 / bfloat16"),
    (lambda a: {**a, "w": a["w"][..., :-1]}, "w_q has 143 bytes per row, but Q4_K rows"),
    (lambda a: {**a, "w": a["w"].view(torch.int8)}, "w_q must be uint8"),
    (lambda a: {**a, "n_in": 250}, "Q4_K needs the input dim to be a multiple of 256"),
    (lambda a: {**a, "qtype": "Q4_1"}, "quantized type Q4_1, which torch_argon does not read"),
    (lambda a: {**a, "qtype": "Q8_0"}, "w_q has 144 bytes per row, but Q8_0 rows of n_in=256"),
    (lambda a: {**a, "w": a["w"][:, :-1]}, r"w_q must be \[E, 2I, row_bytes\]"),
    (lambda a: {**a, "x": a["x"][:, :128]}, r"a \[rows, n_in=256\] and w_q"),
    (lambda a: {**a, "tile_m": 12}, "tile_m must be a power of two"),
    (lambda a: {**a, "tile_expert": a["tile_expert"].long()}, "tile_expert must be int32"),
    (lambda a: {**a, "tile_expert": a["tile_expert"][:-1]}, "sorted_token must have tile_expert"),
    (lambda a: {**a, "meta": a["meta"][:2]}, "meta must hold moe_plan's 4 counters"),
    (lambda a: {**a, "sorted_token": a["sorted_token"].long()}, "sorted_token must be a 1-D"),
    (lambda a: {**a, "meta": a["meta"].to("meta")}, "meta must be on cpu like a, got meta"),
])
def test_quant_triton_bad_input_names_argument(change, match):
    a = change(_bad_args())
    with pytest.raises(ValueError, match=match):
        triton_ops.moe_gate_up_swiglu_qmm_triton(a["x"], a["w"], a["qtype"], a["n_in"],
                                                 a["tile_expert"], a["meta"], a["tile_m"],
                                                 a["sorted_token"])


@needs_triton
def test_quant_op_kernels_bad_input():
    """The CUDA kernels of dequantize_out and moe_qmm_out run the ops' own checks: each misuse
    gets the CPU kernel's error (CPU tensors here: the checks come before any launch)."""
    a = _bad_args()
    w = a["w"]
    xs = torch.randn(a["tile_expert"].shape[0] * 16, 256)
    storage = torch.zeros(1024, dtype=torch.uint8)
    calls = [
        ("dequantize_out", (w, 12, 256, torch.empty(3, 512, 256, dtype=torch.float16))),
        ("dequantize_out", (w, 12, 100, torch.empty(3, 512, 100))),
        ("dequantize_out", (storage[:144].view(1, 144), 12, 256,
                            storage.view(torch.float32).view(1, 256))),
        ("moe_qmm_out", (xs.double(), w, 12, 256, a["tile_expert"], 16, "none",
                         torch.empty(xs.shape[0], 512))),
        ("moe_qmm_out", (xs, w, 12, 256, a["tile_expert"], 16, "none",
                         torch.empty(xs.shape[0], 512, dtype=torch.float16))),
        ("moe_qmm_out", (xs, w, 12, 256, a["tile_expert"], 16, "q4",
                         torch.empty(xs.shape[0], 512))),
    ]
    for name, args in calls:
        with pytest.raises(ValueError) as on_cpu:
            getattr(torch.ops.argon, name)(*args)
        with pytest.raises(ValueError, match=re.escape(str(on_cpu.value))):
            getattr(quant_ops, f"{name}_cuda")(*args)


@needs_triton
def test_device_tables_hold_the_format_tables():
    from torch_argon.quant import tables
    t = quant_blocks.device_tables("cpu")
    assert t.dtype == torch.float32 and t.shape == (quant_blocks.TABLE_SIZE,)
    iq4 = quant_blocks.TAB_IQ4NL.value
    assert t[iq4:iq4 + 16].tolist() == list(tables.IQ4_NL_VALUES)
    mx = quant_blocks.TAB_MXFP4.value
    assert t[mx:mx + 16].tolist() == list(tables.MXFP4_VALUES_X2)
    for row in (0, 1, 300, 511):
        g2 = quant_blocks.TAB_IQ2XS_GRID.value + 8 * row
        assert t[g2:g2 + 8].tolist() == [(tables.IQ2XS_GRID[row] >> (8 * k)) & 255
                                         for k in range(8)]
        g3 = quant_blocks.TAB_IQ3S_GRID.value + 4 * row
        assert t[g3:g3 + 4].tolist() == [(tables.IQ3S_GRID[row] >> (8 * k)) & 255
                                         for k in range(4)]
    for row in (0, 3, 127):
        s2 = quant_blocks.TAB_IQ2XS_SIGNS.value + 8 * row
        assert t[s2:s2 + 8].tolist() == [-1.0 if (tables.IQ2XS_SIGNS[row] >> k) & 1 else 1.0
                                         for k in range(8)]
    assert quant_blocks.device_tables("cpu") is t  # cached


@needs_triton
@pytest.mark.parametrize("name", NAMES)
def test_block_layout_covers_the_row(name):
    fmt = FORMATS[name]
    for n_in in ((256, 512, 2048) if fmt.block_elems == 256 else (32, 96, 2048)) + (
            (1, 80) if fmt.is_float else ()):
        block_bytes, subs, n_blocks, mask_k = quant_ops.block_layout(fmt, n_in)
        assert n_blocks * subs * 32 >= n_in and (n_blocks * subs * 32 == n_in) != mask_k
        if not fmt.is_float:
            assert n_blocks * block_bytes == n_in // fmt.block_elems * fmt.block_bytes
        for wanted in (1, 2, 4, 8):
            step = quant_ops._step_blocks(wanted, subs, n_blocks)
            assert n_blocks % step == 0 and step <= wanted and (subs == 1 or step == 1)


@needs_triton
def test_quant_configs():
    for tm in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        bm = quant_configs.qmm_block_m(tm)
        assert bm in (16, 32, 64) and (bm <= tm or tm < 16)
        for swiglu in (False, True):
            for rows in (0.0, 5.0, 50.0, 500.0):
                cfg = quant_configs.qmm_config(FORMATS["Q4_K"], swiglu, bm, rows)
                assert cfg.block_n in (32, 64, 128, 256) and cfg.num_warps in (4, 8)
    with pytest.raises(ValueError, match="power of two"):
        quant_configs.qmm_block_m(24)
    picks = [quant_configs.quant_layer_tile_m(T * 10, 512) for T in (128, 512, 1024, 2048, 8192)]
    assert picks == sorted(picks) and picks[0] == 16 and picks[-1] == 64


@needs_triton
@pytest.mark.parametrize("name", ["Q4_K", "IQ4_XS", "Q8_0"])
def test_quant_triton_ops_trace_on_fake_tensors(name):
    """What torch.compile does with the triton ops: run them on fake tensors (no data, no
    addresses; the kernel launch is a traced no-op): output shapes and dtypes."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    a = _bad_args()
    H, E = 256, 3
    w = random_quantized(name, 2 * 256, H, leading=(E,))
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        x, wq = mode.from_tensor(a["x"]), mode.from_tensor(w)
        te, meta, st = (mode.from_tensor(a[k]) for k in ("tile_expert", "meta", "sorted_token"))
        tables = mode.from_tensor(quant_blocks.device_tables("cpu"))
        qt = FORMATS[name].type_id
        h = quant_ops.moe_gate_up_swiglu_qmm_triton_op(x, wq, qt, H, tables, te, meta, 16, st)
        y = quant_ops.moe_qmm_triton_op(x, wq, qt, H, tables, te, meta, 16, st, False)
    R = a["sorted_token"].shape[0]
    assert tuple(h.shape) == (R, 256) and tuple(y.shape) == (R, 512)
    assert h.dtype == y.dtype == torch.float16
