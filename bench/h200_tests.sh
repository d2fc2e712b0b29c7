#!/usr/bin/env bash
# The test suite on the lent GPU machine, inside one call (at most 6 minutes on a 16-core H200):
# the tests that can reach a CUDA kernel (`pytest --gpu-run`: the cuda and metal_cuda
# backends' parametrizations and every test without a backend of its own, less the cpu_only
# ones; tests/conftest.py says which), on 16 xdist workers that steal work from each other, so
# a slow parametrization does not hold the run's end. The CPU backends and the cpu_only tests
# are CI's, on every push.
#   bash bench/h200_tests.sh              # after a build (bash bench/h200_run.sh build)
#   bash bench/h200_tests.sh -k plan      # extra arguments go to pytest
# Writes $OUT/tests.log (every test id and its outcome; a crashed worker's test is named) and
# $OUT/tests_durations.txt (the 60 slowest); prints the summary, the failures and crashes.
# Exit status: pytest's (124: the time limit, H200_TESTS_LIMIT_S seconds, default 360).
set -uo pipefail
OUT="${OUT:-/tmp/argon_out}"
mkdir -p "$OUT"
. "$(dirname "$0")/gpu_env.sh"
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
# One CPU thread per worker: the tests' CPU side (the references) would otherwise run 16 OpenMP
# threads in each of 16 workers, 256 threads on 16 cores waiting on each other.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
workers=()
if python3 -c "import xdist" 2>/dev/null; then
  # worksteal (xdist >= 3.2): an idle worker takes tests queued for a busy one.
  dist=$(python3 -c "import xdist; v = tuple(map(int, xdist.__version__.split('.')[:2]));
print('worksteal' if v >= (3, 2) else 'load')")
  workers=(-n "${H200_TESTS_WORKERS:-16}" --dist "$dist")
else
  echo "h200_tests.sh: no pytest-xdist here: one process (it will not finish in 6 minutes)"
fi
t0=$SECONDS
timeout -s INT "${H200_TESTS_LIMIT_S:-360}" python3 -m pytest --gpu-run -v -rf \
  -p no:cacheprovider --durations=60 ${workers[@]+"${workers[@]}"} tests "$@" > "$OUT/tests.log" 2>&1
rc=$?
echo "== h200_tests.sh rc=$rc in $((SECONDS - t0)) s (log: \$OUT/tests.log)"
awk '/slowest .*durations/ {on = 1} on && /short test summary/ {on = 0} on' "$OUT/tests.log" \
  > "$OUT/tests_durations.txt"
grep -E "node down|crashed|^FAILED|^ERROR" "$OUT/tests.log" | head -40
tail -n 1 "$OUT/tests.log"
exit "$rc"
