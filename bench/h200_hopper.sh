#!/usr/bin/env bash
# The Hopper dense experts (issue 45: path="cuda_hopper_dense", CUTLASS 3's warp-specialized
# grouped GEMM) on the lent H100 / H200. Two calls on one warm machine (each under 10 minutes):
#   bash bench/h200_hopper.sh --build     # build (sm_90 + the Hopper unit), SASS check: ~4-6 min
#   bash bench/h200_hopper.sh             # tests, benchmark, ncu: ~6-9 min (build: a no-op;
#                                         # each step capped: CHECK_S 180, BENCH_S 280, NCU_S 100)
#   bash bench/h200_hopper.sh --quick     # the same with T = 512 and 8192 only: ~4 min
# Staged here first (CUTLASS's headers travel as the nvidia-cutlass wheel, 6.4 MB; .whl/ is
# gitignored; name it in the call's carry):
#   python3 -m pip download --no-deps nvidia-cutlass==4.2.0.0 -d .whl
# and, for vLLM's column, bash bench/baselines/stage_vllm.sh (carry .baselines); without it the
# JSON says why vLLM did not run. bench/h200_vllm.sh --paths cuda_hopper_dense gives the same
# side by side with its own table.
# Steps: the build (h200_run.sh's build step: setup.py build_ext --inplace for sm_90, where
# build_tools/hopper_build.py compiles the unit with the wheel's headers: ARGON_CUTLASS_DIR), tools/hopper_unit_check.py on the built
# objects (HGMMA present, no local memory), then tests/test_cuda_hopper_dense.py,
# bench/bench_hopper.py (the experts path against triton_dense and vLLM, graph replay; every
# GEMM configuration alone; floors), and Nsight Compute (`--set full`) on the two GEMMs at E=512
# T=8192. Writes under $OUT: build.log, hopper_sass.json, hopper_tests.log, hopper.json,
# hopper_bench.log, hopper_gemms.ncu-rep, hopper_ncu.txt. Exit status: 2 if the build failed,
# 1 if a check, test or the benchmark failed, else 0.
set -uo pipefail
OUT="${OUT:-/tmp/argon_out}"
mkdir -p "$OUT"
. "$(dirname "$0")/gpu_env.sh"
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1

build_only=0
args=()
for a in "$@"; do
  if [ "$a" = "--build" ]; then build_only=1; else args+=("$a"); fi
done

if [ -z "${ARGON_CUTLASS_DIR:-}" ]; then  # gpu_env.sh found no wheel in .whl/
  echo "== no CUTLASS wheel in .whl/ (stage it: python3 -m pip download --no-deps nvidia-cutlass==4.2.0.0 -d .whl; carry .whl)"
  exit 2
fi

# h200_run.sh's build step (sm_90, log in $OUT/build.log), with the wheel's headers found
bash "$(dirname "$0")/h200_run.sh" build | tee "$OUT/build_step.txt"
if ! grep -q "^== build rc=0" "$OUT/build_step.txt"; then
  echo "== BUILD FAILED (log: \$OUT/build.log)"
  exit 2
fi
rm -f "$OUT/build_step.txt"
if grep -h "no Hopper grouped GEMM" "$OUT/build.log"; then
  exit 2
fi

rc=0
python3 tools/hopper_unit_check.py --objects build/argon_hopper --json "$OUT/hopper_sass.json" || rc=1
[ "$build_only" = 1 ] && exit "$rc"

t0=$SECONDS
timeout "${CHECK_S:-180}" python3 -m pytest -q -p no:cacheprovider tests/test_cuda_hopper_dense.py \
  > "$OUT/hopper_tests.log" 2>&1 || rc=1
echo "== tests/test_cuda_hopper_dense.py in $((SECONDS - t0)) s:"
tail -n 3 "$OUT/hopper_tests.log"

t0=$SECONDS
timeout "${BENCH_S:-280}" python3 bench/bench_hopper.py --out "$OUT/hopper.json" \
  ${args[@]+"${args[@]}"} 2>&1 | tee "$OUT/hopper_bench.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
echo "== bench/bench_hopper.py in $((SECONDS - t0)) s (results: \$OUT/hopper.json)"

t0=$SECONDS
# the profile target launches gate/up then down twice; the second pair is profiled
timeout "${NCU_S:-100}" ncu --set full -k regex:device_kernel --launch-skip 2 --launch-count 2 \
  -f -o "$OUT/hopper_gemms" python3 bench/bench_hopper.py --profile-gemms > "$OUT/hopper_ncu.log" 2>&1 &&
  ncu -i "$OUT/hopper_gemms.ncu-rep" --page details > "$OUT/hopper_ncu.txt" 2>&1
echo "== ncu on the two GEMMs (E=512 T=8192): rc=$? in $((SECONDS - t0)) s"
grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy" \
  "$OUT/hopper_ncu.txt" 2>/dev/null | head -n 12
rm -f "$OUT/hopper_ncu.log"
exit "$rc"
