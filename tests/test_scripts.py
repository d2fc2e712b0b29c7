"""scripts/main.sh and scripts/test.sh as a user calls them: from any directory, with paths of
that directory; test.sh runs the ThreadSanitizer check before the whole suite only."""
import os
import subprocess
from pathlib import Path

import pytest

from conftest import needs

ROOT = Path(__file__).resolve().parents[1]


def plan_run(caller, *args, tsan=None):
    """(RUN_TSAN, PYTEST_ARGS) of scripts/test.sh's plan_run for these arguments."""
    env = {k: v for k, v in os.environ.items() if k != "ARGON_TSAN"}
    if tsan is not None:
        env["ARGON_TSAN"] = tsan
    script = ('source "$1"; shift; plan_run "$@"; echo "$RUN_TSAN"; '
              'for a in ${PYTEST_ARGS[@]+"${PYTEST_ARGS[@]}"}; do printf "%s\\n" "$a"; done')
    done = subprocess.run(["bash", "-c", script, "bash", str(ROOT / "scripts" / "test.sh"),
                           str(caller), *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, check=True)
    lines = done.stdout.splitlines()
    return int(lines[0]), lines[1:]


def test_test_sh_runs_tsan_before_the_whole_suite_only(tmp_path):
    assert plan_run(ROOT) == (1, [])
    assert plan_run(ROOT, "-q", "-x", "-n", "16", "--durations", "20") == (
        1, ["-q", "-x", "-n", "16", "--durations", "20"])
    assert plan_run(ROOT, "tests/test_plan.py", "-q")[0] == 0
    assert plan_run(ROOT, "tests/test_plan.py::test_plan_matches_reference")[0] == 0
    assert plan_run(ROOT, "-k", "plan")[0] == 0
    assert plan_run(ROOT, "-m", "not slow")[0] == 0
    assert plan_run(ROOT, "-k", "plan", tsan="1")[0] == 1
    assert plan_run(ROOT, tsan="0")[0] == 0


def test_test_sh_takes_the_callers_relative_paths(tmp_path):
    tests = ROOT / "tests"
    tsan, args = plan_run(tests, "test_plan.py::test_x", "-q", "conftest.py")
    assert tsan == 0 and args == [f"{tests}/test_plan.py::test_x", "-q", f"{tests}/conftest.py"]
    # a path of the checkout that is not the caller's passes as it was (pytest runs there)
    assert plan_run(tmp_path, "tests/test_plan.py") == (0, ["tests/test_plan.py"])


def test_ci_runs_the_whole_suite_with_tsan():
    """.ci/run calls test.sh with no test named (or with ARGON_TSAN=1): the TSan run stays in CI."""
    calls = [line.split() for line in (ROOT / ".ci" / "run").read_text().splitlines()
             if "scripts/test.sh" in line and not line.lstrip().startswith("#")]
    assert calls
    for words in calls:
        after = words[words.index("scripts/test.sh") + 1:]
        assert "ARGON_TSAN=1" in words or plan_run(ROOT, *after)[0] == 1, words


@needs("gguf", "writes the GGUF file the job reads")
def test_main_sh_runs_in_the_callers_directory(tmp_path):
    """Called from another directory with relative paths: it reads the caller's file and writes
    the caller's report; nothing lands in the checkout."""
    from gguf_files import write_moe_file
    work = tmp_path / "work"
    work.mkdir()
    write_moe_file(work / "user.gguf", n_blocks=1, E=4, K=2, H=256, I=256)
    before = set(os.listdir(ROOT))
    done = subprocess.run(["bash", str(ROOT / "scripts" / "main.sh"), "--device", "cpu", "--T",
                           "8", "--rounds", "1", "--repeat", "1", "--gguf", "user.gguf",
                           "--json", "mine.json"], cwd=work, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (work / "mine.json").is_file()
    assert set(os.listdir(ROOT)) == before


@pytest.mark.parametrize("script", ["main.sh", "test.sh"])
def test_scripts_say_where_relative_paths_resolve(script):
    header = (ROOT / "scripts" / script).read_text().split("\n\n")[0]
    assert "caller" in header
