#!/usr/bin/env bash
# Expert parallelism over NCCL on the GPUs of one host (issues 35 and 36), one process per GPU:
#   bash bench/h200_distributed.sh build cases bench    # NGPU defaults to every visible GPU
#   NGPU=1 bash bench/h200_distributed.sh build cases bench   # a world of 1 on one GPU
# build  the extension (ARGON_CUDA_ARCH=90; ninja rebuilds only what changed)
# cases  tests/distributed_cases.py under torchrun on NCCL: both modes, uneven expert splits,
#        ranks that receive nothing, -1 ids, T = 0 on a rank, bad input raising on every rank,
#        the no_sync mode under torch.compile and in a CUDA graph; results against the
#        single-GPU layer, and the same bytes run to run
# bench  bench/bench_distributed.py: E=128 K=8 H=2048 I=768 and E=512 K=10 H=2048 I=512, bf16,
#        T per rank $T_PER_RANK, both modes, against one GPU holding every expert, with the
#        share of time in collectives
# Logs and results in $OUT (default /tmp/argon_out): build.log, cases.log, cases_nccl_xN.json,
# bench.log, h200xN.json (also written to bench/results/). The bench's table is printed last.
set -uo pipefail
# NVLink multicast (NVLS) stays off on the lent machines: keep these three set.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT="${OUT:-/tmp/argon_out}"
mkdir -p "$OUT"
. "$(dirname "$0")/gpu_env.sh"
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
NGPU="${NGPU:-$(nvidia-smi -L | wc -l)}"
T_PER_RANK="${T_PER_RANK:-512,1024,2048,4096,8192,16384}"
CONFIGS="${CONFIGS:-qwen3-30b,e512}"
RUN=(python3 -m torch.distributed.run --standalone --nproc_per_node="$NGPU")

step() {  # step NAME LIMIT_S COMMAND...: run it under a time limit, log to $OUT/NAME.log
  local name=$1 limit=$2; shift 2
  echo "== $name (limit ${limit}s): $*"
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name rc=$rc$([ $rc = 124 ] && echo ' (timed out)')"
  tail -n "${TAIL:-8}" "$OUT/$name.log"
}

echo "== $NGPU GPU(s); NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
nvidia-smi --query-gpu=index,name,clocks.sm --format=csv,noheader
for what in "$@"; do
  case "$what" in
    build)
      ARGON_CUDA_ARCH=90 MAX_JOBS=16 step build 480 python3 setup.py build_ext --inplace ;;
    cases)
      TAIL=40 step cases 300 "${RUN[@]}" tests/distributed_cases.py \
        --json "$OUT/cases_nccl_x$NGPU.json" ;;
    bench)
      TAIL=30 step bench 420 "${RUN[@]}" bench/bench_distributed.py --configs "$CONFIGS" \
        --T-per-rank "$T_PER_RANK" --json "bench/results/h200x$NGPU.json"
      cp "bench/results/h200x$NGPU.json" "$OUT/" 2>/dev/null ;;
    *) echo "unknown step $what (build, cases, bench)"; exit 2 ;;
  esac
done
