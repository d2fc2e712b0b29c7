"""The main job (python -m torch_argon) on the CPU at a small size: it checks parity, and its
report names the stages of the path the layer took."""
import json

from torch_argon.__main__ import main


def test_main_job_reports_parity_and_stages(tmp_path):
    report = tmp_path / "report.json"
    main(["--device", "cpu", "--T", "32", "--E", "8", "--K", "2", "--hidden", "64",
          "--inter", "32", "--no-loop", "--repeat", "1", "--json", str(report),
          "--plot", str(tmp_path / "report.png")])
    got = json.loads(report.read_text())
    assert got["parity"]["plan_bit_exact"] is True
    assert got["parity"]["layer_rel_error"] < 1e-4
    assert got["config"]["path"] == "ops" and got["config"]["tile_m"] == 1
    assert list(got["argon_us"]) == ["route", "plan", "gather", "gate/up GEMM", "SwiGLU",
                                     "down GEMM", "combine", "whole layer"]
    assert all(us > 0 for us in got["argon_us"].values())
