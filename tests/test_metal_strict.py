"""The .metal sources under checks stricter than the host build (which compiles them with g++
against a lenient shim): clang with real address spaces against our declaration-only
<metal_stdlib> (tools/metal_check/strict_compile.py), and the MSL-rules lint over libclang's AST
and the kernel signatures (tools/metal_check/msl_lint.py). Both must pass on every kernel of the
library, the flattened library and the host self-test kernels; and every planted-bad snippet of
tests/metal_mutants/ (one per rule, and the four kinds of mistake the g++ shim accepts) must make
its check fail with the expected message, so the checks keep their teeth.

Needs clang++-19 (scripts/env.sh installs it with apt) and the PyPI `libclang` wheel; without
them these tests skip, saying so.
"""
import glob
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools", "metal_check"))
import msl_lint  # noqa: E402
import strict_compile  # noqa: E402

CLANG = strict_compile.find_clang()
needs_clang = pytest.mark.skipif(
    CLANG is None, reason="no clang++-19 (scripts/env.sh installs it with apt-get; not on macOS)")


def libclang_error():
    try:
        msl_lint.load_cindex().Index.create()
        return None
    except Exception as e:  # noqa: BLE001: any way the bindings fail to load
        return str(e)


LIBCLANG_ERROR = libclang_error()
needs_libclang = pytest.mark.skipif(
    LIBCLANG_ERROR is not None, reason=f"no usable libclang ({LIBCLANG_ERROR}): pip install libclang")

MUTANTS = sorted(glob.glob(os.path.join(ROOT, "tests", "metal_mutants", "*.metal")))


def mutant_spec(path):
    text = open(path).read()
    check = re.search(r"^// check: (\w+)$", text, re.M).group(1)
    expect = re.search(r"^// expect: (.*)$", text, re.M).group(1)
    return check, expect


@needs_clang
@pytest.mark.parametrize("name,text,dirs", strict_compile.library_targets(),
                         ids=[t[0] for t in strict_compile.library_targets()])
def test_strict_compile(name, text, dirs):
    ok, diag = strict_compile.compile_text(text, name, dirs)
    assert ok, diag


@needs_libclang
def test_lint_library(capsys):
    rc = msl_lint.main([])
    out = capsys.readouterr().out
    assert rc == 0, out
    # one line per kernel of the library with its threadgroup bytes
    assert re.search(r"kernel plan_place: \d+ bytes of threadgroup memory", out), out


@pytest.mark.parametrize("path", MUTANTS, ids=[os.path.basename(p)[:-6] for p in MUTANTS])
def test_planted_error_is_rejected(path):
    check, expect = mutant_spec(path)
    if check == "strict":
        if CLANG is None:
            pytest.skip("no clang++-19")
        ok, out = strict_compile.compile_file(path)
        assert not ok, f"the strict compile accepted {path}"
    else:
        if LIBCLANG_ERROR is not None:
            pytest.skip(f"no usable libclang ({LIBCLANG_ERROR})")
        problems, _ = msl_lint.lint_file(path)
        assert problems, f"the lint accepted {path}"
        out = "\n".join(problems)
    assert re.search(expect, out), f"expected /{expect}/ in:\n{out}"


def test_every_rule_has_a_mutant():
    """Each check of the lint and the strict header is planted at least once."""
    checks = {mutant_spec(p)[0] for p in MUTANTS}
    assert checks == {"strict", "lint"} and len(MUTANTS) >= 20


@needs_clang
def test_cli_exit_status():
    """The scripts CI may call directly exit non-zero on a planted error."""
    bad = next(p for p in MUTANTS if mutant_spec(p)[0] == "strict")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "metal_check", "strict_compile.py"),
                        bad], capture_output=True, text=True)
    assert p.returncode == 1 and "FAILED" in p.stdout
