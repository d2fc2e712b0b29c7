# Sourced by scripts/main.sh and scripts/test.sh: makes .venv (once), installs torch and the
# requirements, builds torch_argon in place and puts the checkout on .venv's path, so that
# .venv/bin/python imports torch_argon from any directory (an editable install). Each step is
# skipped when nothing it depends on changed, so a second run costs seconds.
#   ARGON_REQUIREMENTS  the requirements file to install (default requirements-dev.txt;
#                       scripts/main.sh installs requirements-main.txt, without the test extras)
#   ARGON_TORCH         the torch requirement to install when .venv has none (default
#                       torch==2.13.0; on macOS the default wheel has MPS; on Linux this machine's
#                       wheel is CPU-only)
#   ARGON_PYTHON        the interpreter that makes .venv (default python3)
#   MAX_JOBS            parallel compile jobs (default: every core)
#   ARGON_TEST_BUILD    1: build the test executors too (torch_argon._C_test; scripts/test.sh)
# The compilers' output goes to build/argon_build.log; the terminal gets one line per library
# built (and the log's tail if the build fails).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [ ! -x .venv/bin/python ]; then
  echo "argon: making .venv" >&2
  "${ARGON_PYTHON:-python3}" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
export PIP_DISABLE_PIP_VERSION_CHECK=1
# (found, not imported: importing torch costs seconds on every run)
if ! python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"; then
  echo "argon: installing ${ARGON_TORCH:-torch==2.13.0}" >&2
  pip install -q "${ARGON_TORCH:-torch==2.13.0}"
fi
# pip only when a requirements file changed since this list was last installed (a stamp in .venv;
# delete .venv/.argon-*.stamp to force it).
requirements="${ARGON_REQUIREMENTS:-requirements-dev.txt}"
stamp=".venv/.argon-$(basename "$requirements" .txt).stamp"
digest="$(cat requirements*.txt | cksum)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$digest" ]; then
  echo "argon: installing $requirements" >&2
  pip install -q -r "$requirements"
  echo "$digest" > "$stamp"
fi
# A no-op when no source changed since the last build (setup.py's BuildExtension).
MAX_JOBS="${MAX_JOBS:-$(python -c 'import os; print(os.cpu_count())')}" \
  python setup.py -q build_ext --inplace
# The editable install: the checkout on .venv's import path, so the package and the library just
# built in place are what `import torch_argon` finds from any directory (a .pth file, as
# `setup.py develop` made; pip's editable install builds in a fresh temporary directory, so each
# change there would recompile everything).
pth="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/torch_argon_checkout.pth"
[ "$(cat "$pth" 2>/dev/null)" = "$ROOT" ] || echo "$ROOT" > "$pth"
