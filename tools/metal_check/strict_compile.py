"""Compiles .metal sources with clang as C++17 against the strict, declaration-only <metal_stdlib>
of strict/ (real address spaces, no implicit vector conversions, Metal's overload sets, no
double), with the warnings that matter for GPU code made errors: each file of the library, the
flattened library as setup.py embeds it (one translation unit, as Metal compiles it), and the
self-test kernels of the host runner and of the CUDA sanitizer run.

Clang cannot parse Metal's `template [[host_name("x")]] kernel ...` instantiations, so that
attribute is dropped from each file's text first (line numbers kept).

Usage: python tools/metal_check/strict_compile.py [FILE.metal ...]   (no files: the library)
Environment: ARGON_CLANG, the clang++ to use (default clang++-19, else clang++).
"""
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the checkout: build_tools
from build_tools import metal_codegen  # noqa: E402

STRICT_DIR = os.path.join(HERE, "strict")
FLAGS = ["-x", "c++", "-std=c++17", "-fsyntax-only", "-ferror-limit=20",
         "-Wall", "-Wextra", "-Wno-unknown-attributes", "-Wno-unused-parameter",
         "-Wno-unused-function", "-Werror=double-promotion", "-Werror=implicit-int-conversion",
         "-Werror=shorten-64-to-32", "-Werror=implicit-float-conversion",
         "-Werror=sign-compare", "-Werror=uninitialized", "-Werror=return-type"]
HOST_NAME = re.compile(r"\[\[\s*host_name\s*\((?:[^()]|\([^()]*\))*\)\s*\]\]")


def find_clang():
    for c in (os.environ.get("ARGON_CLANG"), "clang++-19", "clang++"):
        if c and shutil.which(c):
            return c
    return None


def without_host_names(text):
    return HOST_NAME.sub("", text)


def compile_text(text, name, include_dirs, clang=None):
    """(ok, diagnostics) of one source given as text, reported under `name`."""
    clang = clang or find_clang()
    cmd = [clang, *FLAGS, "-I", STRICT_DIR]
    for d in include_dirs:
        cmd += ["-I", d]
    src = f'#line 1 "{name}"\n' + without_host_names(text)
    p = subprocess.run(cmd + ["-"], input=src, capture_output=True, text=True)
    return p.returncode == 0, p.stdout + p.stderr


def compile_file(path, include_dirs=(), clang=None):
    dirs = [os.path.dirname(os.path.abspath(path)), *metal_codegen.INCLUDE_DIRS, *include_dirs]
    return compile_text(open(path).read(), os.path.relpath(path), dirs, clang)


def library_targets():
    """(name, text, include dirs) of everything the check compiles by default."""
    out = [(os.path.relpath(p), open(p).read(), list(metal_codegen.INCLUDE_DIRS))
           for p in metal_codegen.library_files()]
    out.append(("<flattened library: build/argon_generated/metal_source.inc>",
                metal_codegen.flattened_library(), []))
    for p in metal_codegen.HOST_ONLY + metal_codegen.CUDA_ONLY:
        out.append((os.path.relpath(p), open(p).read(), [os.path.dirname(p)]))
    return out


def main(argv):
    clang = find_clang()
    if clang is None:
        print("strict_compile: SKIP: no clang++ (install clang-19: scripts/env.sh does on Debian)")
        return 0
    if argv:
        targets = [(os.path.relpath(p), open(p).read(), [os.path.dirname(os.path.abspath(p)),
                                                       *metal_codegen.INCLUDE_DIRS]) for p in argv]
    else:
        targets = library_targets()
    failed = 0
    for name, text, dirs in targets:
        ok, diag = compile_text(text, name, dirs, clang)
        print(f"== {name}: {'ok' if ok else 'FAILED'}")
        if diag.strip():
            print(diag.rstrip())
        failed += not ok
    print(f"strict_compile ({clang}): {len(targets) - failed} of {len(targets)} compiled")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
