#!/usr/bin/env bash
# The test suite: every backend built here against the reference, plus the ThreadSanitizer run
# of the Metal kernels on host threads. Extra arguments go to pytest.
# ARGON_TEST_BUILD=1: the build adds torch_argon._C_test, the test executors (metal_host, and in
# CUDA builds metal_cuda), which a user's install (scripts/main.sh, pip install .) leaves out.
export ARGON_TEST_BUILD=1
. "$(dirname "$0")/env.sh"
# clang-19 for the strict checks of the .metal files (tests/test_metal_strict.py): Debian's
# package, installed when missing. Without apt (macOS) those tests skip and say why.
if ! command -v clang++-19 >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    { apt-get update -qq && apt-get install -y -qq clang-19 >/dev/null; } ||
      echo "test.sh: installing clang-19 failed; the strict Metal checks will skip"
  else
    echo "test.sh: no apt-get here (or not root): clang-19 not installed; the strict Metal checks will skip"
  fi
fi
if [ -f .ci/tsan.sh ]; then bash .ci/tsan.sh; fi
python -m pytest -q "$@"
