"""The main job (python -m torch_argon) on the CPU at small sizes: parity and the stages of the
path the layer took, its flags and their errors, T = 0, progress while it measures, the busy
machine note, and the plot."""
import json

import pytest
import torch

from torch_argon import __main__ as job
from torch_argon.__main__ import main

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
    steady = {("argon", "route"): [10.0, 10.0], ("argon", "whole layer"): [400.0, 410.0]}
    notes = job.busy_notes(argon, torch_path, steady, load=0.0, cores=2)
    assert notes == ["argon: gate/up GEMM read slower than the whole layer (400.0 us), "
                     "which runs it"]
    fine = dict(argon, **{"gate/up GEMM": 300.0})
    assert job.busy_notes(fine, torch_path, steady, load=0.0, cores=2) == []
    # a tiny stage's jitter is no sign; a 50% gap of hundreds of microseconds is
    jitter = {("argon", "plan"): [4.0, 9.0]}
    assert job.busy_notes(fine, torch_path, jitter, load=0.0, cores=2) == []
    spread = {("argon", "whole layer"): [400.0, 600.0, 420.0]}
    assert job.busy_notes(fine, torch_path, spread, load=0.0, cores=2) == [
        "rounds disagree by more than 25%: argon whole layer 48%"]
    # the load average, less this job's own threads, above half the cores
    assert job.busy_notes(fine, torch_path, steady, load=3.0, cores=2, own_threads=2) == []
    assert "load average 3.5 on 2 cores" in job.busy_notes(fine, torch_path, steady, load=3.5,
                                                           cores=2, own_threads=2)[0]


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
