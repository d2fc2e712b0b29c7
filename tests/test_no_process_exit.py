"""No code path of the library ends the process instead of raising: the C++, CUDA and Metal
sources call nothing that exits, aborts or terminates, declare nothing noexcept (an exception
leaving a noexcept function terminates) and open no OpenMP region of their own (an exception
leaving one terminates; at::parallel_for carries exceptions out). What threads the library
starts itself (the host lane runner) catch every exception in their entry functions
(tests/test_metal_host.py runs them; test_metal_cuda_build.py checks that no nvcc stub, which
calls exit(1), can stand in for a host kernel)."""
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = ("torch_argon/csrc", "torch_argon/metal")
EXTENSIONS = (".h", ".cpp", ".cu", ".cuh", ".mm", ".metal", ".inc")
# What ends a process: its calls, and the two ways an exception becomes std::terminate.
FORBIDDEN = re.compile(
    r"(?<![\w.])(?:std::)?(?:exit|abort|_Exit|quick_exit|terminate|assert|__builtin_trap)\s*\("
    r"|\bnoexcept\b|#\s*pragma\s+omp\b")


def library_sources():
    for top in SOURCES:
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                # the shims of <metal_stdlib> have no extension
                if name.endswith(EXTENSIONS) or name == "metal_stdlib":
                    yield os.path.join(folder, name)


def code_lines(path):
    """(line number, code) with // comments and string literals blanked."""
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        line = re.sub(r'"(?:\\.|[^"\\])*"', '""', line)
        yield n, line.split("//", 1)[0]


def test_sources_found():
    assert sum(1 for _ in library_sources()) > 50


@pytest.mark.parametrize("path", sorted(library_sources()), ids=lambda p: os.path.relpath(p, ROOT))
def test_nothing_ends_the_process(path):
    found = [f"{os.path.relpath(path, ROOT)}:{n}: {code.strip()}"
             for n, code in code_lines(path) if FORBIDDEN.search(code)]
    assert not found, "ends the process instead of raising:\n" + "\n".join(found)


@pytest.mark.parametrize("code", ["exit(1);", "std::abort();", "assert(x > 0);",
                                  "void f() noexcept {", "#pragma omp parallel for",
                                  "std::terminate();", "__builtin_trap();"])
def test_the_scan_sees(code):
    assert FORBIDDEN.search(code)


@pytest.mark.parametrize("code", ["static_assert(sizeof(int) == 4);", "note_exit(r, lane);",
                                  "at::parallel_for(0, n, 1, f);", "r.exited += 1;"])
def test_the_scan_passes(code):
    assert not FORBIDDEN.search(code)


def test_thread_entries_catch_everything():
    """In a file that starts threads (std::thread, pthread_create), each handler of std::exception
    is followed by a catch (...): an exception of any other type leaving a thread's function
    terminates the process."""
    starting = [p for p in library_sources()
                if re.search(r"std::thread\b(?!::)|pthread_create", open(p).read())]
    assert any(p.endswith("lane_runner.cpp") for p in starting)
    for path in starting:
        lines = [code for _, code in code_lines(path)]
        for n, code in enumerate(lines):
            if re.search(r"catch\s*\(\s*const std::exception", code):
                following = "".join(lines[n + 1:n + 4])
                assert "catch (...)" in following, (
                    f"{os.path.relpath(path, ROOT)}:{n + 1}: catch (const std::exception&) "
                    "without a catch (...) after it")
