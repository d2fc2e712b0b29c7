"""The build: the test executors live in torch_argon._C_test, never in the _C a user installs;
the compilers' output goes to a log file, not to the terminal (issue 41 item 5, issue 42 item 7)."""
import os
import subprocess
import sys
import textwrap

import pytest

import torch_argon
from build_tools import build_log

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST_EXECUTOR_NAMES = (b"argon_host", b"argon_metal_cuda", b"lane_runner", b"LaneError")


def run_python(code, **kwargs):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300, **kwargs)


def test_C_names_no_test_executor():
    with open(torch_argon._C.__file__, "rb") as f:
        library = f.read()
    found = [n.decode() for n in TEST_EXECUTOR_NAMES if n in library]
    assert not found, f"{torch_argon._C.__file__} names {found}"


def test_the_user_library_registers_no_test_op_library():
    got = run_python("""
        import torch, torch_argon
        print(hasattr(torch.ops.argon, "moe_plan"), hasattr(torch.ops.argon_host, "moe_plan"))
    """)
    assert got.returncode == 0, got.stderr
    assert got.stdout.split() == ["True", "False"]


def test_backends_load_the_test_module():
    from torch_argon.testing import backends
    assert backends.get("metal_host").available, backends.get("metal_host").reason
    assert "torch_argon._C_test" in sys.modules


def test_backends_say_why_without_the_test_module():
    got = run_python("""
        import sys
        class NoTestModule:  # as a user's install: no torch_argon._C_test
            def find_spec(self, name, path=None, target=None):
                if name == "torch_argon._C_test":
                    raise ImportError("not built here")
        sys.meta_path.insert(0, NoTestModule())
        from torch_argon.testing import backends
        b = backends.get("metal_host")
        print(b.available)
        print(b.reason)
        print(backends.get("cpu").available)
    """)
    assert got.returncode == 0, got.stderr
    available, reason, cpu = got.stdout.splitlines()
    assert available == "False" and cpu == "True"
    assert "ARGON_TEST_BUILD=1" in reason and "_C_test" in reason


def test_build_log_keeps_compiler_output_off_the_terminal(tmp_path):
    log = tmp_path / "build.log"
    got = run_python(f"""
        import subprocess, sys
        from build_tools import build_log
        with build_log.logged("lib (3 units)", log={str(log)!r}):
            print("a compiler command line")
            subprocess.run(["sh", "-c", "echo child stdout; echo child stderr >&2"])
        print("after the build")
    """, cwd=ROOT)
    assert got.returncode == 0, got.stderr
    assert got.stdout == "after the build\n"
    assert got.stderr.splitlines() == [f"building lib (3 units)... (compiler output: {log})"]
    text = log.read_text()
    assert "a compiler command line" in text and "child stdout" in text and "child stderr" in text


def test_build_log_tells_where_a_failure_is(tmp_path):
    log = tmp_path / "build.log"
    got = run_python(f"""
        import subprocess
        from build_tools import build_log
        with build_log.logged("lib", log={str(log)!r}):
            subprocess.run(["sh", "-c", "echo 'x.cpp:3: error: expected ;' >&2"])
            raise SystemExit(1)
    """, cwd=ROOT)
    assert got.returncode == 1 and got.stdout == ""
    assert "building lib failed" in got.stderr
    assert "x.cpp:3: error: expected ;" in got.stderr and str(log) in got.stderr


@pytest.mark.skipif(not os.path.exists(os.path.join(ROOT, ".venv", "bin", "python")),
                    reason="no .venv in this checkout (made by scripts/main.sh or scripts/test.sh)")
def test_main_job_help_through_head():
    """`scripts/main.sh --help | head -3`: the help's first lines, no build output before them
    and no traceback (the build once printed its compiler lines to stdout and died of SIGPIPE)."""
    env = {k: v for k, v in os.environ.items() if k != "ARGON_TEST_BUILD"}
    got = subprocess.run(["bash", "-c", "bash scripts/main.sh --help | head -3"], cwd=ROOT,
                         capture_output=True, text=True, timeout=900, env=env)
    assert got.returncode == 0
    assert got.stdout.splitlines()[0].startswith("usage:"), got.stdout
    assert "Traceback" not in got.stderr, got.stderr
