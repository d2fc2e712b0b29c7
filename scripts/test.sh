#!/usr/bin/env bash
# The test suite: every backend built here against the reference, plus the ThreadSanitizer run
# of the Metal kernels on host threads (.ci/tsan.sh, about 45 s). Extra arguments go to pytest;
# a relative path among them (a file, a folder, a node id) is the caller's, as for any command.
#
# The ThreadSanitizer run goes first when the whole suite runs: when no argument names tests (a
# path or node id, -k or -m), as in CI (.ci/run). ARGON_TSAN=1 runs it anyway, ARGON_TSAN=0
# never:
#   bash scripts/test.sh                          # TSan, then every test
#   bash scripts/test.sh tests/test_plan.py -x    # that file only
#   ARGON_TSAN=1 bash scripts/test.sh -k plan     # TSan, then the tests named *plan*

# plan_run CALLER ARG...: sets PYTEST_ARGS (the arguments, with relative paths that exist in the
# caller's directory CALLER made absolute) and RUN_TSAN (1 or 0, as the header says).
plan_run() {
  local caller=$1 arg path names_tests=0
  shift
  PYTEST_ARGS=()
  for arg in "$@"; do
    case "$arg" in
      -k* | -m*) names_tests=1 ;;
      -*) ;;
      *)
        path=${arg%%::*}
        if [[ "$path" != /* && -n "$path" && -e "$caller/$path" ]]; then
          arg="$caller/$arg"
          names_tests=1
        elif [[ -n "$path" && -e "$path" ]]; then  # absolute, or the checkout's
          names_tests=1
        fi ;;
    esac
    PYTEST_ARGS+=("$arg")
  done
  case "${ARGON_TSAN:-}" in
    1) RUN_TSAN=1 ;;
    0) RUN_TSAN=0 ;;
    *) RUN_TSAN=$((1 - names_tests)) ;;
  esac
}

# Sourced (by a test of plan_run): the function only.
[[ "${BASH_SOURCE[0]}" == "$0" ]] || return 0

caller=$PWD
# ARGON_TEST_BUILD=1: the build adds torch_argon._C_test, the test executors (metal_host, and in
# CUDA builds metal_cuda), which a user's install (scripts/main.sh, pip install .) leaves out.
export ARGON_TEST_BUILD=1
. "$(dirname "$0")/env.sh"  # (runs in the checkout from here on)
plan_run "$caller" "$@"
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
if [ -f .ci/tsan.sh ]; then
  if [ "$RUN_TSAN" = 1 ]; then
    bash .ci/tsan.sh
  else
    echo "test.sh: the ThreadSanitizer run is skipped (tests were named; ARGON_TSAN=1 runs it)"
  fi
fi
python -m pytest -q ${PYTEST_ARGS[@]+"${PYTEST_ARGS[@]}"}
