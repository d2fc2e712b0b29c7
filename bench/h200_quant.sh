#!/usr/bin/env bash
# The quantized experts on the lent H200 (issue 31), in one call of under 7 minutes:
#   bash bench/h200_quant.sh             # check every format (the CUDA tests), then the benchmark
#   bash bench/h200_quant.sh --sweep     # + Q4_K block-shape sweep (time-budgeted)
#   bash bench/h200_quant.sh --quick     # T = 128 and 2048 only
#   bash bench/h200_quant.sh --gpuq      # the gpuq CUDA C++ kernels' GEMMs instead
#                                        # (bench_quant_gpuq.py): every format, both activation
#                                        # modes, bf16 baseline, floors; about 90 s after the
#                                        # build; writes $OUT/h200_quant_gpuq.json (also
#                                        # bench/results/)
# Builds the extension first only if this Python has none (bench/h200_run.sh build does too;
# the build is not in the 7 minutes). Writes $OUT/h200_quant.json (also bench/results/),
# $OUT/h200_quant.log; prints the table last. The check of every format is the CUDA tests of
# tests/test_quant_triton.py (dequantize bit for bit, the GEMMs within tolerance; log:
# $OUT/quant_check.log). Exit status: 0; 1 if a format's check failed or a path raised (the
# table's last lines say which); 2 if the build failed.
set -uo pipefail
OUT="${OUT:-/tmp/argon_out}"
mkdir -p "$OUT"
. "$(dirname "$0")/gpu_env.sh"
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1

suffix=$(python3 -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
if [ ! -f "torch_argon/_C$suffix" ]; then
  echo "== build: no torch_argon/_C$suffix for this Python"
  t0=$SECONDS
  if ! ARGON_CUDA_ARCH=90 MAX_JOBS=16 python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1; then
    tail -n 30 "$OUT/build.log"
    echo "== BUILD FAILED (log: \$OUT/build.log)"
    exit 2
  fi
  echo "== build done in $((SECONDS - t0)) s"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
if [[ " $* " == *" --gpuq "* ]]; then
  python3 bench/bench_quant.py "$@" --json "$OUT/h200_quant_gpuq.json" 2>&1 \
    | tee "$OUT/h200_quant_gpuq.log"
  rc=${PIPESTATUS[0]}
  cp "$OUT/h200_quant_gpuq.json" bench/results/h200_quant_gpuq.json 2>/dev/null || true
  exit "$rc"
fi
t0=$SECONDS
# xdist where installed: every format's kernels compile in parallel.
workers=$(python3 -c "import importlib.util as u; print('-n 8' if u.find_spec('xdist') else '')")
python3 -m pytest -q -p no:cacheprovider $workers tests/test_quant_triton.py \
  -k "test_dequantize_cuda or test_qmm_cuda" > "$OUT/quant_check.log" 2>&1
check_rc=$?
echo "== check of every format (tests/test_quant_triton.py, CUDA): rc=$check_rc in $((SECONDS - t0)) s"
tail -n 3 "$OUT/quant_check.log"
t0=$SECONDS
python3 bench/bench_quant.py --json "$OUT/h200_quant.json" "$@" 2>&1 | tee "$OUT/h200_quant.log"
rc=${PIPESTATUS[0]}
[ "$check_rc" -eq 0 ] || rc=1
cp "$OUT/h200_quant.json" bench/results/h200_quant.json 2>/dev/null || true
echo "== bench_quant.py rc=$rc in $((SECONDS - t0)) s (results: \$OUT/h200_quant.json, log: \$OUT/h200_quant.log)"
exit "$rc"
