#!/usr/bin/env bash
# This wave's unmeasured GPU code in ONE device call (for sessions where machines are scarce and
# a second call may never come): the build, then each step capped so the whole ends before
# DEADLINE_S (default 590 s from the call's start), the first answers first:
#   1. the build (h200_session.sh build: extension without the lab loops, the Hopper units, the
#      llama.cpp binary's probe; the binary is carried prebuilt in bench/baselines/ggml_bin/)
#   2. tests/test_cuda_hopper_dense.py under CUDA_LAUNCH_BLOCKING (a fault names its launch)
#   3. the tile-decode GEMM's CUDA tests
#   4. bench/bench_hopper.py at T = HOPPER_T (default 2048,8192,16384): issue 45's table, vLLM
#   5. bench/bench_quant.py, QUANT_FORMATS at QUANT_T with llama.cpp's column: issue 43's
# Run through bench/h200_session.sh once (its environment): bash bench/h200_session.sh once
# Writes under $OUT: step_build.txt, hopper_tests.log, tiled_tests.log, hopper.json,
# hopper_bench.log, h200_quant.json, h200_quant.log.
set -uo pipefail
here="$(dirname "$0")"
. "$here/one_call.sh"
start_call 590 --llamacpp

r=$(left 100)
[ "$r" -gt 20 ] && {
  CUDA_LAUNCH_BLOCKING=1 timeout "$r" python3 -m pytest -q -x -p no:cacheprovider \
    tests/test_cuda_hopper_dense.py > "$OUT/hopper_tests.log" 2>&1
  echo "== hopper tests rc=$? at ${SECONDS}s"
  tail -n 15 "$OUT/hopper_tests.log"
}
r=$(left 60)
[ "$r" -gt 20 ] && {
  timeout "$r" python3 -m pytest -q -x -p no:cacheprovider tests/test_gpuq_tiled.py \
    tests/test_gpuq_tiled_experts.py -k cuda > "$OUT/tiled_tests.log" 2>&1
  echo "== tiled tests rc=$? at ${SECONDS}s"
  tail -n 8 "$OUT/tiled_tests.log"
}
# the quantized table gets at least QUANT_MIN_S (default 150) of what is left
r=$(( $(left 100000) - ${QUANT_MIN_S:-150} ))
[ "$r" -gt 30 ] && {
  timeout "$r" python3 bench/bench_hopper.py --out "$OUT/hopper.json" --hbm-tbps "$hbm" \
    --T "${HOPPER_T:-2048,8192,16384}" 2>&1 | tee "$OUT/hopper_bench.log"
  echo "== bench_hopper at ${SECONDS}s"
}
r=$(left 100000)
[ "$r" -gt 40 ] && {
  llama=()
  [ -x bench/baselines/ggml_bin/test-backend-ops-cuda ] &&
    llama=(--llamacpp bench/baselines/ggml_bin/test-backend-ops-cuda)
  timeout "$r" python3 bench/bench_quant.py --json "$OUT/h200_quant.json" \
    --formats "${QUANT_FORMATS:-Q4_K,Q8_0,IQ4_XS,IQ2_XS}" --T "${QUANT_T:-128,2048,8192}" \
    --budget-s $((r - 25)) ${llama[@]+"${llama[@]}"} 2>&1 | tee "$OUT/h200_quant.log"
  echo "== bench_quant at ${SECONDS}s"
}
# at most 8 files come back from a device call: keep these, the build log only if a build failed
keep="hopper.json h200_quant.json hopper_tests.log tiled_tests.log step_build.txt hopper_bench.log h200_quant.log"
grep -q "^== BUILD FAILED" "$OUT/step_build.txt" && keep="$keep build.log"
grep -q "GGML BUILD FAILED" "$OUT/step_build.txt" && keep="$keep ggml_build.log"
for f in "$OUT"/*; do
  case " $keep " in *" $(basename "$f") "*) ;; *) rm -rf "$f" ;; esac
done
ls -la "$OUT"
