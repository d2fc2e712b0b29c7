#!/usr/bin/env bash
# One device call for the mixed-input Hopper GEMM (issue 43; bench/quant_mixed_notes.md): its
# tests and its timing beside gpuq's GEMMs and the dequant path. Each step is capped so that
# the whole ends before DEADLINE_S (default 560 s):
#   1. the build (as h200_dequant.sh's) and the Hopper units' SASS check (h200_hopper.sh
#      --build: the mixed units' kernels among them: HGMMA, no local memory)
#   2. tests/test_cuda_quantized_mixed.py (up to 20 failures; the op of every format on every used tile against
#      float64 on the kernel's own weights and on the exact dequant, -1 ids, 0-row experts,
#      T = 0, garbage-filled outputs, the experts path, CUDA graph replay), then the padded
#      GEMM's tests (its scheduler serves both; PADDED_TESTS=0 leaves them out)
#   3. bench_quant.py on MIXED_FORMATS (default Q4_K, then Q4_K/Q6_K: gate/up Q4_K, down Q6_K,
#      a Q4_K_M file's usual layer) in what the budget leaves: MIXED_IMPLS (default
#      cuda_quantized_mixed and cuda_quantized_dequant) beside the bf16 column, E=128 K=8
#      H=2048 I=768 and E=512 K=10 H=2048 I=512, T = MIXED_T (default 2048 / 8192 / 16384)
#      (run whatever step 2 said: each record carries its rel_err against the dense path), and
#      llama.cpp's MUL_MAT_ID column where bench/baselines/ggml_bin is carried; the mixed GEMM's
#      token tile by the rule of 64 up to 64 rows per expert (--mixed-tile-64-up-to 64: not the
#      default until timed, MIXED_TOKEN_TILE_64_MEASURED)
#   4. MIXED_TILE128_T (a comma list of T, unset: skipped): those points of MIXED_TILE128_FORMATS
#      (default Q4_K) again with the token tile held at 128 (--mixed-tile-64-up-to 0), beside
#      step 3's rule
# Run through bench/h200_session.sh mixed. Writes under $OUT: step_build.txt, tests.log,
# mixed.json, mixed.log.
set -uo pipefail
here="$(dirname "$0")"
. "$here/one_call.sh"
start_call 560
grep -E "GEMM mixed|GEMM kernels" "$OUT/step_build.txt" | head -5

r=$(left 120)
[ "$r" -gt 20 ] && {
  ARGON_REQUIRE_HOPPER=1 timeout "$r" python3 -m pytest -q -p no:cacheprovider --maxfail=20 tests/test_cuda_quantized_mixed.py \
    > "$OUT/tests.log" 2>&1
  echo "== mixed tests rc=$? at ${SECONDS}s"; grep -E "^FAILED|^ERROR|Error" "$OUT/tests.log" | head
  tail -n 1 "$OUT/tests.log"
}
r=$(left 90)
[ "${PADDED_TESTS:-1}" = 1 ] && [ "$r" -gt 20 ] && {
  ARGON_REQUIRE_HOPPER=1 timeout "$r" python3 -m pytest -q -p no:cacheprovider tests/test_cuda_hopper_padded.py \
    >> "$OUT/tests.log" 2>&1
  echo "== padded tests rc=$? at ${SECONDS}s"; tail -n 1 "$OUT/tests.log"
}
ggml=bench/baselines/ggml_bin/test-backend-ops-cuda  # llama.cpp's column where carried
llama=()
[ -x "$ggml" ] && llama=(--llamacpp "$ggml")
r=$(left 240)
[ "$r" -gt 40 ] && {
  timeout "$r" python3 bench/bench_quant.py --json "$OUT/mixed.json" \
    --formats "${MIXED_FORMATS:-Q4_K,Q4_K/Q6_K}" --configs E128,E512 \
    --T "${MIXED_T:-2048,8192,16384}" --budget-s $((r - 30)) ${llama[@]+"${llama[@]}"} \
    --impls "${MIXED_IMPLS:-cuda_quantized_dequant,cuda_quantized_mixed}" \
    --mixed-tile-64-up-to 64 2>&1 | tee "$OUT/mixed.log" |
    grep -v "^  compiled"
  echo "== bench_quant at ${SECONDS}s"
}
r=$(left 150)
[ -n "${MIXED_TILE128_T:-}" ] && [ "$r" -gt 40 ] && {  # the same points on the 128-token tile
  timeout "$r" python3 bench/bench_quant.py --json "$OUT/mixed_tile128.json" \
    --formats "${MIXED_TILE128_FORMATS:-Q4_K}" --configs E128,E512 --T "$MIXED_TILE128_T" \
    --budget-s $((r - 30)) --impls cuda_quantized_mixed --mixed-tile-64-up-to 0 2>&1 |
    tee "$OUT/mixed_tile128.log" | grep -v "^  compiled"
  echo "== bench_quant, token tile 128, at ${SECONDS}s"
}
rm -f "$OUT/build.log" "$OUT/hopper_sass.json"
ls "$OUT"
