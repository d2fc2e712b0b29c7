#!/usr/bin/env bash
# A/B of the CUDA plan: the working tree ("new") against an older version of some of its files
# ("old"), both built side by side, then timed alternately (old, new, old, new) in the bench
# metric by bench/plan_ab.py, and compared by bench/plan_ab_table.py (best of each side's runs).
# Every timed plan is also checked bit for bit against the CPU backend.
#
#   mkdir -p lab/old && git archive REV torch_argon/csrc/cuda | tar -x -C lab/old   # the old files
#   bash bench/plan_ab.sh lab/old [T list] [plan_tuning knobs for the new side]
#
# OLD_DIR holds the old files at their repository paths; everything else is the working tree's.
# Give it kernel sources only: the harness (this tree's bench/) also imports helpers from the
# package under test (torch_argon.testing.timing, torch_argon.testing.plan_tuning), which must be current.
# Run from the repository root. Through the device tool: keep lab/ out of git
# (.git/info/exclude) and name it in `carry`.
# Results: $OUT (or /tmp/plan_ab): ab_<tag>.json per run, runs.log, the build logs (7 files);
# the table on stdout. Exits non-zero if a build or a run fails, or if a plan is not bit-exact.
set -uo pipefail
OLD_DIR=${1:?usage: bash bench/plan_ab.sh OLD_DIR [T list] [knobs]}
TS=${2:-1,16,128,512,1024,2048,3072,4096,6144,8192}
KNOBS=${3:-}
OLD_TREE=/tmp/plan_ab_old
REPO=$PWD
[ -f "$REPO/setup.py" ] && [ -d "$REPO/bench" ] || { echo "run from the repository root"; exit 2; }
[ -d "$OLD_DIR" ] || { echo "OLD_DIR $OLD_DIR is not a folder"; exit 2; }
mkdir -p "${OUT:-/tmp/plan_ab}" || exit 1
OUT=$(cd "${OUT:-/tmp/plan_ab}" && pwd)  # absolute: the old build runs in another folder
rm -f "$OUT"/ab_*.json "$OUT/runs.log"  # the table reads every ab_*.json there
python3 -c "import sys, torch; sys.exit(not torch.cuda.is_available())" ||
  { echo "plan_ab.sh times the CUDA plan: torch sees no CUDA device"; exit 2; }
. "$(dirname "$0")/gpu_env.sh"
export PYTHONUNBUFFERED=1 ARGON_CUDA_ARCH="${ARGON_CUDA_ARCH:-90}"
export ARGON_PLAN_LAB=1  # the lab build: the plan knobs (plan_ab.py --knobs)

# The old tree: the working tree without builds, with OLD_DIR's files over it.
rm -rf "$OLD_TREE" && mkdir -p "$OLD_TREE" || exit 1
tar --exclude=./build --exclude=./.venv --exclude=./.git --exclude='*.so' \
    --exclude="./${OLD_DIR#./}" -cf - . | tar -xf - -C "$OLD_TREE" || exit 1
cp -r "$OLD_DIR"/. "$OLD_TREE"/ || exit 1
echo "old: the working tree with $(find "$OLD_DIR" -type f | wc -l) files from $OLD_DIR"

# Both builds at once, half the cores each.
jobs=$(( ($(nproc) + 1) / 2 ))
(cd "$OLD_TREE" && MAX_JOBS=$jobs python3 setup.py build_ext --inplace \
  > "$OUT/build_old.log" 2>&1) &
old_pid=$!
MAX_JOBS=$jobs python3 setup.py build_ext --inplace > "$OUT/build_new.log" 2>&1
new_rc=$?
wait $old_pid
old_rc=$?
echo "builds: old rc=$old_rc, new rc=$new_rc"
[ $old_rc -eq 0 ] && [ $new_rc -eq 0 ] || { tail -n 5 "$OUT"/build_*.log; exit 1; }

# The same harness (this tree's bench/) times both builds, each in its own process.
run_side() {  # run_side TAG PYTHONPATH [knobs]
  PYTHONPATH="$2" python3 bench/plan_ab.py "$1" --out "$OUT" --T "$TS" --knobs "${3:-}" \
    >> "$OUT/runs.log" 2>&1 || { echo "run $1 failed:"; tail -n 5 "$OUT/runs.log"; exit 1; }
  tail -n 1 "$OUT/runs.log"
}
for r in 1 2; do
  run_side "old$r" "$OLD_TREE"
  run_side "new$r" "$REPO" "$KNOBS"
done
python3 bench/plan_ab_table.py "$OUT" old new
