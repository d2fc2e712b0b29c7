#!/usr/bin/env bash
# Step clocks of the grid plan kernel, alone (plan_stage_lab.cu says what it prints).
#
#   bash bench/lab/stage_lab.sh TAG [FLAGS] [MODE] [SRC]
#
# TAG names the build (in /tmp/argon_stage_lab/TAG); FLAGS an ablation (make_variant.py: e.g.
# no_scatter, coalesced; '' for none); MODE "shapes" (the launcher's shapes at T = 64-4096) or
# "launcher" (T = 128-6000, an adversarial case, forced chunk counts); SRC the kernel header
# (default: this tree's plan_grid.cuh; e.g. an older one extracted with git archive).
# Run from the repository root on a CUDA machine (sm_90 for the cluster shapes).
set -euo pipefail
TAG=${1:?usage: stage_lab.sh TAG [FLAGS] [MODE] [SRC]}
FLAGS=${2:-}
MODE=${3:-shapes}
SRC=${4:-torch_argon/csrc/cuda/plan_grid.cuh}
LAB=$(cd "$(dirname "$0")" && pwd)
DIR=/tmp/argon_stage_lab/$TAG
mkdir -p "$DIR"
. "$LAB/../gpu_env.sh"
python3 "$LAB/make_variant.py" "$SRC" "$DIR/variant.cuh" "$FLAGS"
python3 "$LAB/stage_copy.py" "$DIR/variant.cuh" "$DIR/plan_grid_stages.cuh"
INC=$(python3 -c "from torch.utils.cpp_extension import include_paths as p
print(' '.join('-I' + d for d in p()))")
PYINC=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])")
nvcc -std=c++20 -O3 --fmad=false -gencode=arch=compute_90,code=sm_90 --expt-relaxed-constexpr \
  -D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__ -D__CUDA_NO_BFLOAT16_CONVERSIONS__ \
  -D__CUDA_NO_HALF2_OPERATORS__ -I"$DIR" -Itorch_argon/csrc/cuda -Itorch_argon/csrc \
  ${EXTRA_INC:-} $INC -I"$PYINC" "$LAB/plan_stage_lab.cu" -o "$DIR/stage_lab"
[ "${BUILD_ONLY:-0}" = 1 ] || "$DIR/stage_lab" "$MODE"
