#!/usr/bin/env bash
# The quantized experts on the lent GPU (issue 43), in one call:
#   bash bench/h200_quant.sh --quick           # Q4_K, Q8_0, IQ4_XS, Q6_K, IQ2_XS (< 4 min)
#   bash bench/h200_quant.sh                   # every format, and cuda_quantized's q8 mode
#   bash bench/h200_quant.sh --check --quick   # the CUDA tests of the quantized kernels first
# The build comes first (setup.py build_ext --inplace for sm_90: the gpuq kernels are compiled
# into the extension; a no-op when nothing changed; not in the benchmark's minutes). --check
# runs the CUDA tests of the gpuq kernels (moe_qmm_out's CUDA kernel on them included; the
# tile-decode GEMM's: tests/test_gpuq_tiled*.py) and of the CUDA quantized experts, at most
# CHECK_S seconds (default 240; log: $OUT/quant_check.log;
# the Triton quantized kernels' own CUDA tests are tests/test_quant_triton.py, in
# bench/h200_tests.sh). Every other argument goes to bench/bench_quant.py.
# Writes $OUT/h200_quant.json (also bench/results/h200_quant.json, from which
# `python bench/make_tables.py` makes the README's table) and $OUT/h200_quant.log; prints the
# table last. Exit status: 0; 1 if a check failed or a path raised (the table's last lines say
# which); 2 if the build failed.
set -uo pipefail
OUT="${OUT:-/tmp/argon_out}"
mkdir -p "$OUT"
. "$(dirname "$0")/gpu_env.sh"
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1

check=0
args=()
for a in "$@"; do
  if [ "$a" = "--check" ]; then check=1; else args+=("$a"); fi
done

echo "== build (log: \$OUT/build.log)"
t0=$SECONDS
if ! ARGON_CUDA_ARCH=90 MAX_JOBS=16 python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1; then
  tail -n 30 "$OUT/build.log"
  echo "== BUILD FAILED (log: \$OUT/build.log)"
  exit 2
fi
echo "== build done in $((SECONDS - t0)) s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader

check_rc=0
if [ "$check" = 1 ]; then
  t0=$SECONDS
  # xdist where installed: the formats' Triton kernels compile in parallel
  workers=$(python3 -c "import importlib.util as u; print('-n 8' if u.find_spec('xdist') else '')")
  # bounded (CHECK_S, default 240 s): the device time of one call is short; rc 124 = cut off
  timeout "${CHECK_S:-240}" python3 -m pytest -q -p no:cacheprovider $workers tests/test_gpuq.py \
    tests/test_cuda_quantized.py tests/test_gpuq_tiled.py tests/test_gpuq_tiled_experts.py \
    -k "cuda" > "$OUT/quant_check.log" 2>&1
  check_rc=$?
  echo "== CUDA tests of gpuq and the CUDA quantized experts: rc=$check_rc in $((SECONDS - t0)) s"
  tail -n 3 "$OUT/quant_check.log"
fi

t0=$SECONDS
python3 bench/bench_quant.py --json "$OUT/h200_quant.json" ${args[@]+"${args[@]}"} 2>&1 \
  | tee "$OUT/h200_quant.log"
rc=${PIPESTATUS[0]}
[ "$check_rc" -eq 0 ] || rc=1
cp "$OUT/h200_quant.json" bench/results/h200_quant.json 2>/dev/null || true
echo "== bench_quant.py rc=$rc in $((SECONDS - t0)) s (results: \$OUT/h200_quant.json, log: \$OUT/h200_quant.log)"
exit "$rc"
