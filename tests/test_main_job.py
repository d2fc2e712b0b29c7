"""The main job (python -m torch_argon) on the CPU at small sizes: parity and the stages of the
path the layer took, its flags and their errors, T = 0, progress while it measures, the busy
machine note, and the plot; --quant (the layer with quantized experts beside the dense one) and
--gguf (the MoE blocks of a tiny GGUF file written by tests/gguf_files.py; those tests need the
gguf package, and skip naming it where it is not installed)."""
import json

import pytest
import torch

from conftest import needs
from gguf_files import write_moe_file
from torch_argon import __main__ as job
from torch_argon.__main__ import main
from torch_argon.testing.timing import busy_notes

needs_gguf = needs("gguf", "writes the tiny GGUF files these tests read")
TINY = ["--device", "cpu", "--T", "32", "--E", "8", "--K", "2", "--hidden", "64", "--inter", "32",
        "--rounds", "2", "--repeat", "1"]


def run_job(tmp_path, *extra):
    report = tmp_path / "report.json"
    main([*TINY, *extra, "--json", str(report), "--plot", str(tmp_path / "report.png")])
    return json.loads(report.read_text())


@pytest.fixture
def quiet_machine(monkeypatch):
    """A load average of 0, so only the timings themselves can call the machine busy."""
    monkeypatch.setattr(job.os, "getloadavg", lambda: (0.0, 0.0, 0.0), raising=False)


def test_main_job_reports_parity_and_stages(tmp_path):
    got = run_job(tmp_path, "--no-loop")
    assert got["parity"]["plan_bit_exact"] is True
    assert got["parity"]["layer_rel_error"] < 1e-4
    assert got["config"]["path"] == "ops" and got["config"]["tile_m"] == 1
    assert list(got["argon_us"]) == ["route", "plan", "gather", "gate/up GEMM", "SwiGLU",
                                     "down GEMM", "combine", "whole layer"]
    assert all(us > 0 for us in got["argon_us"].values())
    # every stage timed once per round
    assert got["timing"]["rounds"] == 2
    assert all(len(r) == 2 for r in got["timing"]["round_medians_us"].values())


def test_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit) as exit_:
        job.parse_args(["--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for key in ("T", "E", "K", "hidden", "inter", "dtype"):
        cpu, gpu = job.DEFAULTS["cpu"][key], job.DEFAULTS["gpu"][key]
        assert f"{cpu} on the CPU, {gpu} on GPUs" in text, key
    for fragment in ("(default: auto: mps, then cuda, then cpu)",
                     "every stage once per round (default: 3)",
                     "their median kept (default: 3)", "(default: argon_report.json"):
        assert fragment in text


BAD_FLAGS = [
    (["--K", "9", "--E", "8"], "K must be in [1, E]: got K=9, E=8"),
    (["--E", "4"], "got K=8, E=4"),  # K from the CPU default
    (["--tile-m", "3"], "--tile-m must be a power of two in [1, 4096], got 3"),
    (["--tile-m", "8192"], "--tile-m must be a power of two"),
    (["--T", "-1"], "--T must be >= 0, got -1"),
    (["--hidden", "0"], "--hidden must be >= 1, got 0"),
    (["--repeat", "0"], "--repeat must be >= 1"),
    (["--T", "many"], "argument --T: invalid int value"),
    (["--quant", "Q9_K"], "--quant Q9_K: unknown quantized type 'Q9_K'; torch_argon reads F32, "),
    (["--quant", "F16"], "--quant F16: no quantized kernels for this format on cpu"),
    (["--quant", ","], "--quant needs a format"),
    (["--quant", "Q8_0,Q4_K", "--hidden", "96"],
     "--quant Q4_K: its blocks hold 256 values, so --hidden and --inter must be multiples of "
     "256, got hidden=96"),
    (["--gguf", "no/such.gguf"], "--gguf no/such.gguf: no such file"),
    (["--gguf", __file__, "--E", "4", "--hidden", "64"],
     "--gguf takes E, K, hidden and inter from the file: drop --E, --hidden"),
    (["--gguf", __file__, "--quant", "Q4_K"], "drop --quant"),
    (["--gguf", __file__, "--layers", "0"], "--layers must be >= 1, got 0"),
    (["--layers", "2"], "--layers N picks the blocks of a GGUF file: pass --gguf FILE too"),
]


@pytest.mark.parametrize("argv,message", BAD_FLAGS, ids=[" ".join(a) for a, _ in BAD_FLAGS])
def test_bad_flags_give_one_error_line(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        job.parse_args(["--device", "cpu", *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("python -m torch_argon: error: "), err
    assert message in err


@pytest.mark.parametrize("device", ["cuda", "mps"])
def test_a_device_torch_does_not_see_is_one_error_line(capsys, device):
    available = torch.cuda.is_available() if device == "cuda" else torch.backends.mps.is_available()
    if available:
        pytest.skip(f"{device} is available here")
    with pytest.raises(SystemExit) as exit_:
        job.parse_args(["--device", device])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"error: --device {device}: torch sees no {device.upper()} device" in err


def test_zero_tokens_pass_parity(tmp_path):
    got = run_job(tmp_path, "--T", "0")  # no SystemExit("parity FAILED ...")
    assert got["parity"] == {"plan_bit_exact": True, "layer_rel_error": 0.0}


def test_progress_is_printed_before_the_table(tmp_path, capsys):
    run_job(tmp_path, "--no-loop")
    out = capsys.readouterr().out
    steps = ["building the layer", "checking it against the reference", "timing ",
             "round 1/2", "round 2/2", "| stage |"]
    at = [out.index(s) for s in steps]
    assert at == sorted(at), out


def test_quiet_timings_print_no_busy_note(tmp_path, capsys, quiet_machine, monkeypatch):
    monkeypatch.setattr(job, "median_us", lambda fn, device, **kw: 50.0)  # steady rounds
    got = run_job(tmp_path, "--no-loop")
    assert got["timing"]["busy_notes"] == []
    assert "BUSY" not in capsys.readouterr().out


def test_spread_rounds_are_reported_as_a_busy_machine(tmp_path, capsys, quiet_machine,
                                                      monkeypatch):
    calls = []

    def jumpy(fn, device, **kw):  # the second round 10x slower than the first
        calls.append(1)
        return 100.0 if len(calls) <= 8 else 1000.0

    monkeypatch.setattr(job, "median_us", jumpy)
    got = run_job(tmp_path, "--no-loop")
    notes = got["timing"]["busy_notes"]
    assert len(notes) == 1 and notes[0].startswith("rounds disagree by more than 25%")
    out = capsys.readouterr().out
    assert out.index("BUSY MACHINE") < out.index("| stage |")


def test_busy_notes():
    argon = {"route": 10.0, "gate/up GEMM": 500.0, "whole layer": 400.0}
    torch_path = {"route": 10.0, "whole layer": 900.0}

    def notes(argon, runs, **kw):
        return busy_notes({"argon": argon, "argsort + grouped_mm": torch_path}, runs, **kw)

    steady = {("argon", "route"): [10.0, 10.0], ("argon", "whole layer"): [400.0, 410.0]}
    assert notes(argon, steady, load=0.0, cores=2) == [
        "argon: gate/up GEMM read slower than the whole layer (400.0 us), which runs it"]
    fine = dict(argon, **{"gate/up GEMM": 300.0})
    assert notes(fine, steady, load=0.0, cores=2) == []
    # a tiny stage's jitter is no sign; a 50% gap of hundreds of microseconds is
    jitter = {("argon", "plan"): [4.0, 9.0]}
    assert notes(fine, jitter, load=0.0, cores=2) == []
    spread = {("argon", "whole layer"): [400.0, 600.0, 420.0]}
    assert notes(fine, spread, load=0.0, cores=2) == [
        "rounds disagree by more than 25%: argon whole layer 48%"]
    # the load average, less this job's own threads, above half the cores
    assert notes(fine, steady, load=3.0, cores=2, own_threads=2) == []
    assert "load average 3.5 on 2 cores" in notes(fine, steady, load=3.5, cores=2,
                                                  own_threads=2)[0]


def test_plot_title_fits_and_shows_the_loop():
    pytest.importorskip("matplotlib")
    title = ["torch_argon MoE prefill layer on cpu (a very long processor name, 64 threads): "
             "T=2048 E=512 K=10 hidden=2048 inter=512 bfloat16 tile_m=16 (ops path)",
             "BUSY MACHINE while timing: these times are not reliable (r.json: timing.busy_notes)"]
    argon = {"route": 10.0, "plan": 5.0, "whole layer": 100.0}
    fig = job.make_figure(title, argon, {"route": 10.0, "whole layer": 200.0}, 5000.0)
    try:
        fig.canvas.draw()
        ax = fig.axes[0]
        box, frame = ax.title.get_window_extent(), fig.bbox
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and box.y1 <= frame.y1
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert labels == ["argon", "argsort + grouped_mm", "per-expert Python loop"]
        loop_bar = ax.containers[2][0]
        assert loop_bar.get_width() == 5000.0
    finally:
        import matplotlib.pyplot as plt
        plt.close(fig)


QUANT_SHAPE = ["--hidden", "256", "--inter", "256", "--T", "16", "--E", "4", "--no-loop"]


def cpu_mode():
    """The activation_quant mode the CPU's quantized experts take by default here."""
    from torch_argon.experts.ops_quantized import Q8_BY_DEFAULT_ON
    return "q8" if torch.ops.argon_cpu.isa() in Q8_BY_DEFAULT_ON else "none"


def tolerances_to_zero(monkeypatch):
    for table in (job.QUANT_TOLERANCE, job.Q8_TOLERANCE):
        monkeypatch.setitem(table, "float32", 0.0)


def test_quant_runs_beside_the_dense_layer(tmp_path, capsys):
    got = run_job(tmp_path, *QUANT_SHAPE, "--quant", "q4_k,Q8_0,IQ4_NL")
    out = capsys.readouterr().out
    mode = cpu_mode()
    for row in ("| float32 (dense) | ops |", f"| Q4_K (4.5 bits/weight) | ops, {mode} |",
                f"| Q8_0 (8.5 bits/weight) | ops, {mode} |",
                f"| IQ4_NL (4.5 bits/weight) | ops, {mode} |"):
        assert row in out, out
    assert out.index("| stage |") < out.index("| experts |")
    dense, *quant = got["quantized"]
    assert dense["op"] == "moe_layer" and dense["format"] == "float32"
    assert dense["weight_bytes"] == 4 * 3 * 256 * 256 * 4  # E * (2I*H + H*I) * 4 bytes
    assert dense["median_us"] == got["argon_us"]["whole layer"]
    assert [r["format"] for r in quant] == ["Q4_K", "Q8_0", "IQ4_NL"]
    for r in quant:
        assert r["op"] == "moe_layer_quant" and r["path"] == "ops" and r["median_us"] > 0
        n_weights = dense["weight_bytes"] // 4  # float32
        assert r["weight_bytes"] == n_weights * r["bits_per_weight"] / 8
        assert r["weight_bytes"] < dense["weight_bytes"]
        assert r["activation_quant"] == mode
        assert r["compared_to"] == "float64 per-expert layer on the dequantized weights" + (
            " and the q8 activations" if mode == "q8" else "")
        tol = job.Q8_TOLERANCE["float32"] if mode == "q8" else 1e-4
        assert 0 < r["rel_error"] < r["tolerance"] == tol and r["ok"] is True
    # timed with the other stages, every round
    assert len(got["timing"]["round_medians_us"]["argon, quantized experts/Q4_K"]) == 2


def test_quant_error_over_the_tolerance_fails_the_job(tmp_path, monkeypatch):
    tolerances_to_zero(monkeypatch)
    with pytest.raises(SystemExit) as exit_:
        run_job(tmp_path, *QUANT_SHAPE, "--quant", "Q8_0", "--rounds", "1")
    assert "quantized Q8_0 rel error" in str(exit_.value.code)


def test_quant_all_is_every_format_with_kernels():
    args = job.parse_args(["--device", "cpu", "--quant", "all"])
    assert args.quant_formats == job.kernel_formats()
    assert {"Q4_K", "Q8_0", "IQ4_XS", "MXFP4"} <= set(args.quant_formats)
    assert not {"F32", "F16", "BF16"} & set(args.quant_formats)


def run_gguf(tmp_path, path, *extra):
    report = tmp_path / "gguf.json"
    main(["--device", "cpu", "--T", "16", "--rounds", "2", "--repeat", "1", "--gguf", str(path),
          *extra, "--json", str(report)])
    return json.loads(report.read_text())


@needs_gguf
def test_gguf_runs_the_first_blocks_of_a_file(tmp_path, capsys):
    path = tmp_path / "tiny.gguf"
    written = write_moe_file(path, n_blocks=3, E=4, K=2, H=256, I=256)
    got = run_gguf(tmp_path, path, "--layers", "2")
    out = capsys.readouterr().out
    assert ("config: qwen3moe: 3 blocks, 3 with experts; E=4 top-2 hidden=256 inter=256; "
            "no shared expert; softmax routing, top-k weights renormalized") in out
    assert "| 0 | gate/up Q4_K, down Q6_K | ops" in out and "| 1 |" in out
    assert "| 2 |" not in out
    assert [r["block"] for r in got["layers"]] == [0, 1]
    for r in got["layers"]:
        b = r["block"]
        stored = sum(t.numel() for name, t in written.items() if name.startswith(f"blk.{b}."))
        assert r["op"] == "moe_layer_gguf" and r["weight_bytes"] == stored
        assert r["dense_weight_bytes"] == 4 * 3 * 256 * 256 * 4
        assert r["formats"] == {"gate_up": "Q4_K", "down": "Q6_K"} and r["median_us"] > 0
    mode = cpu_mode()
    assert got["parity"]["activation_quant"] == mode
    tol = job.Q8_TOLERANCE["float32"] if mode == "q8" else 1e-4
    assert got["parity"]["block"] == 0 and 0 < got["parity"]["rel_error"] < tol
    assert got["config"]["n_experts"] == 4 and got["config"]["top_k"] == 2


@needs_gguf
def test_gguf_with_a_shared_expert_and_two_gate_up_formats(tmp_path, capsys):
    path = tmp_path / "shared.gguf"
    write_moe_file(path, "qwen2moe", n_blocks=1, E=4, K=2, H=256, I=256,
                   formats=("Q4_K", "Q8_0", "Q6_K"), shared_inter=256)
    got = run_gguf(tmp_path, path, "--dtype", "bfloat16")
    assert "| 0 | gate Q4_K, up Q8_0, down Q6_K | ops |" in capsys.readouterr().out
    # the shared expert is in the reference too: without it the error was measured at 0.8
    assert 0 < got["parity"]["rel_error"] < job.QUANT_TOLERANCE["bfloat16"]


@needs_gguf
def test_gguf_parity_failure_fails_the_job(tmp_path, monkeypatch):
    path = tmp_path / "tiny.gguf"
    write_moe_file(path, n_blocks=1, E=4, K=2, H=256, I=256)
    tolerances_to_zero(monkeypatch)
    with pytest.raises(SystemExit) as exit_:
        run_gguf(tmp_path, path)
    assert "parity FAILED (block 0 rel error" in str(exit_.value.code)


def bad_file(tmp_path, kind):
    path = tmp_path / f"{kind}.gguf"
    if kind == "not_gguf":
        path.write_bytes(b"not a gguf file at all")
    elif kind == "q4_1":  # a GGUF type torch_argon does not read
        write_moe_file(path, n_blocks=1, formats=("Q4_1", "Q4_1", "Q6_K"))
    elif kind == "f16":  # read (a float type), but no quantized kernel takes it
        write_moe_file(path, n_blocks=1, formats=("F16", "F16", "Q6_K"))
    elif kind == "no_router":
        write_moe_file(path, n_blocks=1, skip={"blk.0.ffn_gate_inp.weight"})
    return path


@needs_gguf
@pytest.mark.parametrize("kind,message", [
    ("not_gguf", "not a readable GGUF file"),
    ("q4_1", "tensor 'blk.0.ffn_gate_exps.weight' is stored as Q4_1, which torch_argon does "
             "not read"),
    ("f16", "blk.0 gate_up experts are stored as F16, which the quantized kernels do not take"),
    ("no_router", "missing tensor 'blk.0.ffn_gate_inp.weight'"),
])
def test_a_gguf_file_the_job_cannot_run_is_one_error_line(tmp_path, capsys, kind, message):
    path = bad_file(tmp_path, kind)
    with pytest.raises(SystemExit) as exit_:
        run_gguf(tmp_path, path)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"python -m torch_argon: error: {path}: "), err
    assert message in err


# ---- output paths, Ctrl-C, --layers beyond the file ----------------------------------------

@pytest.mark.parametrize("flag", ["--json", "--plot"])
@pytest.mark.parametrize("where", ["no_folder", "under_a_file", "a_folder"])
def test_an_unwritable_output_is_one_error_line_before_the_job(tmp_path, capsys, monkeypatch,
                                                              flag, where):
    (tmp_path / "a_file").write_text("")
    path = {"no_folder": tmp_path / "missing" / "out", "under_a_file": tmp_path / "a_file" / "out",
            "a_folder": tmp_path}[where]
    monkeypatch.setattr(job, "run_dense", lambda *a: pytest.fail("the job ran"))
    with pytest.raises(SystemExit) as exit_:
        main([*TINY, flag, str(path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"python -m torch_argon: error: {flag} "
                                                   f"{path}: cannot write it ("), err


def test_checking_the_outputs_leaves_them_as_they_were(tmp_path):
    kept, fresh = tmp_path / "kept.json", tmp_path / "fresh.png"
    kept.write_text("earlier report")
    job.parse_args(["--device", "cpu", "--json", str(kept), "--plot", str(fresh)])
    assert kept.read_text() == "earlier report" and not fresh.exists()


def test_ctrl_c_is_one_line_and_status_130(tmp_path):
    """SIGINT in the middle of the job (as Ctrl-C sends it): no traceback, status 130."""
    import signal
    import subprocess
    import sys
    import time
    cmd = [sys.executable, "-m", "torch_argon", "--device", "cpu", "--T", "2048", "--E", "64",
           "--K", "8", "--hidden", "512", "--inter", "256", "--rounds", "1000",
           "--json", str(tmp_path / "r.json"), "--plot", str(tmp_path / "r.png")]
    # (SIGINT as the job's shell leaves it: a parent that ignores it must not pass that on)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert "torch_argon main job" in proc.stdout.readline()  # past the imports
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert err == "python -m torch_argon: interrupted\n"


def test_a_reader_that_stops_early_ends_the_job_quietly(tmp_path):
    """`python -m torch_argon | head -2`: no BrokenPipeError traceback, status 141."""
    import subprocess
    import sys
    cmd = [sys.executable, "-m", "torch_argon", *TINY, "--json", str(tmp_path / "r.json"),
           "--plot", str(tmp_path / "r.png")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "torch_argon main job" in proc.stdout.readline()
        proc.stdout.close()  # as head does after its lines
        err = proc.stderr.read()
        proc.wait(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 141 and err == ""


@needs_gguf
def test_more_layers_than_the_file_has_is_one_error_line(tmp_path, capsys):
    path = tmp_path / "two.gguf"
    write_moe_file(path, n_blocks=2, E=4, K=2, H=256, I=256)
    with pytest.raises(SystemExit) as exit_:
        run_gguf(tmp_path, path, "--layers", "5")
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err == f"python -m torch_argon: error: --layers 5: {path} has 2 MoE blocks (blocks 0, 1)\n"


def test_gguf_cases_skip_naming_the_package_where_gguf_is_missing(tmp_path):
    """The GPU machine's image has no gguf package: there the tests that write GGUF files skip
    and say so, and the library still answers --gguf with its own message."""
    import subprocess
    import sys
    from pathlib import Path
    here = Path(__file__).resolve()
    hide = ("import sys; sys.modules['gguf'] = None; import pytest; "
            f"sys.exit(pytest.main(['-q', '-rs', '-p', 'no:cacheprovider', {str(here)!r}, "
            "'-k', 'gguf and not skip_naming_the_package']))")
    done = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True,
                          cwd=here.parents[1], timeout=600)
    summary = done.stdout.strip().splitlines()[-1]
    assert done.returncode == 0 and "failed" not in summary and "error" not in summary, done.stdout
    import re
    skipped = re.search(r"(\d+) skipped", summary)
    assert skipped and int(skipped.group(1)) >= 7 and "needs the gguf package" in done.stdout
    hidden = ("import sys; sys.modules['gguf'] = None; from torch_argon.__main__ import main; "
              f"main(['--device', 'cpu', '--gguf', {__file__!r}, '--json', "
              f"{str(tmp_path / 'r.json')!r}])")
    done = subprocess.run([sys.executable, "-c", hidden], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2 and "needs the gguf package" in done.stderr, done.stderr
