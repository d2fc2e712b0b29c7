"""llama.cpp's MUL_MAT_ID baseline (bench/baselines/ggml_mul_mat_id.py, bench_quant.py --llamacpp):
the reader of ggml's test-backend-ops output, held to a CPU build of the same ggml and patch, so
that a change of its output, of our case patch or of ggml's type names fails here, not in a
device call.

The binary tests need bench/baselines/ggml_bin/test-backend-ops-cpu (or $ARGON_GGML_CPU_BINARY):
bash bench/baselines/stage_ggml.sh && bash bench/baselines/build_ggml_cuda.sh --cpu (about 5
minutes on 2 cores; it needs a ggml git directory, so CI, which has none, skips them)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "baselines"))
import ggml_mul_mat_id as gm  # noqa: E402

from torch_argon.quant.formats import FORMATS  # noqa: E402

pytestmark = pytest.mark.cpu_only
CPU_BINARY = Path(os.environ.get("ARGON_GGML_CPU_BINARY", gm.DEFAULT_CPU_BINARY))
needs_binary = pytest.mark.skipif(
    not CPU_BINARY.is_file(),
    reason=f"no CPU build of ggml's test-backend-ops at {CPU_BINARY} (bench/baselines/"
           "stage_ggml.sh needs a ggml git directory; then build_ggml_cuda.sh --cpu)")
# Tiny layers at T >= 512: test-backend-ops repeats a small op up to ~1900 times per timing
# loop, which at T = 16 takes ~10 s a case on 2 busy cores; at T = 512, 1.5-4 s. Each case
# costs at least its 1 s loop: the tests ask for few.
TINY = gm.MoEShape(E=4, K=2, H=256, I=256)


# ---- the reader, on text ------------------------------------------------------------------------

SQL = """ggml_backend_load_all: a log line the reader must skip
CREATE TABLE IF NOT EXISTS test_backend_ops (
  op_params TEXT,
  time_us REAL,
  op_name TEXT,
  supported INTEGER,
  test_mode TEXT
);

INSERT INTO test_backend_ops (op_params, time_us, op_name, supported, test_mode) VALUES ('type_a=q4_K,b=1', '12.500000', 'MUL_MAT_ID', '1', 'perf');
INSERT INTO test_backend_ops (time_us, op_name, op_params, supported, test_mode) VALUES ('3.25', 'MUL_MAT_ID', 'type_a=q8_0,b=0', '0', 'perf');
"""


def test_parse_sql_reads_fields_by_name_in_any_order():
    rows = gm.parse_sql(SQL)
    assert rows == [
        dict(op_params="type_a=q4_K,b=1", time_us=12.5, op_name="MUL_MAT_ID", supported=1,
             test_mode="perf"),
        dict(op_params="type_a=q8_0,b=0", time_us=3.25, op_name="MUL_MAT_ID", supported=0,
             test_mode="perf"),
    ]


def test_parse_sql_refuses_console_output():
    console = "  MUL_MAT_ID(type_a=q4_K,...):  100 runs -  12.50 us/run\n"
    with pytest.raises(gm.GgmlRunError, match="--output sql"):
        gm.parse_sql(console)


def test_layer_cases_are_llama_cpp_gate_and_down():
    gate, down = gm.layer_cases(gm.MoEShape(E=128, K=8, H=2048, I=768), "Q4_K", 512)
    assert gate.spec() == "q4_K,128,8,1,768,512,2048"  # activations broadcast to the K experts
    assert down.spec() == "q4_K,128,8,0,2048,512,768"  # one row per (token, expert)
    assert gate.op_params() == "type_a=q4_K,type_b=f32,n_mats=128,n_used=8,b=1,m=768,n=512,k=2048"


def test_ggml_type_names():
    assert [gm.ggml_type_name(f) for f in ("Q4_K", "IQ2_XS", "Q8_0", "BF16", "MXFP4", "Q6_K")] \
        == ["q4_K", "iq2_xs", "q8_0", "bf16", "mxfp4", "q6_K"]


def test_a_missing_binary_is_named():
    with pytest.raises(gm.GgmlRunError, match="build_ggml_cuda.sh"):
        gm.run_cases(ROOT / "no-such-binary", [gm.layer_cases(TINY, "Q4_K", 1)[0]], "CPU")


# ---- the reader, on the CPU build ---------------------------------------------------------------

@needs_binary
def test_layer_times_on_the_cpu_build():
    """Every (format, T) gets its gate, up and down times, parsed from the binary's own rows."""
    rows = gm.layer_times(CPU_BINARY, [TINY], ["Q4_K"], [512, 1024], backend="CPU", timeout=300)
    assert [(r["quant"], r["T"]) for r in rows] == [("Q4_K", 512), ("Q4_K", 1024)]
    for r in rows:
        assert r["gate_us"] > 0 and r["down_us"] > 0
        assert r["up_us"] == r["gate_us"] and r["gate_up_us"] == round(2 * r["gate_us"], 2)
        assert r["total_us"] == round(2 * r["gate_us"] + r["down_us"], 2)
        assert r["ggml_type"] == gm.ggml_type_name(r["quant"]) and r["device"]
        assert r["ggml_commit"] == (ROOT / "bench/baselines/ggml_src/GGML_COMMIT").read_text().strip()


@needs_binary
def test_every_format_we_read_is_a_ggml_type_its_mul_mat_id_runs():
    """Our names map to ggml's (the patch exits on a name ggml lacks) and ggml's CPU backend
    runs MUL_MAT_ID on each: the llama.cpp column can be asked for any of them."""
    names = [n for n, f in FORMATS.items() if not f.is_float] + ["BF16"]
    cases = [gm.layer_cases(TINY, n, 512)[0] for n in names]
    timed = gm.run_cases(CPU_BINARY, cases, backend="CPU", timeout=300)
    assert sorted(c.ggml_type for c in timed) == sorted(gm.ggml_type_name(n) for n in names)
    assert all(r["time_us"] > 0 for r in timed.values())


@needs_binary
def test_an_unknown_type_fails_with_its_name():
    bad = gm.Case("q9_Z", 4, 2, True, 256, 1, 256)
    with pytest.raises(gm.GgmlRunError, match="ggml has no type 'q9_Z'"):
        gm.run_cases(CPU_BINARY, [bad], backend="CPU", timeout=60)


@needs_binary
def test_a_case_the_backend_lacks_is_an_error_not_a_row():
    """A backend that is not in the binary times nothing: an error, never an empty column."""
    with pytest.raises(gm.GgmlRunError, match="printed no result"):
        gm.run_cases(CPU_BINARY, [gm.layer_cases(TINY, "Q8_0", 1)[0]], backend="CUDA0",
                     timeout=60)


@needs_binary
def test_bench_quant_adds_the_llamacpp_column(tmp_path):
    """bench_quant.py --llamacpp: llama.cpp's rows (the format's and bf16's) in the JSON, and
    each of our rows carries llama.cpp's time and the ratio to it."""
    from torch_argon import triton_ops
    if not triton_ops.AVAILABLE:
        pytest.skip(triton_ops.REASON)
    out = tmp_path / "quant.json"
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_quant.py"), "--tiny",
                        "--device", "cpu", "--dtype", "fp16", "--formats", "Q8_0", "--configs",
                        "E128", "--T", "16", "--llamacpp", str(CPU_BINARY), "--json", str(out)],
                       capture_output=True, text=True, timeout=900, cwd=ROOT,
                       env=dict(os.environ, TRITON_INTERPRET="1"))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    records = json.loads(out.read_text())
    ll = {(r["quant"], r["T"]): r for r in records if r["op"] == "llamacpp_experts"}
    assert set(ll) == {("Q8_0", 16), ("BF16", 16)}
    for r in ll.values():
        assert (r["config"], r["E"], r["K"], r["H"], r["I"]) == ("E128", 2, 1, 256, 256)
        assert r["total_us"] == round(r["gate_up_us"] + r["down_us"], 2) and r["down_us"] > 0
    ours = [r for r in records if r["op"] == "quant_experts"]
    assert ours
    for r in ours:
        assert r["llamacpp_us"] == ll[("Q8_0", 16)]["total_us"]
        assert r["ratio_to_llamacpp"] == round(r["median_us"] / r["llamacpp_us"], 3)
    assert "llama.cpp MUL_MAT_ID" in p.stdout and "choice/llama.cpp" in p.stdout


@needs_binary
def test_a_run_past_its_timeout_is_an_error():
    """A binary that hangs (here: a case slower than the timeout) ends the run with an error."""
    slow = gm.layer_cases(TINY, "Q4_K", 16)[0]  # its timing loop alone runs for >= 1 s
    with pytest.raises(gm.GgmlRunError, match="did not finish 1 cases in 1 s"):
        gm.run_cases(CPU_BINARY, [slow], backend="CPU", timeout=1)
