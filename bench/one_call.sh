# What the one-call device scripts (h200_once.sh, h200_profile.sh, h200_stalls.sh,
# h200_points.sh, h200_dequant.sh, h200_mixed.sh) share, sourced after they set here (their
# folder); OUT (default /tmp/argon_out) is made here:
#   start_call S [ARGS]  deadline_from S, build_all ARGS, gpu_floor_tbps, the GPU's name printed:
#                        how a call begins
#   deadline_from S   each step of a call is capped so that the whole ends before the deadline
#                     (DEADLINE_S seconds from the script's start, else S); left N gives the
#                     seconds to it, at most N
#   build_all [ARGS]  the extension (h200_quant.sh --build-only ARGS) and the Hopper units'
#                     check, logged to $OUT/step_build.txt; stops the script (exit 2) where the
#                     extension failed, since nothing after it can run; then the GPU environment
#   gpu_floor_tbps    sets gpu (the card's name) and hbm (its bandwidth for the weight-read
#                     floors: 4.3 TB/s, 3.35 on an H100)
#   ncu_stalls OUTFILE KERNEL_REGEX SKIP PROGRAM...
#                     Nsight Compute on 2 launches of the kernels matching KERNEL_REGEX after
#                     SKIP of them: speed of light, warp states, occupancy, memory, and every
#                     warp-stall reason per issued instruction, appended to $OUT/OUTFILE (capped
#                     at 90 s and by the deadline)
OUT="${OUT:-/tmp/argon_out}"
mkdir -p "$OUT"
deadline_from() { deadline=${DEADLINE_S:-$1}; }
left() {
  local r=$((deadline - SECONDS))
  [ "$r" -gt "$1" ] && r=$1
  echo "$r"
}
build_all() {
  bash "$here/h200_quant.sh" --build-only "$@" 2>&1 | tee "$OUT/step_build.txt"
  if grep -q "^== BUILD FAILED" "$OUT/step_build.txt"; then
    ls -la "$OUT"  # build.log says why
    exit 2
  fi
  bash "$here/h200_hopper.sh" --build 2>&1 | tee -a "$OUT/step_build.txt"
  echo "== builds done at ${SECONDS}s"
  . "$here/gpu_env.sh"
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
}
gpu_floor_tbps() {
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
  hbm=4.3
  case "$gpu" in *H100*) hbm=3.35 ;; esac
}
start_call() {
  deadline_from "$1"
  shift
  build_all "$@"
  gpu_floor_tbps
  echo "== GPU: $gpu (weight-read floors at $hbm TB/s)"
}
ncu_stalls() {
  local out=$1 kernel=$2 skip=$3
  shift 3
  local ncu r metrics
  ncu="${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}"
  metrics='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio'
  metrics="$metrics,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
  metrics="$metrics,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active"
  metrics="$metrics,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct"
  r=$(left 90)
  [ "$r" -gt 20 ] || { echo "== no time left for $out"; return; }
  timeout "$r" "$ncu" --section SpeedOfLight --section WarpStateStats --section Occupancy \
    --section MemoryWorkloadAnalysis --section InstructionStats --metrics "$metrics" \
    -k "regex:$kernel" --launch-skip "$skip" --launch-count 2 "$@" >> "$OUT/$out" 2>&1
  echo "== $out rc=$? at ${SECONDS}s"
}
