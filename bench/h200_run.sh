#!/usr/bin/env bash
# What we run on the lent H200, in as few calls as possible (see bench/README.md):
#   bash bench/h200_run.sh build tests main     # build, the GPU run of the suite (h200_tests.sh), the main job
#   bash bench/h200_run.sh layer ops            # bench/bench_layer.py, bench/bench_cuda.py
#   bash bench/h200_run.sh train                # bench/bench_train.py (forward + backward)
# Logs and results go to $OUT (the device tool's folder) or /tmp/argon_out.
set -uo pipefail
OUT="${OUT:-/tmp/argon_out}"
mkdir -p "$OUT"
. "$(dirname "$0")/gpu_env.sh"
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1

step() {  # step NAME COMMAND...: run it, log to $OUT/NAME.log, show the log's tail
  local name=$1; shift
  echo "== $name: $*"
  "$@" > "$OUT/$name.log" 2>&1
  echo "== $name rc=$?"
  tail -n "${TAIL:-6}" "$OUT/$name.log"
}

for what in "$@"; do
  case "$what" in
    build)
      nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
      ARGON_CUDA_ARCH=90 MAX_JOBS=16 step build python3 setup.py build_ext --inplace ;;
    tests)  # the tests that can reach a CUDA kernel, in at most 6 minutes (h200_tests.sh)
      bash "$(dirname "$0")/h200_tests.sh" ;;
    main)
      TAIL=16 step main python3 -m torch_argon --device cuda --json "$OUT/main_cuda.json" \
        --plot "$OUT/main_cuda.png" ;;
    layer)
      TAIL=30 step layer python3 bench/bench_layer.py --json bench/results/h200.json
      cp bench/results/h200.json "$OUT/h200.json" ;;
    ops)
      TAIL=20 step ops python3 bench/bench_cuda.py --out bench/results/h200.json
      cp bench/results/h200.json "$OUT/h200.json" ;;
    train)  # issue 46's configs: bf16, T = 2048 and 8192, graph replay (about 2 minutes)
      TAIL=12 step train python3 bench/bench_train.py --json bench/results/h200_train.json
      cp bench/results/h200_train.json "$OUT/h200_train.json" ;;
    *) echo "unknown step $what"; exit 2 ;;
  esac
done
