#!/usr/bin/env bash
# One device call (issues 43 and 45) after the padded Hopper path entered the H100's tuned table:
# the dequant path's decoded experts on the padded GEMMs where that table takes them, in ONE
# call, each step capped so that the whole ends before DEADLINE_S (default 560 s):
#   1. the build (as h200_profile.sh's)
#   2. CUDA tests: tests/test_cuda_hopper_padded.py and the dequant path's cases of
#      tests/test_cuda_quantized.py (the padded GEMMs under it included)
#   3. the quick quantized table, Q4_K and IQ4_XS at T = 2048 / 8192 / 16384, llama.cpp's column
#      where its binary is carried (bench/baselines/ggml_bin), the bf16 column the layer's choice
#   4. issue 43, small T: bench/lab/gpuq_tile_m.py (gpuq's GEMMs at tile_m 8 / 16 / 32, T = 128 /
#      256 / 512: the layer's tile_m rule against the others)
#   5. bench_hopper.py at T = 8192: the padded GEMMs at E=512 with the order's window of 1
# Run through bench/h200_session.sh dequant. Writes under $OUT: step_build.txt, tests.log,
# quant.json, quant.log, gpuq_tile_m.json, gpuq_tile_m.log, hopper.json, hopper_bench.log.
set -uo pipefail
OUT="${OUT:-/tmp/argon_out}"
mkdir -p "$OUT"
here="$(dirname "$0")"
. "$here/one_call.sh"
deadline_from 560
build_all
gpu_floor_tbps
echo "== GPU: $gpu"

r=$(left 90)
[ "$r" -gt 20 ] && {
  timeout "$r" python3 -m pytest -q -p no:cacheprovider tests/test_cuda_hopper_padded.py \
    tests/test_cuda_quantized.py -k "padded or dequant" > "$OUT/tests.log" 2>&1
  echo "== tests rc=$? at ${SECONDS}s"; grep -E "^FAILED|^ERROR" "$OUT/tests.log" | head; tail -n 1 "$OUT/tests.log"
}
ggml=bench/baselines/ggml_bin/test-backend-ops-cuda
llama=()
[ -x "$ggml" ] && llama=(--llamacpp "$ggml")
r=$(left 240)
[ "$r" -gt 40 ] && {
  timeout "$r" python3 bench/bench_quant.py --quick --json "$OUT/quant.json" \
    --formats Q4_K,IQ4_XS --T 2048,8192,16384 --budget-s $((r - 30)) ${llama[@]+"${llama[@]}"} \
    2>&1 | tee "$OUT/quant.log" | grep -v "^  compiled"
  echo "== bench_quant at ${SECONDS}s"
}
r=$(left 120)
[ "$r" -gt 30 ] && {
  timeout "$r" python3 bench/lab/gpuq_tile_m.py --json "$OUT/gpuq_tile_m.json" 2>&1 |
    tee "$OUT/gpuq_tile_m.log"
  echo "== gpuq_tile_m at ${SECONDS}s"
}
r=$(left 90)
[ "$r" -gt 30 ] && {
  timeout "$r" python3 bench/bench_hopper.py --out "$OUT/hopper.json" --hbm-tbps "$hbm" \
    --T 8192 2>&1 | tee "$OUT/hopper_bench.log" | grep -E "^E=|padded"
  echo "== bench_hopper at ${SECONDS}s"
}
rm -f "$OUT/build.log" "$OUT/hopper_sass.json"
ls "$OUT"
