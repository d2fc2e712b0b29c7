#!/usr/bin/env bash
# A/B of compile-time variants of the CUDA plan: the working tree built as is ("base"), then
# rebuilt once per variant with extra nvcc flags (NVCC_APPEND_FLAGS; only the sources in
# $SOURCES recompile), each build kept as a copy of the package; all timed alternately by
# bench/plan_ab.py (base, variants, base, variants) and each variant compared with the base by
# bench/plan_ab_table.py. For lab macros (#ifdef blocks in the kernels, never committed on):
#
#   bash bench/plan_ab_flags.sh 2048,4096 four='-DARGON_LAB_X=4' eight='-DARGON_LAB_X=8'
#
# Names must not end in a digit (plan_ab_table.py reads trailing digits as the repeat). Extra
# plan_ab.py arguments go in $AB_ARGS (e.g. AB_ARGS="--ids int32"). At the end the working
# tree's package holds the base build again and the variant-built objects are stale (their
# sources touched), so the next build recompiles them without the flags.
# Results: $OUT (or /tmp/plan_ab_flags): ab_<tag>.json, runs.log, build_<name>.log; the tables
# on stdout. Exits non-zero if a build or a run fails, or if a plan is not bit-exact.
set -uo pipefail
TS=${1:?usage: bash bench/plan_ab_flags.sh T_LIST NAME=FLAGS [NAME=FLAGS ...]}
shift
[ $# -ge 1 ] || { echo "name at least one variant: NAME='-DFLAG ...'"; exit 2; }
REPO=$PWD
[ -f "$REPO/setup.py" ] && [ -d "$REPO/bench" ] || { echo "run from the repository root"; exit 2; }
names=()
for spec in "$@"; do
  name=${spec%%=*}
  [[ "$spec" == *=* && "$name" =~ ^[A-Za-z_]+$ && "$name" != base ]] ||
    { echo "bad variant '$spec': NAME=FLAGS, NAME letters only, not 'base'"; exit 2; }
  names+=("$name")
done
SOURCES=${SOURCES:-torch_argon/csrc/cuda/plan_cuda.cu}
OUT=${OUT:-/tmp/plan_ab_flags}
WORK=${WORK:-/tmp/plan_ab_flags_builds}
mkdir -p "$OUT" "$WORK" || exit 1
OUT=$(cd "$OUT" && pwd)
rm -f "$OUT"/ab_*.json "$OUT/runs.log"
python3 -c "import sys, torch; sys.exit(not torch.cuda.is_available())" ||
  { echo "plan_ab_flags.sh times the CUDA plan: torch sees no CUDA device"; exit 2; }
. "$(dirname "$0")/gpu_env.sh"
export PYTHONUNBUFFERED=1 ARGON_CUDA_ARCH="${ARGON_CUDA_ARCH:-90}" MAX_JOBS="${MAX_JOBS:-$(nproc)}"
export ARGON_PLAN_LAB=1  # the lab build: the plan knobs (plan_ab.py --knobs)

build() {  # build NAME FLAGS: build the tree with FLAGS, keep a copy of the package
  local t0=$SECONDS
  touch $SOURCES
  NVCC_APPEND_FLAGS="$2" python3 setup.py build_ext --inplace > "$OUT/build_$1.log" 2>&1 ||
    { echo "build $1 failed:"; tail -n 5 "$OUT/build_$1.log"; exit 1; }
  rm -rf "$WORK/$1" && mkdir -p "$WORK/$1" && cp -r torch_argon "$WORK/$1/" || exit 1
  echo "build $1 ($2): $((SECONDS - t0)) s"
}
build base ""
for spec in "$@"; do build "${spec%%=*}" "${spec#*=}"; done
# The base build back in place; the variant objects are made stale for the next build.
cp "$WORK"/base/torch_argon/*.so torch_argon/ && touch $SOURCES || exit 1

for r in 1 2; do
  for side in base "${names[@]}"; do
    # shellcheck disable=SC2086
    PYTHONPATH="$WORK/$side" python3 bench/plan_ab.py "$side$r" --out "$OUT" --T "$TS" \
      ${AB_ARGS:-} >> "$OUT/runs.log" 2>&1 || { echo "run $side$r failed:"; tail -n 5 "$OUT/runs.log"; exit 1; }
    tail -n 1 "$OUT/runs.log"
  done
done
rc=0
for name in "${names[@]}"; do
  python3 bench/plan_ab_table.py "$OUT" base "$name" || rc=1
done
exit $rc
