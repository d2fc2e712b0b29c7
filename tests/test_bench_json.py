"""bench/conftest.py: a benchmark run's JSON goes outside the checkout unless a path is given;
bench/layer_ab.py's table."""
import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]


def bench_conftest():
    spec = importlib.util.spec_from_file_location("bench_conftest", ROOT / "bench" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def configured(conftest, **option):
    defaults = dict(benchmark_json=None, benchmark_disable=False, benchmark_skip=False)
    config = SimpleNamespace(option=SimpleNamespace(**{**defaults, **option}))
    conftest.pytest_configure(config)
    return config.option.benchmark_json


def test_default_json_goes_to_the_cache_not_the_checkout(tmp_path, monkeypatch):
    conftest = bench_conftest()
    monkeypatch.delenv("ARGON_BENCH_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = configured(conftest)
    assert path == tmp_path / "cache" / "torch_argon" / "bench" / "bench_ops.json"
    assert path.parent.is_dir() and ROOT not in path.parents
    monkeypatch.setenv("ARGON_BENCH_DIR", str(tmp_path / "mine"))
    assert configured(conftest) == tmp_path / "mine" / "bench_ops.json"


@pytest.mark.parametrize("option", [dict(benchmark_json=Path("given.json")),
                                    dict(benchmark_disable=True), dict(benchmark_skip=True)])
def test_an_explicit_path_or_no_benchmarks_are_left_alone(option):
    assert configured(bench_conftest(), **option) == option.get("benchmark_json")


def test_layer_ab_table_takes_each_sides_best_and_flags_missing_points(tmp_path):
    """bench/layer_ab.py's table (its runs need a GPU): the best run of each side, the ratio, and
    whether both sides computed the same output; exit status 1 where a run lacks a point."""
    import subprocess
    import sys
    script = Path(__file__).resolve().parent.parent / "bench" / "layer_ab.py"

    def side(tag, us, checksum=1.5, keys=("E8K2H64I32/128", "E8K2H64I32/8192")):
        (tmp_path / f"ab_{tag}.json").write_text(json.dumps(dict(
            meta=dict(device="test"), points={k: us for k in keys},
            checksums={k: checksum for k in keys})))

    side("base1", 10.0), side("base2", 9.0), side("new1", 9.5), side("new2", 11.0)
    done = subprocess.run([sys.executable, str(script), "table", str(tmp_path)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "| E8K2H64I32/128 | 9.0 | 9.5 | 1.056 | yes |" in done.stdout
    side("new2", 11.0, checksum=2.0, keys=("E8K2H64I32/128",))
    done = subprocess.run([sys.executable, str(script), "table", str(tmp_path)],
                          capture_output=True, text=True)
    assert done.returncode == 1
    assert "| E8K2H64I32/128 | 9.0 | 9.5 | 1.056 | no |" in done.stdout
