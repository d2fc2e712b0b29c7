"""bench/h200_gemm_sweep.py's host logic, without a GPU: the compile-worker manager (a worker
that crashes, hangs or mis-computes is dropped and the rest go on), the choice of winners, the
table it writes and how the layer's lookup reads it back, the final table's lines."""
import importlib.util
import os

import pytest
import torch

from torch_argon import triton_ops

HERE = os.path.dirname(os.path.abspath(__file__))
pytestmark = pytest.mark.skipif(not triton_ops.AVAILABLE, reason=triton_ops.REASON or "ok")


@pytest.fixture(scope="module")
def sweep():
    spec = importlib.util.spec_from_file_location(
        "h200_gemm_sweep", os.path.join(HERE, "..", "bench", "h200_gemm_sweep.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_worker_manager_survives_crash_hang_and_wrong_jobs(sweep, tmp_path):
    jobs = [dict(id=name, kind="gate_up", block_m=16, config={})
            for name in ("a ok", "b crash", "c ok", "d hang", "e wrong", "f ok", "g ok")]
    res = sweep.compile_jobs(jobs, 2, budget_s=60, work_dir=str(tmp_path), job_timeout_s=5,
                             fake=True, log=lambda m: None)
    assert set(res) == {j["id"] for j in jobs}
    assert {k for k, r in res.items() if r["ok"]} == {"a ok", "c ok", "f ok", "g ok"}
    assert res["b crash"]["error"].startswith("worker died")
    assert res["d hang"]["error"] == "hung"
    assert res["e wrong"]["rel_err"] > sweep.GEMM_TOL


def test_worker_manager_budget(sweep, tmp_path):
    jobs = [dict(id=f"{i} hang", kind="down", block_m=16, config={}) for i in range(3)]
    res = sweep.compile_jobs(jobs, 1, budget_s=2, work_dir=str(tmp_path), job_timeout_s=60,
                             fake=True, log=lambda m: None)
    assert all(r["error"] == "not compiled: budget" for r in res.values()) and len(res) == 3


def _records(sweep, configs):
    """Synthetic sweep records: at E=128 T=8192 tile_m 128 wins with a tma config; at T=512
    tile_m 32 wins with a classic one."""
    m = "128x8x2048x768"
    tma = configs.MMConfig(128, 64, 8, 3, kernel="tma", skip_padding=True).to_dict()
    classic = configs.MMConfig(128, 128, 4, 3).to_dict()
    recs = []
    points = [(8192, 64, "gate_up", classic, 900), (8192, 64, "down", classic, 600),
              (8192, 128, "gate_up", tma, 700), (8192, 128, "down", tma, 450),
              (8192, 128, "down", classic, 650),
              (512, 32, "gate_up", classic, 200), (512, 32, "down", classic, 100),
              (512, 64, "gate_up", tma, 210), (512, 64, "down", tma, 100)]
    for T, tm, kind, cfg, us in points:
        recs.append(dict(model=m, T=T, rows_per_expert=T * 8 / 128, tile_m=tm, kind=kind,
                         job=f"{kind} {tm} {cfg['kernel']}", config=cfg, us=us, rel_err=1e-3))
    recs.append(dict(model=m, T=512, rows_per_expert=32.0, tile_m=16, kind="gate_up", job="bad",
                     config=classic, rel_err=0.5))  # failed its check: never chosen
    return recs


def test_choice_and_table_round_trip(sweep):
    configs = sweep._import_configs()
    best = sweep.best_by_point(_records(sweep, configs))
    assert best[("128x8x2048x768", 8192, 128, "down")]["us"] == 450
    tm, sums = sweep.choose_tile_m(best, "128x8x2048x768", 8192, [64, 128])
    assert tm == 128 and sums == {64: 1500, 128: 1150}
    assert sweep.choose_tile_m(best, "128x8x2048x768", 512, [16, 32, 64])[0] == 32
    choices = {("128x8x2048x768", 8192): 128, ("128x8x2048x768", 512): 32}
    table = sweep.build_table(configs, "Fake GPU", best, choices)
    merged = sweep.merge_tables({"gemm": {"Other GPU|bfloat16|down|E1|N2|K3": []}, "tile_m": {}},
                                table)
    assert "Other GPU|bfloat16|down|E1|N2|K3" in merged["gemm"]
    configs.set_table(merged)
    try:
        tm_of = lambda T, dtype=torch.bfloat16: configs.layer_tile_m(  # noqa: E731
            T * 8, 128, hidden=2048, inter=768, dtype=dtype, device_name="Fake GPU")
        assert tm_of(8192) == 128 and tm_of(512) == 32 and tm_of(8192, torch.float16) == 128
        cfg = configs.tuned_config("Fake GPU", torch.bfloat16, "gate_up", 128, 1536, 2048, 128,
                                   512.0)
        assert cfg.kernel == "tma" and cfg.skip_padding
        assert configs.tuned_config("Fake GPU", torch.bfloat16, "down", 128, 2048, 768, 32,
                                    32.0).kernel == "classic"
    finally:
        configs.set_table(None)
    # keep_old: today's tile_m (64 at 512 rows per expert) and today's configs at that point
    kept = sweep.build_table(configs, "Fake GPU", best, choices,
                             keep_old={("128x8x2048x768", 8192)})
    entry = [e for e in kept["tile_m"]["Fake GPU|bfloat16|E128|H2048|I768"]
             if e["rows_per_expert"] == 512.0]
    assert entry[0]["tile_m"] == configs.default_tile_m(8192 * 8, 128) == 64
    gu = [e for e in kept["gemm"]["Fake GPU|bfloat16|gate_up|E128|N1536|K2048"]
          if e["tile_m"] == 64 and e["rows_per_expert"] == 512.0]
    assert configs.MMConfig.from_dict(gu[0]["config"]) == configs.config_for(True, 64, 512.0)


def test_final_table_lines(sweep):
    row = dict(model="128x8x2048x768", T=2048, tile_m_old=64, tile_m_new=128, old_us=530.0,
               new_us=390.0, torch_grouped_mm_us=700.0, weight_read_floor_us=281.0,
               matrix_floor_us=196.0, target_us=395)
    text = sweep.final_table([row, dict(row, T=16384, target_us=None),
                              dict(row, T=8192, new_us=1200.0, target_us=1100)])
    lines = text.splitlines()
    assert lines[0].split()[:5] == ["T", "config", "tm", "old>new", "old"]
    assert lines[2].split()[-1] == "yes" and lines[3].split()[-1] == "-"
    assert lines[4].split()[-1] == "NO"


def test_candidates_fit_the_compile_budget(sweep):
    configs = sweep._import_configs()
    jobs = sweep.all_jobs(configs)
    assert 40 <= len(jobs) <= 100
    assert len({j[0] for j in jobs}) == len(jobs)
    for jid, kind, bm, cfg in jobs:
        assert not cfg.skip_padding or bm >= 32, jid
    # today's configs are among the candidates (the old path is the baseline)
    for kind, rules in (("gate_up", configs.GATE_UP_CONFIGS), ("down", configs.DOWN_CONFIGS)):
        for bm, _, cfg in rules:
            assert sweep.job_id(kind, bm, cfg) in {j[0] for j in jobs}
    default = configs.default_tile_m
    for E, K in ((512, 10), (128, 8)):
        for T in (128, 512, 2048, 8192, 16384):
            assert default(T * K, E) in sweep.tile_ms_for(T * K / E, default(T * K, E))
