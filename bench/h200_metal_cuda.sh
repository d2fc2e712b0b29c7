#!/usr/bin/env bash
# The .metal kernels as SIMT code on the H200 (issue 33 item 4), in one call of under 8 minutes:
#   1. build (the CUDA extension carries the metal_cuda backend: the unmodified .metal files
#      compiled by nvcc through csrc/metal/cuda/prelude and generated __global__ wrappers);
#   2. the Metal parity suite on backend metal_cuda (plan, gather, combine, swiglu, moe_mm, the
#      quantized dequantize and moe_qmm, bad input, aliasing, opcheck: -k metal_cuda);
#   3. compute-sanitizer racecheck, synccheck, memcheck and initcheck over every Metal kernel
#      (tools/metal_cuda_sanitize.py ops: each kernel once, results checked), which must report
#      nothing, and over each tool's deliberately wrong control kernel
#      (csrc/metal/cuda/sanitizer_selftest.metal), which it must flag.
# Logs to $OUT (default /tmp/argon_out); a table last. Exit 1 if anything is not as expected.
# What this does not show: Apple's scheduling (CUDA warps are not lockstep; Metal's simdgroups
# are), the simdgroup-matrix layout and rounding (emulated with shuffles here), and any speed.
#   bash bench/h200_metal_cuda.sh [--skip-build]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/argon_out}"
mkdir -p "$OUT"
. bench/gpu_env.sh
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
SAN=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
T0=$(date +%s)
ROWS=()
FAILED=0

row() {  # row STEP EXPECTED RESULT SECONDS
  ROWS+=("$(printf '%-46s %-8s %-36s %5ss' "$1" "$2" "$3" "$4")")
  case "$3" in ok*|flagged*) ;; *) FAILED=1 ;; esac
}

error_count() {  # error_count LOG: the sanitizer's last error count line in LOG
  grep -E "ERROR SUMMARY: [0-9]+ errors?$|RACECHECK SUMMARY" "$1" | tail -1 | sed 's/^=* *//'
}

run() {  # run NAME TIMEOUT COMMAND...: log to $OUT/NAME.log; sets RC and SECS
  local name=$1 limit=$2; shift 2
  local t=$(date +%s)
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  RC=$?
  SECS=$(( $(date +%s) - t ))
}

if [ "${1:-}" != "--skip-build" ]; then
  ARGON_CUDA_ARCH=90 MAX_JOBS=16 run build 330 "$PY" setup.py build_ext --inplace
  [ $RC -eq 0 ] && row build ok "ok" $SECS || { row build ok "FAILED rc=$RC (build.log)" $SECS; }
fi

PARITY="tests/test_plan.py tests/test_gather.py tests/test_combine.py tests/test_swiglu.py
        tests/test_moe_mm.py tests/test_quant_ops.py tests/test_bad_input.py tests/test_aliasing.py
        tests/test_opcheck.py"
XDIST=$("$PY" -c 'import xdist' 2>/dev/null && echo "-n 8")
# shellcheck disable=SC2086
run parity 150 "$PY" -m pytest -q -p no:cacheprovider $XDIST $PARITY -k metal_cuda
summary=$(grep -E "passed|failed|error" "$OUT/parity.log" | tail -1)
[ $RC -eq 0 ] && row "parity -k metal_cuda" "pass" "ok: $summary" $SECS ||
  row "parity -k metal_cuda" "pass" "FAILED: ${summary:-rc=$RC}" $SECS

# Only our wrappers are checked (extern "C" argon_metal__*), not torch's own kernels.
FILTER=(--kernel-name kns=argon_metal__)
"$SAN" --help 2>&1 | grep -q -- "--kernel-name" || FILTER=()
export PYTORCH_NO_CUDA_MEMORY_CACHING=1
declare -A CONTROL=([racecheck]=sanitizer_race [synccheck]=sanitizer_divergent_barrier
                    [memcheck]=sanitizer_out_of_bounds [initcheck]=sanitizer_uninitialised_read)
# memcheck knows allocations, not which one a pointer came from: padding after each allocation
# makes a write just past one buffer an error even where another buffer follows it.
PAD=()
"$SAN" --help 2>&1 | grep -q -- "--padding" && PAD=(--padding 4096)
for tool in racecheck synccheck memcheck initcheck; do
  EXTRA=()
  [ "$tool" = memcheck ] && EXTRA=("${PAD[@]}")
  run "sanitize_ops_$tool" 75 "$SAN" --tool "$tool" --error-exitcode 99 "${EXTRA[@]}" "${FILTER[@]}" \
      "$PY" tools/metal_cuda_sanitize.py ops
  if [ $RC -ne 0 ] && [ ${#FILTER[@]} -gt 0 ] && grep -qiE "invalid|unrecognized|unknown" "$OUT/sanitize_ops_$tool.log" &&
      ! grep -q "metal_cuda ops" "$OUT/sanitize_ops_$tool.log"; then
    FILTER=()  # this sanitizer spells the kernel filter otherwise: check every kernel
    run "sanitize_ops_$tool" 75 "$SAN" --tool "$tool" --error-exitcode 99 "${EXTRA[@]}" \
        "$PY" tools/metal_cuda_sanitize.py ops
  fi
  errors=$(error_count "$OUT/sanitize_ops_$tool.log")
  if [ $RC -eq 0 ] && grep -q "all results match" "$OUT/sanitize_ops_$tool.log"; then
    row "$tool: every Metal kernel" "clean" "ok: ${errors:-no summary}" $SECS
  else
    row "$tool: every Metal kernel" "clean" "FAILED rc=$RC: ${errors:-see log}" $SECS
  fi
  run "sanitize_control_$tool" 60 "$SAN" --tool "$tool" --error-exitcode 99 "${EXTRA[@]}" "${FILTER[@]}" \
      "$PY" tools/metal_cuda_sanitize.py control "${CONTROL[$tool]}"
  errors=$(error_count "$OUT/sanitize_control_$tool.log")
  if [ $RC -eq 99 ]; then
    row "$tool: control ${CONTROL[$tool]}" "flagged" "flagged: ${errors}" $SECS
  else
    row "$tool: control ${CONTROL[$tool]}" "flagged" "NOT FLAGGED rc=$RC: ${errors:-see log}" $SECS
  fi
done

{
  echo
  echo "metal_cuda on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), $(( $(date +%s) - T0 )) s"
  printf '%-46s %-8s %-36s %6s\n' step expected result time
  printf '%s\n' "${ROWS[@]}"
  echo "not shown here: Apple's scheduling, simdgroup-matrix layout and rounding, speed"
} | tee "$OUT/metal_cuda_summary.txt"
exit $FAILED
