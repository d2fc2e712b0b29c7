"""pytest configuration of the benchmark suite (bench/bench_ops.py).

Its pytest-benchmark JSON goes outside the checkout unless --benchmark-json names a path: to
$ARGON_BENCH_DIR, else $XDG_CACHE_HOME/torch_argon/bench, else ~/.cache/torch_argon/bench, as
bench_ops.json, so a benchmark run leaves the working tree as it was. Where it went is printed at
the end; `python bench/make_tables.py --raw PATH` turns it into the README's tables.
"""
import os
from pathlib import Path

import pytest


def default_json_path() -> Path:
    folder = os.environ.get("ARGON_BENCH_DIR")
    if not folder:
        cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        folder = Path(cache) / "torch_argon" / "bench"
    return Path(folder) / "bench_ops.json"


def pytest_configure(config):
    # before pytest-benchmark's own pytest_configure (trylast), which reads the option
    if not hasattr(config.option, "benchmark_json"):
        return  # pytest-benchmark is not installed: nothing is written
    if config.option.benchmark_json is None and not (
            config.option.benchmark_disable or config.option.benchmark_skip):
        path = default_json_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        config.option.benchmark_json = path


@pytest.hookimpl(trylast=True)  # after pytest-benchmark's table
def pytest_terminal_summary(terminalreporter, config):
    path = getattr(config.option, "benchmark_json", None)
    if path is not None and Path(path).exists():
        terminalreporter.write_line(f"benchmark JSON: {Path(path).resolve()}  (tables: python "
                                    f"bench/make_tables.py --raw {Path(path).resolve()})")
