#!/usr/bin/env bash
# One environment for every call of a device session that measures this wave's unmeasured GPU
# code, so the extension is built once per machine: the lab loops compiled in
# (NVCC_APPEND_FLAGS=-DGPUQ_LAB_LOOPS=1: the pipelined and smem_act K loops beside the shipped
# one; the layer never picks them) and the Hopper unit (CUTLASS's headers from the carried wheel in .whl/).
# Every step's own script builds first; setup.py rebuilds by file times only (a changed flag or
# CUTLASS found or not goes unnoticed), so every call of a session goes through this script.
#
#   bash bench/h200_session.sh build    # extension + ggml's test-backend-ops side by side, the
#                                       # Hopper unit's SASS check                 (~6-9 min)
#   bash bench/h200_session.sh hopper   # issue 45: tests, bench vs triton_dense and vLLM, ncu
#   bash bench/h200_session.sh quant    # issue 43: CUDA tests of the quantized kernels, then the
#                                       # quick table (tiled GEMM included) with llama.cpp's column
#   bash bench/h200_session.sh loops    # issue 43, small T: plain vs pipelined vs smem_act K loop
#   bash bench/h200_session.sh vllm     # vLLM side by side, auto and cuda_hopper_dense
#   bash bench/h200_session.sh suite    # the whole GPU test suite (h200_tests.sh)
#   bash bench/h200_session.sh once     # build, tests and both tables in one call (h200_once.sh)
#   bash bench/h200_session.sh profile  # build, the new kernels' tests and tables, the limiters (h200_profile.sh)
#   bash bench/h200_session.sh stalls   # build, then ncu's stall reasons of the new kernels (h200_stalls.sh)
#   bash bench/h200_session.sh points   # lab build, the padded path's crossover points, the
#                                       # small-T K loops (h200_points.sh)
#   bash bench/h200_session.sh dequant  # build, the dequant path on the padded GEMMs: tests, the
#                                       # quick table with llama.cpp's column (h200_dequant.sh)
#   bash bench/h200_session.sh mixed    # build, the mixed-input GEMM's tests, then mixed vs
#                                       # dequant vs bf16 (h200_mixed.sh)
#   bash bench/h200_session.sh limits   # build, ncu of the mixed and padded GEMMs, the GGUF
#                                       # model's prefill (h200_mixed_limits.sh)
#   bash bench/h200_session.sh act      # build, the fused gate/up activation's tests, then
#                                       # fused vs unfused timed (h200_act.sh)
#   bash bench/h200_session.sh standalone  # no build: every carried build/*_standalone binary
#                                       # (120 s each), its output printed and written
#                                       # under $OUT as <name>.txt (~1-2 min)
# The standalone binaries (checks and timings of one kernel's C entry point, without torch or
# the extension) are built here, with the commands in the header of their source
# (tools/*_standalone.cu: tools/hopper_mixed_standalone.cu, tools/hopper_padded_act_standalone.cu),
# and carried: carry: ["build/mixed_standalone", "build/padded_act_standalone"] (build/ is
# ignored by git). That step compiles nothing and needs none of the set-up below, so it fits a
# call of ~2-3 minutes with the machine's start; a binary's exit code is 0 (its checks ok), 1 (a
# check failed), 2 (a CUDA error), 124 (past the 120 s); the step's is 0 where every one gave 0,
# 1 where one did not, 2 where none was carried.
# Extra arguments go to the step's script. Carry: .whl (nvidia-cutlass wheel), .baselines
# (bench/baselines/stage_vllm.sh), bench/baselines/ggml_src (bench/baselines/stage_ggml.sh) or
# the binary bench/baselines/build_ggml_cuda.sh made from it (bench/baselines/ggml_bin); the
# gguf wheel in .whl too for `limits` (bench_gguf.py).
# Staged here first:
#   python3 -m pip download --no-deps nvidia-cutlass==4.2.0.0 -d .whl
#   python3 -m pip download --no-deps gguf -d .whl
#   bash bench/baselines/stage_vllm.sh && bash bench/baselines/stage_ggml.sh
set -uo pipefail
here="$(dirname "$0")"
# standalone: before the environment (no build, no CUTLASS, no Python)
if [ "${1:-}" = standalone ]; then
  rc=0
  found=0
  for bin in build/*_standalone; do
    [ -f "$bin" ] || continue
    found=1
    [ -x "$bin" ] || chmod +x "$bin"
    echo "== $bin"
    # its output also under $OUT where the call has one
    timeout 120 "$bin" 2>&1 | tee "${OUT:-/tmp}/$(basename "$bin").txt"
    r=${PIPESTATUS[0]}
    echo "== $bin rc=$r at ${SECONDS}s"
    [ "$r" -eq 0 ] || rc=1
  done
  [ "$found" = 1 ] || { echo "== no build/*_standalone carried (see the header)"; exit 2; }
  exit "$rc"
fi
# NVCC_APPEND_FLAGS= (set, empty) leaves the lab loops out: a shorter build; `once` leaves them
# out unless the caller sets the flags
[ "${1:-}" = once ] || [ "${1:-}" = profile ] || [ "${1:-}" = stalls ] ||
  [ "${1:-}" = dequant ] || [ "${1:-}" = mixed ] || [ "${1:-}" = limits ] ||
  [ "${1:-}" = act ] &&
  NVCC_APPEND_FLAGS="${NVCC_APPEND_FLAGS-}"
export NVCC_APPEND_FLAGS="${NVCC_APPEND_FLAGS--DGPUQ_LAB_LOOPS=1}"
. "$here/gpu_env.sh"  # CUTLASS's headers from .whl/ among the rest, for every step alike
[ -n "${ARGON_CUTLASS_DIR:-}" ] ||
  echo "== no CUTLASS wheel in .whl/: the build has no Hopper GEMM (see the header)"
step=${1:-}
shift || true
case "$step" in
  build) bash "$here/h200_quant.sh" --llamacpp --build-only "$@" &&
         bash "$here/h200_hopper.sh" --build ;;
  hopper) bash "$here/h200_hopper.sh" "$@" ;;
  quant) CHECK_S="${CHECK_S:-150}" bash "$here/h200_quant.sh" --check --quick --llamacpp "$@" ;;
  loops) bash "$here/lab/gpuq_loops.sh" "$@" ;;
  vllm) bash "$here/h200_vllm.sh" --quick --paths cuda_hopper_dense "$@" ;;
  suite) bash "$here/h200_tests.sh" "$@" ;;
  once) bash "$here/h200_once.sh" "$@" ;;
  profile) bash "$here/h200_profile.sh" "$@" ;;
  stalls) bash "$here/h200_stalls.sh" "$@" ;;
  points) bash "$here/h200_points.sh" "$@" ;;
  dequant) bash "$here/h200_dequant.sh" "$@" ;;
  mixed) bash "$here/h200_mixed.sh" "$@" ;;
  limits) bash "$here/h200_mixed_limits.sh" "$@" ;;
  act) bash "$here/h200_act.sh" "$@" ;;
  *) echo "usage: bash bench/h200_session.sh build|hopper|quant|loops|vllm|suite|once|profile|stalls|points|dequant|mixed|limits|act|standalone [args]"; exit 2 ;;
esac
