#!/usr/bin/env bash
# gpuq's K loops (plain, pipelined, smem_act) on the lent GPU, in one call (issue 43, small T):
#   bash bench/lab/gpuq_loops.sh            # build, the gpuq CUDA tests, the loops' table
#   bash bench/lab/gpuq_loops.sh --build-only               # the build alone (a first call)
#   bash bench/lab/gpuq_loops.sh --formats Q4_K --T 128    # other arguments: gpuq_loops.py's
# On a fresh machine the lab build may take most of a call: build in one call (--build-only; a
# call cut short leaves ninja's finished objects, the next call goes on from them), then run the
# rest in a second, where the build is a no-op.
# 1. the lab build (NVCC_APPEND_FLAGS=-DGPUQ_LAB_LOOPS=1: every K loop compiled; setup.py
#    rebuilds by file times only, so a machine already built without the flag must be cleaned
#    first: bench/h200_session.sh keeps one environment for a session), sm_90, not in the
#    minutes below;
# 2. `pytest --gpu-run tests/test_gpuq.py` on 16 xdist workers (every GEMM case with every loop,
#    the lab loops' cases bit for bit against the plain loop), at most TESTS_S seconds
#    (default 240; log $OUT/gpuq_tests.log);
# 3. bench/lab/gpuq_loops.py: gate/up + down GEMMs of both configs at T = 128 and 512, Q4_K Q8_0
#    IQ4_XS Q6_K IQ2_XS Q2_K, each loop against the bf16 GEMMs in the same run, with the floors
#    ($OUT/gpuq_loops.json, $OUT/gpuq_loops.log; about 2-3 minutes).
# Exit status: 2 if the build failed; else 1 if a test failed or a loop case failed / differed.
set -uo pipefail
build_only=0
args=()
for a in "$@"; do
  if [ "$a" = "--build-only" ]; then build_only=1; else args+=("$a"); fi
done
OUT="${OUT:-/tmp/argon_out}"
mkdir -p "$OUT"
. "$(dirname "$0")/../gpu_env.sh"
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"

echo "== lab build (log: \$OUT/build.log)"
t0=$SECONDS
if ! NVCC_APPEND_FLAGS="-DGPUQ_LAB_LOOPS=1" ARGON_CUDA_ARCH=90 MAX_JOBS=16 \
    python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1; then
  tail -n 30 "$OUT/build.log"
  echo "== BUILD FAILED"
  exit 2
fi
echo "== build done in $((SECONDS - t0)) s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
[ "$build_only" = 1 ] && exit 0

t0=$SECONDS
workers=()
if python3 -c "import xdist" 2>/dev/null; then workers=(-n 16); fi
timeout -s INT "${TESTS_S:-240}" python3 -m pytest --gpu-run -q -rf -p no:cacheprovider \
  ${workers[@]+"${workers[@]}"} tests/test_gpuq.py > "$OUT/gpuq_tests.log" 2>&1
tests_rc=$?
echo "== tests rc=$tests_rc in $((SECONDS - t0)) s"
grep -E "^FAILED|^ERROR|crashed" "$OUT/gpuq_tests.log" | head -30
tail -n 1 "$OUT/gpuq_tests.log"

t0=$SECONDS
python3 bench/lab/gpuq_loops.py --json "$OUT/gpuq_loops.json" ${args[@]+"${args[@]}"} 2>&1 |
  tee "$OUT/gpuq_loops.log"
bench_rc=${PIPESTATUS[0]}
echo "== gpuq_loops.py rc=$bench_rc in $((SECONDS - t0)) s"
[ "$tests_rc" = 0 ] && [ "$bench_rc" = 0 ]
