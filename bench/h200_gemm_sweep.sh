#!/usr/bin/env bash
# Issue 34 on the H200: every variant of the grouped GEMMs verified against fp32, a small set of
# configs swept per model config, T and tile_m, the config table written, and the experts path
# timed with it against today's kernels (bench/h200_gemm_sweep.py says how).
#
#   bash bench/h200_gemm_sweep.sh        # from the repository root; ~6 min after a build
#
# Builds torch_argon first if its CUDA ops are not built here (the plan and combine ops are
# needed to time the experts path), and then gives the Python part what is left of ~7 min
# (at least 200 s). Env: OUT (default /tmp/argon_out), BUDGET_S (total seconds, default 400),
# T_LIST ("2048,8192,512,128,16384"), MODELS ("512x10x2048x512,128x8x2048x768"), PROCS.
# Results in $OUT: gemm_sweep.log, gemm_sweep.json (every measurement), tuned_configs.json (the
# config table: copy it to torch_argon/triton_ops/tuned_configs.json), gemm_sweep_table.txt
# (the table printed last: T, config, old us, new us, target, met?), compile/ (worker logs),
# build.log when it built.
set -uo pipefail
START=$SECONDS
OUT=${OUT:-/tmp/argon_out}
mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
[ -f setup.py ] && [ -d torch_argon ] || { echo "run from the repository root"; exit 2; }
. "$HERE/gpu_env.sh"
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true

if ! python3 -c "from torch_argon.testing import backends; import sys
sys.exit(not backends.get('cuda').available)" > /dev/null 2>&1; then
  echo "== build (torch_argon's CUDA ops are not built here)"
  if ! ARGON_CUDA_ARCH=90 MAX_JOBS=$(nproc) python3 setup.py build_ext --inplace \
      > "$OUT/build.log" 2>&1; then
    echo "build failed (see $OUT/build.log): the sweep runs, the experts path is skipped"
    tail -5 "$OUT/build.log"
  fi
  echo "== build done after $((SECONDS - START)) s"
fi

budget=$(( ${BUDGET_S:-400} - (SECONDS - START) ))
[ "$budget" -ge 200 ] || budget=200
args=(--out "$OUT" --budget-s "$budget")
[ -n "${T_LIST:-}" ] && args+=(--T "$T_LIST")
[ -n "${MODELS:-}" ] && args+=(--models "$MODELS")
[ -n "${PROCS:-}" ] && args+=(--procs "$PROCS")
# A hard stop past the soft budget: a hung kernel still leaves what was written so far.
timeout -s KILL $((budget + 120)) python3 "$HERE/h200_gemm_sweep.py" "${args[@]}"
rc=$?
echo "== h200_gemm_sweep.sh rc=$rc after $((SECONDS - START)) s; results in $OUT"
[ -f "$OUT/gemm_sweep_table.txt" ] && cat "$OUT/gemm_sweep_table.txt"
exit $rc
