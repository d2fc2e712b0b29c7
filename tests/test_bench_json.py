"""bench/conftest.py: a benchmark run's JSON goes outside the checkout unless a path is given."""
import importlib.util
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
