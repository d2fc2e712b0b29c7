#!/usr/bin/env bash
# torch_argon's experts path side by side with vLLM's Triton fused_moe on the lent GPU, in one
# call (issues 43, 45). The GPU machine has no network: stage vLLM's files here first and carry
# the folder:
#   bash bench/baselines/stage_vllm.sh            # here: .baselines/vllm/ (gitignored, 140 KB)
#   run(command="bash bench/h200_vllm.sh --quick", carry=[".baselines"])
#   bash bench/h200_vllm.sh                        # T = 128 ... 16384
#   bash bench/h200_vllm.sh --quick --paths NAME   # an experts implementation by name besides auto
#   bash bench/h200_vllm.sh --no-build ...         # the extension is built already
# The build comes first (h200_run.sh build: build_ext --inplace for sm_90; a no-op when nothing
# changed).
# Every other argument goes to bench/bench_vllm_side_by_side.py.
# Writes $OUT/vllm_side_by_side.json (also bench/results/vllm_side_by_side.json) and
# $OUT/vllm_side_by_side.log; prints the table last. Exit status: 0; 1 if a row raised or an
# output was wrong (the table's last lines say which); 2 if the build failed; 3 if nothing is
# staged.
set -uo pipefail
OUT="${OUT:-/tmp/argon_out}"
mkdir -p "$OUT"
. "$(dirname "$0")/gpu_env.sh"
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1

build=1
args=()
for a in "$@"; do
  if [ "$a" = "--no-build" ]; then build=0; else args+=("$a"); fi
done

python3 -c "import sys; from bench.baselines import vllm_fused_moe as v; \
why = v.staging_problem(); print(why or 'vLLM baseline staged: ' + str(v.version_record())); \
sys.exit(3 if why else 0)"
staged=$?
if [ "$staged" = 3 ]; then
  echo "== nothing staged: run bench/baselines/stage_vllm.sh where PyPI is reachable and carry .baselines"
  exit 3
elif [ "$staged" != 0 ]; then
  echo "== the adapter (bench/baselines/vllm_fused_moe.py) did not import"
  exit 2
fi

if [ "$build" = 1 ]; then  # h200_run.sh's build step: sm_90, log in $OUT/build.log
  bash "$(dirname "$0")/h200_run.sh" build | tee "$OUT/build_step.txt"
  if ! grep -q "^== build rc=0" "$OUT/build_step.txt"; then
    echo "== BUILD FAILED (log: \$OUT/build.log)"
    exit 2
  fi
else
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
fi

t0=$SECONDS
python3 bench/bench_vllm_side_by_side.py --json "$OUT/vllm_side_by_side.json" \
  ${args[@]+"${args[@]}"} 2>&1 | tee "$OUT/vllm_side_by_side.log"
rc=${PIPESTATUS[0]}
cp "$OUT/vllm_side_by_side.json" bench/results/vllm_side_by_side.json 2>/dev/null || true
echo "== bench_vllm_side_by_side.py rc=$rc in $((SECONDS - t0)) s (results: \$OUT/vllm_side_by_side.json)"
exit "$rc"
