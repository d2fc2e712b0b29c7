#!/usr/bin/env bash
# Issue 30's proof on the H200: the lean CUDA plan (this working tree, the shipped build: no
# ARGON_PLAN_LAB) against a base tree (main at 18cadd2: its torch_argon/ and setup.py, copied to
# BASE_DIR), in one same-run A/B, and the CUDA plan tests on the new build.
#
#   bash bench/plan_lean_ab.sh [BASE_DIR]        # from the repository root; default .ab_base
#
# 1. builds both trees at once (half the cores each; the base in BASE_DIR itself);
# 2. times the plan, one process per side, alternately: base1, new1, (tests), base2, new2
#    (bench/plan_lean_ab.py: E = 512 K = 10 and E = 128 K = 8, tile_m 16, T = 1 ... 16384,
#    uniform and Zipf(1.2) routing, plans back to back and behind the router top-k, CUDA graph
#    replay, every plan checked bit for bit against torch_argon.reference);
# 3. runs tests/test_plan.py, test_cuda_only.py and test_plan_fresh.py on the new build;
# 4. prints the table last: per point the best of each side's runs, new minus base, flagged
#    where slower by more than +0.2 us or not bit-exact.
# The tests get what BUDGET_S (default 470 s in all) leaves after the first round, at least
# 150 s; the second round runs only if it still fits.
# Env: OUT (default /tmp/argon_out), T_LIST, CONFIGS ("512x10,128x8"), ROUNDS (2), BUDGET_S,
# TEST_ARGS (extra pytest arguments), MAX_JOBS (per build; default half the cores).
# Results in $OUT: build_new.log, build_base.log, runs.log, ab_<side><round>.json, tests.log,
# table.txt, summary.txt.
# Exit status: 0 all passed and no point flagged; 2 usage; 1 a build or run failed or a plan is
# not bit-exact; 3 a point slower by more than 0.2 us; 4 the tests failed or timed out.
set -uo pipefail
START=$SECONDS
BASE_DIR=${1:-.ab_base}
REPO=$PWD
OUT=${OUT:-/tmp/argon_out}
T_LIST=${T_LIST:-1,16,128,512,1024,2048,3072,4096,6144,8192,16384}
CONFIGS=${CONFIGS:-512x10,128x8}
ROUNDS=${ROUNDS:-2}
BUDGET_S=${BUDGET_S:-470}
HERE=$(cd "$(dirname "$0")" && pwd)

die() { echo "plan_lean_ab.sh: $*" >&2; exit "${2:-2}"; }
elapsed() { echo $((SECONDS - START)); }
[ -f "$REPO/setup.py" ] && [ -d "$REPO/torch_argon" ] && [ -f "$REPO/bench/plan_lean_ab.py" ] ||
  die "run from the repository root (setup.py, torch_argon/, bench/ here)"
[ -f "$BASE_DIR/setup.py" ] && [ -d "$BASE_DIR/torch_argon/csrc" ] ||
  die "BASE_DIR '$BASE_DIR' must hold the base tree's setup.py and torch_argon/"
BASE=$(cd "$BASE_DIR" && pwd)
[ "$BASE" != "$REPO" ] || die "BASE_DIR is the working tree itself"
[[ "$ROUNDS" =~ ^[12]$ ]] || die "ROUNDS must be 1 or 2, got '$ROUNDS'"
[[ "$BUDGET_S" =~ ^[0-9]+$ ]] || die "BUDGET_S must be a number of seconds, got '$BUDGET_S'"
# Arguments the harness would refuse, refused before the builds.
python3 "$HERE/plan_lean_ab.py" run check --out /dev/null --T "$T_LIST" --configs "$CONFIGS" \
  --check-args || die "bad T_LIST or CONFIGS"
mkdir -p "$OUT" || die "cannot create OUT=$OUT"
OUT=$(cd "$OUT" && pwd)
rm -f "$OUT"/ab_*.json "$OUT"/runs.log "$OUT"/table.txt "$OUT"/summary.txt "$OUT"/tests.log
python3 -c "import sys, torch; sys.exit(not torch.cuda.is_available())" ||
  die "torch sees no CUDA device" 1
. "$HERE/gpu_env.sh"
export PYTHONUNBUFFERED=1 ARGON_CUDA_ARCH="${ARGON_CUDA_ARCH:-90}"
unset ARGON_PLAN_LAB  # both sides as shipped: the new tree without its lab knobs

# 1. Both builds at once. The base builds in BASE_DIR (its own build/ there).
jobs=${MAX_JOBS:-$(( ($(nproc) + 1) / 2 ))}
echo "== builds (MAX_JOBS=$jobs each): new in $REPO, base in $BASE"
(cd "$BASE" && MAX_JOBS=$jobs python3 setup.py build_ext --inplace > "$OUT/build_base.log" 2>&1) &
base_pid=$!
MAX_JOBS=$jobs python3 setup.py build_ext --inplace > "$OUT/build_new.log" 2>&1
new_rc=$?
wait $base_pid
base_rc=$?
echo "builds: new rc=$new_rc, base rc=$base_rc ($(elapsed) s)"
if [ $new_rc -ne 0 ] || [ $base_rc -ne 0 ]; then
  tail -n 15 "$OUT"/build_*.log
  die "a build failed (logs: $OUT/build_*.log)" 1
fi

# 2. One process per side and round, alternately. The same harness (this tree's) times both;
# PYTHONPATH picks the package under test.
run_side() {  # run_side TAG TREE
  local t0=$SECONDS
  PYTHONPATH="$2" python3 "$HERE/plan_lean_ab.py" run "$1" --out "$OUT" --T "$T_LIST" \
    --configs "$CONFIGS" >> "$OUT/runs.log" 2>&1 ||
    { tail -n 20 "$OUT/runs.log"; die "run $1 failed (log: $OUT/runs.log)" 1; }
  echo "run $1: $((SECONDS - t0)) s ($(elapsed) s in all)"
}
t_round=$SECONDS
run_side base1 "$BASE"
run_side new1 "$REPO"
round_s=$((SECONDS - t_round))

# 3. The tests, on the new build: what the budget leaves (at least 150 s); a second round only
# if time is left after them.
left=$((BUDGET_S - $(elapsed) - 10))
test_s=$(( left > 150 ? left : 150 ))
xdist=()
python3 -c "import xdist" 2> /dev/null && xdist=(-n 8)
echo "== tests (timeout ${test_s} s)"
timeout "$test_s" python3 -m pytest -q -x -p no:cacheprovider "${xdist[@]}" tests/test_plan.py \
  tests/test_cuda_only.py tests/test_plan_fresh.py -k "not metal_host" ${TEST_ARGS:-} \
  > "$OUT/tests.log" 2>&1
tests_rc=$?
tail -n 3 "$OUT/tests.log"
[ $tests_rc -eq 124 ] && echo "tests: timed out after ${test_s} s"

if [ "$ROUNDS" = 2 ] && [ $(( $(elapsed) + round_s )) -le "$BUDGET_S" ]; then
  run_side base2 "$BASE"
  run_side new2 "$REPO"
elif [ "$ROUNDS" = 2 ]; then
  echo "second round skipped: $(elapsed) s used, a round takes ${round_s} s, budget ${BUDGET_S} s"
fi

# 4. The table, last.
python3 "$HERE/plan_lean_ab.py" table "$OUT" > "$OUT/table.txt"
table_rc=$?
{
  echo "base: $BASE; new: $REPO; $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  echo "builds ok; tests rc=$tests_rc ($(tail -n 1 "$OUT/tests.log")); table rc=$table_rc;" \
       "$(elapsed) s in all"
} > "$OUT/summary.txt"
echo "== plan A/B (us per plan, CUDA graph replay; b2b: plans back to back, topk: behind the" \
     "router top-k; flagged: new slower by more than 0.2 us, or not bit-exact)"
cat "$OUT/table.txt"
cat "$OUT/summary.txt"
[ $table_rc -ne 0 ] && exit $table_rc
[ $tests_rc -ne 0 ] && exit 4
exit 0
