#!/usr/bin/env bash
# Where the mixed-input Hopper GEMM's time goes (issue 43's large-T limiter), and what a GGUF
# model gains from it, in one device call; each step capped so that the whole ends before
# DEADLINE_S (default 560 s):
#   1. the build (as every call's)
#   2. Nsight Compute (one_call.sh ncu_stalls: speed of light, warp stalls, instruction mix) on
#      the experts path's two GEMMs at E=512 K=10 H=2048 I=512 T=8192: the mixed GEMM with Q4_K
#      (4-bit codes) and with Q8_0 (8-bit codes), then the dense padded GEMM on bf16 weights
#      (the same problem: bench_hopper.py --profile-gemms), the baseline in the same call
#   3. bench_gguf.py --device cuda: a Qwen3-30B-A3B-shaped Q4_K GGUF model's prefill at
#      T = 512 / 2048 through from_gguf against transformers' dequantized bf16 model (GGUF_ARGS:
#      more of its arguments, e.g. "--layers 8 --repeats 10")
# Run through bench/h200_session.sh limits. Writes under $OUT: step_build.txt,
# stalls_mixed_q4k.txt, stalls_mixed_q8_0.txt, stalls_padded.txt, gguf.json, gguf.log.
set -uo pipefail
here="$(dirname "$0")"
. "$here/one_call.sh"
start_call 560
quant=(python3 bench/bench_quant.py --configs E512 --T 8192 --profile cuda_quantized_mixed)
ncu_stalls stalls_mixed_q4k.txt device_kernel 2 "${quant[@]}" --formats Q4_K
ncu_stalls stalls_mixed_q8_0.txt device_kernel 2 "${quant[@]}" --formats Q8_0
ncu_stalls stalls_padded.txt device_kernel 2 python3 bench/bench_hopper.py --profile-gemms \
  --profile-kernel padded --profile-experts 512
grep -h -E "^  [a-z].*\(|stalled_(long_scoreboard|barrier|mio_throttle|short_scoreboard|math_pipe|wait|dispatch|not_selected)|hmma_cycles|Duration|DRAM Throughput|Issue Slots Busy|Executed Ipc A" \
  "$OUT"/stalls_*.txt | cut -c1-140 | head -100
r=$(left 200)
[ "$r" -gt 60 ] && {
  timeout "$r" python3 bench/bench_gguf.py --device cuda --json "$OUT/gguf.json" ${GGUF_ARGS:-} 2>&1 |
    tee "$OUT/gguf.log" | tail -n 12
  echo "== bench_gguf at ${SECONDS}s"
}
rm -f "$OUT/build.log" "$OUT/hopper_sass.json"
ls "$OUT"
