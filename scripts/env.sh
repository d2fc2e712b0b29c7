# Sourced by scripts/main.sh and scripts/test.sh: makes .venv (once), installs torch and the
# build/test requirements, and builds torch_argon in place. Safe to re-run: a no-op build when
# nothing changed.
#   ARGON_TORCH   the torch requirement to install when .venv has none (default torch==2.13.0;
#                 on macOS the default wheel has MPS; on Linux this machine's wheel is CPU-only)
#   ARGON_PYTHON  the interpreter that makes .venv (default python3)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [ ! -x .venv/bin/python ]; then
  "${ARGON_PYTHON:-python3}" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
export PIP_DISABLE_PIP_VERSION_CHECK=1
python -c "import torch" 2>/dev/null || pip install -q "${ARGON_TORCH:-torch==2.13.0}"
pip install -q -r requirements-dev.txt
# clang-19 for the strict checks of the .metal files (tests/test_metal_strict.py): Debian's
# package, installed when missing. Without apt (macOS) those tests skip and say why.
if ! command -v clang++-19 >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    { apt-get update -qq && apt-get install -y -qq clang-19 >/dev/null; } ||
      echo "env.sh: installing clang-19 failed; the strict Metal checks will skip"
  else
    echo "env.sh: no apt-get here (or not root): clang-19 not installed; the strict Metal checks will skip"
  fi
fi
MAX_JOBS="${MAX_JOBS:-$(python -c 'import os; print(os.cpu_count())')}" \
  python setup.py -q build_ext --inplace
