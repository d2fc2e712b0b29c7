#!/usr/bin/env bash
# This session's new GPU code and the limiters the first device run left unmeasured, in ONE call
# (machines are scarce: a second call may never come), each step capped so that the whole ends
# before DEADLINE_S (default 560 s from the call's start), the first answers first:
#   1. the build (as h200_once.sh: the extension, every Hopper unit, padded ones included)
#   2. issue 45: tests/test_cuda_hopper_padded.py under CUDA_LAUNCH_BLOCKING (the padded-plan GEMM)
#   3. issue 43: the tile-decode GEMM's CUDA tests (its loads now before the step's MMAs)
#   4. issue 45: bench_hopper.py at T = HOPPER_T (default 8192,2048): cuda_hopper_padded /
#      cuda_hopper_dense / triton_dense / vLLM, and every GEMM alone
#   5. issue 43: the quick quantized table, Q4_K and IQ4_XS at T = 2048 / 8192 (the tiled column
#      beside the layer's choice)
#   6. limits.txt: the Hopper GEMMs alone at K=10 H=2048 I=512 T=8192 with E = 1 and 512 (the
#      same rows: one group against 16-tile groups; every configuration of both kernels), then,
#      while time is left, Nsight Compute's details of the tile-decode GEMM (Q4_K, E=128 T=8192)
#      and of the dequant path's decode kernel
# Run through bench/h200_session.sh profile. Writes under $OUT (at most 8 files come back):
# step_build.txt, padded_tests.log, tiled_tests.log, hopper.json, hopper_bench.log, quant.json,
# quant.log, limits.txt.
set -uo pipefail
here="$(dirname "$0")"
. "$here/one_call.sh"
start_call 560
NCU="${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}"

r=$(left 90)
[ "$r" -gt 20 ] && {
  CUDA_LAUNCH_BLOCKING=1 timeout "$r" python3 -m pytest -q -x -p no:cacheprovider \
    tests/test_cuda_hopper_padded.py > "$OUT/padded_tests.log" 2>&1
  echo "== padded tests rc=$? at ${SECONDS}s"; tail -n 12 "$OUT/padded_tests.log"
}
r=$(left 60)
[ "$r" -gt 20 ] && {
  timeout "$r" python3 -m pytest -q -x -p no:cacheprovider tests/test_gpuq_tiled.py \
    tests/test_gpuq_tiled_experts.py -k cuda > "$OUT/tiled_tests.log" 2>&1
  echo "== tiled tests rc=$? at ${SECONDS}s"; tail -n 6 "$OUT/tiled_tests.log"
}
r=$(( $(left 170) ))
[ "$r" -gt 30 ] && {
  timeout "$r" python3 bench/bench_hopper.py --out "$OUT/hopper.json" --hbm-tbps "$hbm" \
    --T "${HOPPER_T:-8192,2048}" 2>&1 | tee "$OUT/hopper_bench.log"
  echo "== bench_hopper at ${SECONDS}s"
}
r=$(left 130)
[ "$r" -gt 40 ] && {
  timeout "$r" python3 bench/bench_quant.py --quick --json "$OUT/quant.json" \
    --formats Q4_K,IQ4_XS --T 2048,8192 --budget-s $((r - 30)) 2>&1 | tee "$OUT/quant.log"
  echo "== bench_quant at ${SECONDS}s"
}
{
  for E in 1 512; do
    r=$(left 40)
    [ "$r" -gt 10 ] && timeout "$r" python3 bench/bench_hopper.py --profile-gemms --profile-time \
      --profile-experts $E
  done
  echo "== hopper groups at ${SECONDS}s"
  quant=(python3 bench/bench_quant.py --formats Q4_K --configs E128 --T 8192)
  r=$(left 100)
  [ "$r" -gt 40 ] && {
    timeout "$r" "$NCU" --set full -k regex:tiled_qmm_kernel --launch-skip 2 --launch-count 2 \
      "${quant[@]}" --profile cuda_quantized_tiled
    echo "== ncu tiled rc=$? at ${SECONDS}s"
  }
  r=$(left 60)
  [ "$r" -gt 25 ] && {
    timeout "$r" "$NCU" --section SpeedOfLight --section MemoryWorkloadAnalysis \
      --section WarpStateStats -k regex:decode_kernel --launch-count 2 \
      "${quant[@]}" --profile cuda_quantized_dequant
    echo "== ncu decode rc=$? at ${SECONDS}s"
  }
} > "$OUT/limits.txt" 2>&1
grep -E "^E=|^== |Duration|DRAM Throughput|Compute \(SM\)" "$OUT/limits.txt" | head -60
# at most 8 files come back: the build's log only where it failed
# (a failed Hopper build: its log replaces the quantized table's log, the one least needed then)
grep -q "BUILD FAILED" "$OUT/step_build.txt" && mv "$OUT/build.log" "$OUT/quant.log"
rm -f "$OUT/build.log" "$OUT/hopper_sass.json"
ls -la "$OUT"
