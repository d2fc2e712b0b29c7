#!/usr/bin/env bash
# One device call for the activation in the padded gate/up GEMM's epilogue (issue 45;
# bench/hopper_gemm_notes.md, "The activation in the gate/up epilogue"): its GPU tests, then
# fused against unfused timed. Each step is capped so that the whole ends before DEADLINE_S
# (default 560 s):
#   1. the build (h200_quant.sh --build-only, no lab loops) and the Hopper units' SASS check
#      (h200_hopper.sh --build: the four padded act units among them: HGMMA, no local memory,
#      no TMA store), then tools/hopper_act_probe.cu (the register pairing, host code)
#   2. tests/test_hopper_padded_act.py under CUDA_LAUNCH_BLOCKING=1 (the fused op against
#      hopper_padded_mm + swiglu bit for bit for both dtypes, every activation and
#      configuration, a clipped last N tile, -1 ids, T = 0, unused tiles untouched; the path
#      fused against unfused; graphs, compile, opcheck), then tests/test_cuda_hopper_padded.py
#      (the plain GEMM and path, unchanged but for the gate/up stage's refactor; ACT_PADDED=0
#      leaves it out)
#   3. bench_hopper.py at T = ACT_T (default 2048,8192): the padded path unfused and fused
#      ("cuda_hopper_padded_fused_act", and whether its output has the unfused one's bits:
#      "fused_activation_bits"), the other paths, and the GEMMs alone with the fused gate/up
#      ("gate_up_act") against the GEMM + swiglu ("gate_up_swiglu") per configuration
# Run through bench/h200_session.sh act. Writes under $OUT: step_build.txt, probe.txt,
# tests.log, act.json, act.log.
set -uo pipefail
here="$(dirname "$0")"
. "$here/one_call.sh"
start_call 560
grep -E "GEMM padded|GEMM kernels" "$OUT/step_build.txt" | head -10

C="${ARGON_CUTLASS_DIR:-}"
[ -n "$C" ] && timeout "$(left 90)" "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" -std=c++17 --expt-relaxed-constexpr \
  -gencode=arch=compute_90a,code=sm_90a -I"$C/include" -I"$C/tools/util/include" \
  -Itorch_argon/csrc tools/hopper_act_probe.cu -o /tmp/act_probe > "$OUT/probe.txt" 2>&1 &&
  /tmp/act_probe >> "$OUT/probe.txt" 2>&1
echo "== probe: $(tail -n 1 "$OUT/probe.txt") at ${SECONDS}s"

r=$(left 200)
[ "$r" -gt 20 ] && {
  ARGON_REQUIRE_HOPPER=1 CUDA_LAUNCH_BLOCKING=1 timeout "$r" python3 -m pytest -q -p no:cacheprovider \
    tests/test_hopper_padded_act.py > "$OUT/tests.log" 2>&1
  echo "== act tests rc=$? at ${SECONDS}s"; grep -E "^FAILED|^ERROR" "$OUT/tests.log" | head -20
  tail -n 1 "$OUT/tests.log"
}
r=$(left 80)
[ "${ACT_PADDED:-1}" = 1 ] && [ "$r" -gt 20 ] && {
  ARGON_REQUIRE_HOPPER=1 timeout "$r" python3 -m pytest -q -p no:cacheprovider tests/test_cuda_hopper_padded.py \
    >> "$OUT/tests.log" 2>&1
  echo "== padded tests rc=$? at ${SECONDS}s"; tail -n 1 "$OUT/tests.log"
}
r=$(left 240)
[ "$r" -gt 40 ] && {
  timeout "$r" python3 bench/bench_hopper.py --out "$OUT/act.json" --T "${ACT_T:-2048,8192}" \
    --hbm-tbps "$hbm" 2>&1 | tee "$OUT/act.log" | grep -v "^  compiled"
  echo "== bench_hopper at ${SECONDS}s"
  python3 - "$OUT/act.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    if r.get("kind") == "fused_activation_bits":
        print("bits", r["E"], r["T"], r["bits_equal"])
    if r.get("kind") == "gemm" and r.get("kernel") == "padded" and r["gemm"].startswith("gate_up"):
        print("gemm", r["E"], r["T"], r["gemm"], r["config"], r.get("median_us"))
    if r.get("kind") == "experts_path" and r["path"].startswith("cuda_hopper_padded"):
        print("path", r["E"], r["T"], r["path"], r.get("median_us", r.get("error")))
PY
}
rm -f "$OUT/build.log" "$OUT/hopper_sass.json"
ls "$OUT"
