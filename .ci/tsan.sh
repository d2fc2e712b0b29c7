#!/usr/bin/env bash
# ThreadSanitizer run of the Metal-on-host runtime: builds the plan and gather kernels (the
# unmodified .metal files), the shared launch recipe and the lane runner with -fsanitize=thread,
# without torch, and runs them on small shapes with every lane a concurrent thread, checking the
# results bit for bit (csrc/metal/host/standalone/tsan_check.cpp).
# Then a negative control: the same build with one barrier of plan_place deleted must make TSan
# report a race, which shows TSan really watches the lanes.
# Exit status non-zero on any race, mismatch, or a control that TSan does not flag.
# Needs g++ >= 12 or clang (C++20, _Float16); under a minute on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
CXX=${CXX:-g++}
OUT=${TSAN_OUT:-build/tsan}
mkdir -p "$OUT"
SRC=torch_argon/csrc
GEN=$OUT/generated
# The host adapters and the recipe's binding table, generated from the kernel signatures.
${PYTHON:-python3} -m build_tools.metal_codegen --out "$GEN" >/dev/null
FLAGS=(-std=c++20 -O1 -g -fsanitize=thread -ffp-contract=off -pthread
       -I"$SRC" -I"$SRC/metal/host" -I"$SRC/metal/host/shim" -I"$GEN")
UNITS=("$SRC/metal/host/lane_runner.cpp" "$SRC/metal/host/kernel_table.cpp"
       "$SRC/metal/host/host_encoder.cpp" "$SRC/metal/recipe.cpp" "$SRC/metal/bind.cpp"
       "$GEN/host_kernels/gather.cpp" "$SRC/metal/host/standalone/tsan_check.cpp")
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 report_signal_unsafe=0"

build() {  # build <binary> <dir holding plan.metal>; one compiler call (bash 3.2 friendly)
  "$CXX" "${FLAGS[@]}" -I"$2" -Itorch_argon/metal "${UNITS[@]}" "$GEN/host_kernels/plan.cpp" \
    -o "$1"
}

echo "== building the host runner with ThreadSanitizer"
build "$OUT/tsan_check" torch_argon/metal
echo "== running plan and gather kernels, lanes as concurrent threads"
"$OUT/tsan_check"
echo "== ThreadSanitizer: no race reported"

echo "== negative control: plan_place without its first barrier (block_ids written, then read by other lanes)"
mkdir -p "$OUT/mutant"
awk '/^kernel void plan_place/ {inside=1}
     inside && /threadgroup_barrier/ {n++; if (n == 1) {print "  // barrier deleted (control)"; next}}
     {print}' torch_argon/metal/plan.metal > "$OUT/mutant/plan.metal"
grep -q "barrier deleted (control)" "$OUT/mutant/plan.metal"
# host_kernels/plan.cpp includes "plan.metal": the mutant's directory comes first on the path.
build "$OUT/tsan_mutant" "$OUT/mutant"
set +e
"$OUT/tsan_mutant" > "$OUT/mutant.log" 2>&1
rc=$?
set -e
if [[ $rc -eq 66 ]] && grep -q "WARNING: ThreadSanitizer: data race" "$OUT/mutant.log"; then
  echo "== control flagged by ThreadSanitizer (as it must be):"
  grep -m1 -A6 "WARNING: ThreadSanitizer: data race" "$OUT/mutant.log" | sed 's/^/   /'
else
  echo "!! the control with a deleted barrier was NOT flagged (exit $rc)"; tail -20 "$OUT/mutant.log"
  exit 1
fi
