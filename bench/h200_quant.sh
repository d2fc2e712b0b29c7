#!/usr/bin/env bash
# The quantized experts on the lent GPU (issue 43), in one call:
#   bash bench/h200_quant.sh --quick           # Q4_K, Q8_0, IQ4_XS, Q6_K, IQ2_XS (< 4 min)
#   bash bench/h200_quant.sh                   # every format, and cuda_quantized's q8 mode
#   bash bench/h200_quant.sh --check --quick   # the CUDA tests of the quantized kernels first
#   bash bench/h200_quant.sh --quick --llamacpp   # with llama.cpp's column (ggml's MUL_MAT_ID)
#   bash bench/h200_quant.sh --llamacpp --build-only   # the builds (and --check) only
# The build comes first (setup.py build_ext --inplace for sm_90: the gpuq kernels are compiled
# into the extension; a no-op when nothing changed; not in the benchmark's minutes). --check
# runs the CUDA tests of the gpuq kernels (moe_qmm_out's CUDA kernel on them included; the
# tile-decode GEMM's: tests/test_gpuq_tiled*.py) and of the CUDA quantized experts, at most
# CHECK_S seconds (default 240; log: $OUT/quant_check.log;
# the Triton quantized kernels' own CUDA tests are tests/test_quant_triton.py, in
# bench/h200_tests.sh). --llamacpp adds llama.cpp's column: ggml's test-backend-ops at
# bench/baselines/ggml_bin/test-backend-ops-cuda, built here from the carried
# bench/baselines/ggml_src/ (stage_ggml.sh) when the binary is not there, beside the extension's
# build (both before any timing; log: $OUT/ggml_build.log); a failed ggml build leaves the column
# out and says so. --build-only stops after the builds (and --check): a first call of two on
# a warm machine, whose second finds both builds done. Every other argument goes to
# bench/bench_quant.py.
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
llamacpp=0
build_only=0
args=()
for a in "$@"; do
  case "$a" in
    --check) check=1 ;;
    --llamacpp) llamacpp=1 ;;
    --build-only) build_only=1 ;;
    *) args+=("$a") ;;
  esac
done

ggml_bin=bench/baselines/ggml_bin/test-backend-ops-cuda
ggml_pid=""
if [ "$llamacpp" = 1 ] && [ ! -x "$ggml_bin" ]; then
  echo "== llama.cpp baseline: building ggml's test-backend-ops beside the extension (log: \$OUT/ggml_build.log)"
  MAX_JOBS=16 bash bench/baselines/build_ggml_cuda.sh > "$OUT/ggml_build.log" 2>&1 &
  ggml_pid=$!
fi

echo "== build (log: \$OUT/build.log)"
t0=$SECONDS
if ! ARGON_CUDA_ARCH=90 MAX_JOBS=16 python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1; then
  tail -n 30 "$OUT/build.log"
  echo "== BUILD FAILED (log: \$OUT/build.log)"
  [ -z "$ggml_pid" ] || kill "$ggml_pid"
  exit 2
fi
echo "== build done in $((SECONDS - t0)) s"
build_t0=$t0
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

# the ggml build (if any) went on beside the checks; nothing is timed before it ends
if [ -n "$ggml_pid" ]; then
  wait "$ggml_pid" && echo "== ggml build done at $((SECONDS - build_t0)) s" \
    || { tail -n 20 "$OUT/ggml_build.log"; echo "== GGML BUILD FAILED: no llama.cpp column"; }
  cp bench/baselines/ggml_build_cuda.unit_times "$OUT/ggml_unit_times.txt" 2>/dev/null || true
fi
if [ "$llamacpp" = 1 ] && [ -x "$ggml_bin" ]; then
  # one small case first: the binary runs on this GPU (a few seconds)
  python3 bench/baselines/ggml_mul_mat_id.py "$ggml_bin" --formats Q4_K --shapes 128,8,2048,768 \
    --T 128 && args+=(--llamacpp "$ggml_bin") || echo "== GGML BINARY FAILED: no llama.cpp column"
fi

[ "$build_only" = 0 ] || exit "$check_rc"

t0=$SECONDS
python3 bench/bench_quant.py --json "$OUT/h200_quant.json" ${args[@]+"${args[@]}"} 2>&1 \
  | tee "$OUT/h200_quant.log"
rc=${PIPESTATUS[0]}
[ "$check_rc" -eq 0 ] || rc=1
cp "$OUT/h200_quant.json" bench/results/h200_quant.json 2>/dev/null || true
echo "== bench_quant.py rc=$rc in $((SECONDS - t0)) s (results: \$OUT/h200_quant.json, log: \$OUT/h200_quant.log)"
exit "$rc"
