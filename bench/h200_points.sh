#!/usr/bin/env bash
# The second call of a device session (issues 45 and 43), after h200_profile.sh's: the points
# the automatic choice of the padded Hopper path is set from, and the small-T K loops, in ONE
# call, each step capped so that the whole ends before DEADLINE_S (default 560 s):
#   1. the lab build (NVCC_APPEND_FLAGS=-DGPUQ_LAB_LOOPS=1: gpuq's three K loops, plain,
#      pipelined and smem_act, compiled; the Hopper units as in every build)
#   2. issue 45: tests/test_cuda_hopper_padded.py under CUDA_LAUNCH_BLOCKING (the order's window
#      is chosen per launch now)
#   3. issue 45: bench_hopper.py at T = POINTS_T (default 4096,6144,16384): the four paths and
#      every GEMM alone, for the rows per expert where the padded path starts to win
#   4. issue 43: the gpuq CUDA tests (both loops; at most TESTS_S, default 60 s), then
#      bench/lab/gpuq_loops.py at T = 128 / 512 for LOOP_FORMATS (default Q4_K,IQ4_XS,Q8_0,
#      IQ2_XS)
# Run through bench/h200_session.sh points. Writes under $OUT (at most 8 files come back):
# step_build.txt, padded_tests.log, hopper.json, hopper_bench.log, gpuq_tests.log,
# gpuq_loops.json, gpuq_loops.log.
set -uo pipefail
here="$(dirname "$0")"
. "$here/one_call.sh"
start_call 560

r=$(left 60)
[ "$r" -gt 20 ] && {
  CUDA_LAUNCH_BLOCKING=1 timeout "$r" python3 -m pytest -q -x -p no:cacheprovider \
    tests/test_cuda_hopper_padded.py > "$OUT/padded_tests.log" 2>&1
  echo "== padded tests rc=$? at ${SECONDS}s"; tail -n 2 "$OUT/padded_tests.log"
}
r=$(left 150)
[ "$r" -gt 30 ] && {
  timeout "$r" python3 bench/bench_hopper.py --out "$OUT/hopper.json" --hbm-tbps "$hbm" \
    --T "${POINTS_T:-4096,6144,16384}" 2>&1 | tee "$OUT/hopper_bench.log"
  echo "== bench_hopper at ${SECONDS}s"
}
r=$(left "${TESTS_S:-60}")
[ "$r" -gt 20 ] && {
  workers=()
  python3 -c "import xdist" 2>/dev/null && workers=(-n 16)
  timeout -s INT "$r" python3 -m pytest --gpu-run -q -rf -p no:cacheprovider \
    ${workers[@]+"${workers[@]}"} tests/test_gpuq.py > "$OUT/gpuq_tests.log" 2>&1
  echo "== gpuq tests rc=$? at ${SECONDS}s"
  grep -E "^FAILED|^ERROR|crashed" "$OUT/gpuq_tests.log" | head -20
  tail -n 1 "$OUT/gpuq_tests.log"
}
r=$(left 400)
[ "$r" -gt 30 ] && {
  timeout "$r" python3 bench/lab/gpuq_loops.py --json "$OUT/gpuq_loops.json" \
    --formats "${LOOP_FORMATS:-Q4_K,IQ4_XS,Q8_0,IQ2_XS}" 2>&1 | tee "$OUT/gpuq_loops.log"
  echo "== gpuq_loops at ${SECONDS}s"
}
rm -f "$OUT/build.log" "$OUT/hopper_sass.json"
ls "$OUT"
