"""bench/bench_quant.py, the coordinator's one H200 call for the quantized experts: its logic at
toy sizes on the CPU (the Triton interpreter and the gpuq emulation: every implementation's row,
outputs checked on the way, errors kept as rows), and the tables bench/make_tables.py makes of
its records (the README's stays under its size limit with a whole --quick run)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torch_argon import triton_ops

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.cpu_only


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    if not triton_ops.AVAILABLE:
        pytest.skip(triton_ops.REASON)
    out = tmp_path_factory.mktemp("bench_quant") / "quant.json"
    env = dict(os.environ, TRITON_INTERPRET="1")
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_quant.py"), "--tiny",
                        "--device", "cpu", "--dtype", "fp16", "--formats", "Q4_K,IQ2_XS",
                        "--configs", "E128", "--json", str(out)],
                       capture_output=True, text=True, env=env, timeout=900, cwd=ROOT)
    return p, json.loads(out.read_text())


def test_tiny_run_times_every_implementation(tiny_run):
    p, records = tiny_run
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rows = [r for r in records if r["op"] == "quant_experts"]
    got = {(r["quant"], r["T"], r["impl"], r["mode"]) for r in rows}
    want = {(q, T, impl, mode) for q in ("Q4_K", "IQ2_XS") for T in (16, 40)
            for impl, mode in (("cuda_quantized", "none"), ("cuda_quantized", "q8"),
                               ("cuda_quantized_tiled", "none"),
                               ("cuda_quantized_dequant", "none"), ("triton_quantized", "none"))}
    assert got == want
    for r in rows:  # each output against the dense path on the decoded weights
        assert r["rel_err"] < (3e-2 if r["mode"] == "q8" else 5e-3), r
        assert r["median_us"] > 0 and r["bf16_us"] > 0 and r["floor_us"] > 0
        assert r["choice"] == "ops_quantized" and not r["chosen"]  # the CPU's choice
    assert [r for r in records if r["op"] == "copy_bw"]


def test_a_failing_implementation_keeps_the_other_rows(tmp_path):
    """An implementation that raises becomes an error row; the others are still timed."""
    code = f"""
import sys
sys.argv = ["bench_quant.py"]
sys.path.insert(0, {str(ROOT / "bench")!r})
import bench_quant
from torch_argon.experts import registry
def broken(*args, **kwargs):
    raise RuntimeError("broken on purpose")
registry.BY_NAME["cuda_quantized_dequant"].apply = broken
sys.exit(bench_quant.main(["--tiny", "--device", "cpu", "--dtype", "fp16", "--formats", "Q8_0",
                           "--configs", "E128", "--T", "16",
                           "--json", {str(tmp_path / "q.json")!r}]))
"""
    if not triton_ops.AVAILABLE:
        pytest.skip(triton_ops.REASON)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, TRITON_INTERPRET="1"), timeout=600)
    assert p.returncode == 1, p.stderr[-3000:]
    records = json.loads((tmp_path / "q.json").read_text())
    errors = [r for r in records if r["op"] == "quant_experts_error"]
    assert [e["impl"] for e in errors] == ["cuda_quantized_dequant"]
    assert "broken on purpose" in errors[0]["error"]
    timed = {r["impl"] for r in records if r["op"] == "quant_experts"}
    assert timed == {"cuda_quantized", "cuda_quantized_tiled", "triton_quantized"}


def test_a_format_pair_gives_gate_up_and_down_in_two_formats():
    """--formats Q4_K/Q6_K: gate/up in Q4_K, down in Q6_K (a Q4_K_M file's usual layer)."""
    code = f"""
import sys
sys.path.insert(0, {str(ROOT / "bench")!r})
import bench_quant
bench_quant.Run.set(("cpu", bench_quant.torch.bfloat16, bench_quant.TINY_CONFIGS))
assert bench_quant.part_formats("Q8_0") == ("Q8_0", "Q8_0")
q = bench_quant.quant_experts("Q4_K/Q6_K", bench_quant.TINY_CONFIGS["E512"], seed=0)
print(q.gate_up.qtype.name, q.down.qtype.name, tuple(q.gate_up.data.shape), q.down.n_in)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.split() == ["Q4_K", "Q6_K", "(4,", "512,", "144)", "256"]


def make_tables():
    import importlib.util
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        spec = importlib.util.spec_from_file_location("make_tables",
                                                      ROOT / "bench" / "make_tables.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return module


def quick_records():
    """Records of the shape a whole --quick run writes (times made up)."""
    records = []
    for cfg, (E, K, I) in {"E512": (512, 10, 512), "E128": (128, 8, 768)}.items():
        for q in ("Q4_K", "Q8_0", "IQ4_XS", "Q6_K", "IQ2_XS"):
            for T in (128, 512, 2048, 8192, 16384):
                for i, impl in enumerate(("cuda_quantized", "cuda_quantized_dequant",
                                          "triton_quantized")):
                    records.append(dict(
                        op="quant_experts", config=cfg, E=E, K=K, H=2048, I=I, T=T, quant=q,
                        impl=impl, mode="none", median_us=1000.0 + 10 * i + T / 100,
                        bf16_us=1234.5, floor_us=321.0, weight_bytes=123456789,
                        chosen=impl == ("cuda_quantized" if T < 2048 else
                                        "cuda_quantized_dequant")))
    return records


def test_tables_of_a_quick_run():
    mt = make_tables()
    records = quick_records()
    main_job = json.loads((ROOT / "bench" / "results" / "main_quant_h200.json").read_text())
    readme = mt.quant_table(records, main_job)
    lines = readme.splitlines()
    assert lines[0] == "| format | T=128 | T=512 | T=2048 | T=8192 | T=16384 |"
    assert lines[2] == ("| Q4_K | 0.81G/0.81G | 0.81G/0.81G | 0.83D/0.83D | 0.88D/0.88D "
                        "| 0.95D/0.95D |")
    full = mt.quant_all_table(records)
    assert len(full.splitlines()) == 2 + 2 * 5 * 5
    assert "| Q4_K | E=512 K=10 H=2048 I=512 | 128 | 1234 | 321 | 1001 | - | - | 1011 | 1021 | " \
           "cuda_quantized | 0.81x | 3.12x | 123 |" in full
    # the README with this table stays under test_readme's limit
    text = (ROOT / "README.md").read_text()
    start = text.index("<!-- table:h200-quant -->\n") + len("<!-- table:h200-quant -->\n")
    end = text.index("<!-- /table:h200-quant -->")
    size = len((text[:start] + readme + "\n" + text[end:]).encode())
    assert size < 12 * 1024, f"README.md would be {size} bytes"
