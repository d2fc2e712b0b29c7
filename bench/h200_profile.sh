#!/usr/bin/env bash
# The limiters the first device run left unmeasured, in one call (after h200_once.sh's table):
#   1. the build (as h200_once.sh: the extension, the Hopper units)
#   2. issue 45: the Hopper GEMMs alone at K=10 H=2048 I=512 T=8192 with E = 1, 16 and 512 experts
#      (the same 81920 rows: one group, 40-tile groups, 16-tile groups), every configuration,
#      graph replay (bench_hopper.py --profile-gemms --profile-time): if E=1 runs far faster, the
#      per-tile group change of CUTLASS's grouped kernel is the cost
#   3. issue 43: Nsight Compute on the tile-decode GEMM (Q4_K, E=128 T=8192: gate/up and down),
#      the details page and the per-instruction SASS page with its stall samples (csv), and on
#      the dequant path's decode kernel (details: its DRAM rate against the bytes' floor)
#   4. the quick quantized table for Q4_K and IQ4_XS at T = 2048 / 8192 (the tiled GEMM's column)
# Run through bench/h200_session.sh profile. Writes under $OUT: step_build.txt,
# hopper_groups.log, quant.json, quant.log, tiled_details.txt, tiled_sass.csv, decode_details.txt.
set -uo pipefail
OUT="${OUT:-/tmp/argon_out}"
mkdir -p "$OUT"
here="$(dirname "$0")"
bash "$here/h200_quant.sh" --build-only 2>&1 | tee "$OUT/step_build.txt"
grep -q "^== BUILD FAILED" "$OUT/step_build.txt" && { ls -la "$OUT"; exit 2; }
bash "$here/h200_hopper.sh" --build 2>&1 | tee -a "$OUT/step_build.txt"
echo "== builds done at ${SECONDS}s"
. "$here/gpu_env.sh"
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
NCU="${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}"

for E in 1 16 512; do
  timeout 60 python3 bench/bench_hopper.py --profile-gemms --profile-time --profile-experts $E
done 2>&1 | tee "$OUT/hopper_groups.log"
echo "== hopper groups at ${SECONDS}s"

# the tiled GEMM beside the layer's choice where the first run measured it (the loads-before-MMAs
# change since)
timeout 150 python3 bench/bench_quant.py --quick --json "$OUT/quant.json" --formats Q4_K,IQ4_XS \
  --T 2048,8192 --budget-s 110 2>&1 | tee "$OUT/quant.log"
echo "== bench_quant at ${SECONDS}s"

quant=(python3 bench/bench_quant.py --formats Q4_K --configs E128 --T 8192)
timeout 200 "$NCU" --set full --import-source no -k regex:tiled_qmm_kernel --launch-skip 2 \
  --launch-count 2 -f -o /tmp/tiled "${quant[@]}" --profile cuda_quantized_tiled \
  > "$OUT/tiled_ncu.log" 2>&1
echo "== ncu tiled rc=$? at ${SECONDS}s"; tail -n 5 "$OUT/tiled_ncu.log"
"$NCU" -i /tmp/tiled.ncu-rep --page details > "$OUT/tiled_details.txt" 2>&1
"$NCU" -i /tmp/tiled.ncu-rep --page source --print-source sass --csv > "$OUT/tiled_sass.csv" 2>&1
ls -la "$OUT/tiled_sass.csv"
timeout 120 "$NCU" --set full -k regex:decode_kernel --launch-count 3 \
  "${quant[@]}" --profile cuda_quantized_dequant > "$OUT/decode_details.txt" 2>&1
echo "== ncu decode rc=$? at ${SECONDS}s"
grep -E "Duration|DRAM Throughput|Memory Throughput" "$OUT/decode_details.txt" | head -12
# at most 8 files come back: the build's log only where it failed
grep -q "BUILD FAILED" "$OUT/step_build.txt" || rm -f "$OUT/build.log"
rm -f "$OUT/tiled_ncu.log" "$OUT/hopper_sass.json"
ls -la "$OUT"
