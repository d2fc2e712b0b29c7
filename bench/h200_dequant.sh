#!/usr/bin/env bash
# One device call (issues 43 and 45) after the padded Hopper path entered the H100's tuned table:
# the dequant path's decoded experts on the padded GEMMs where that table takes them, in ONE
# call, each step capped so that the whole ends before DEADLINE_S (default 560 s):
#   1. the build (as h200_profile.sh's)
#   2. CUDA tests: tests/test_cuda_hopper_padded.py and the dequant path's cases of
#      tests/test_cuda_quantized.py (the padded GEMMs under it included)
#   3. the quick quantized table, Q4_K and IQ4_XS at T = 8192 / 16384, llama.cpp's column
#      where its binary is carried (bench/baselines/ggml_bin), the bf16 column the layer's choice
#   4. issue 43, small T: bench/lab/gpuq_tile_m.py (gpuq's GEMMs at tile_m 8 / 16 / 32, T = 128 /
#      256 / 512: the layer's tile_m rule against the others)
#   5. Nsight Compute's speed-of-light, memory and warp-state pages of gpuq's GEMM at E=128
#      T=512 Q4_K (tile_m 32: 4x its weight-read floor on the H100), appended to gpuq_tile_m.log
#   6. while time is left: bench_hopper.py at T = 8192 (the padded GEMMs at E=512 with the
#      order's window of 1)
# Run through bench/h200_session.sh dequant. Writes under $OUT: step_build.txt, tests.log,
# quant.json, quant.log, gpuq_tile_m.json, gpuq_tile_m.log, hopper.json, hopper_bench.log.
set -uo pipefail
here="$(dirname "$0")"
. "$here/one_call.sh"
start_call 560

r=$(left 70)
[ "$r" -gt 20 ] && {
  timeout "$r" python3 -m pytest -q -p no:cacheprovider tests/test_cuda_hopper_padded.py \
    tests/test_cuda_quantized.py -k "padded or dequant" > "$OUT/tests.log" 2>&1
  echo "== tests rc=$? at ${SECONDS}s"; grep -E "^FAILED|^ERROR" "$OUT/tests.log" | head; tail -n 1 "$OUT/tests.log"
}
ggml=bench/baselines/ggml_bin/test-backend-ops-cuda
llama=()
[ -x "$ggml" ] && llama=(--llamacpp "$ggml")
r=$(left 150)
[ "$r" -gt 40 ] && {
  timeout "$r" python3 bench/bench_quant.py --quick --json "$OUT/quant.json" \
    --formats Q4_K,IQ4_XS --T 8192,16384 --budget-s $((r - 30)) ${llama[@]+"${llama[@]}"} \
    2>&1 | tee "$OUT/quant.log" | grep -v "^  compiled"
  echo "== bench_quant at ${SECONDS}s"
}
r=$(left 90)
[ "$r" -gt 30 ] && {
  timeout "$r" python3 bench/lab/gpuq_tile_m.py --json "$OUT/gpuq_tile_m.json" 2>&1 |
    tee "$OUT/gpuq_tile_m.log"
  echo "== gpuq_tile_m at ${SECONDS}s"
}
NCU="${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}"
r=$(left 90)
[ "$r" -gt 30 ] && {
  echo "== ncu: gpuq's GEMM, E=128 T=512 Q4_K" >> "$OUT/gpuq_tile_m.log"
  timeout "$r" "$NCU" --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section LaunchStats --section Occupancy -k regex:qmm_kernel \
    --launch-skip 2 --launch-count 2 python3 bench/bench_quant.py --formats Q4_K \
    --configs E128 --T 512 --profile cuda_quantized >> "$OUT/gpuq_tile_m.log" 2>&1
  echo "== ncu gpuq rc=$? at ${SECONDS}s"
  grep -E "Duration|DRAM Throughput|Compute \(SM\)|L1/TEX Hit|L2 Hit|Issue Slots|Registers Per" \
    "$OUT/gpuq_tile_m.log" | head -30
}
r=$(left 60)
[ "$r" -gt 30 ] && {
  timeout "$r" python3 bench/bench_hopper.py --out "$OUT/hopper.json" --hbm-tbps "$hbm" \
    --T 8192 2>&1 | tee "$OUT/hopper_bench.log" | grep -E "^E=|padded"
  echo "== bench_hopper at ${SECONDS}s"
}
rm -f "$OUT/build.log" "$OUT/hopper_sass.json"
ls "$OUT"
