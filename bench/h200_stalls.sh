#!/usr/bin/env bash
# Why the kernels of issues 43 and 45 wait, in one call (after h200_profile.sh's tables): the
# build, then Nsight Compute's warp-stall breakdown (every smsp__average_warps_issue_stalled_*
# reason per issued instruction), speed of light, memory and occupancy of
#   stalls_tiled.txt    the tile-decode GEMM (Q4_K, E=128 T=8192: gate/up and down)
#   stalls_padded.txt   the padded Hopper GEMMs at K=10 H=2048 I=512 T=8192, E=512 then E=1
#   stalls_grouped.txt  the ptr-array grouped GEMMs, the same problem at E=512
#   stalls_decode.txt   the dequant path's decode kernel (Q4_K, E=128)
# Run through bench/h200_session.sh stalls. About 130 s of build on a fresh machine, then
# ~40 s per profile; each capped by DEADLINE_S (default 540).
set -uo pipefail
here="$(dirname "$0")"
. "$here/one_call.sh"
deadline_from 540
build_all
quant=(python3 bench/bench_quant.py --formats Q4_K --configs E128 --T 8192)
hop=(python3 bench/bench_hopper.py --profile-gemms)
ncu_stalls stalls_tiled.txt tiled_qmm_kernel 2 "${quant[@]}" --profile cuda_quantized_tiled
ncu_stalls stalls_padded.txt device_kernel 2 "${hop[@]}" --profile-kernel padded --profile-experts 512
ncu_stalls stalls_grouped.txt device_kernel 2 "${hop[@]}" --profile-kernel grouped --profile-experts 512
ncu_stalls stalls_decode.txt decode_kernel 0 "${quant[@]}" --profile cuda_quantized_dequant
ncu_stalls stalls_padded.txt device_kernel 2 "${hop[@]}" --profile-kernel padded --profile-experts 1
grep -h -E "^  [a-z].*\(|stalled_(long_scoreboard|barrier|mio_throttle|short_scoreboard|math_pipe|wait|lg_throttle|not_selected)|hmma_cycles|Duration|DRAM Throughput" \
  "$OUT"/stalls_*.txt | cut -c1-140 | head -120
rm -f "$OUT/build.log" "$OUT/hopper_sass.json"
ls -la "$OUT"
