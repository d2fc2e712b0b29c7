#!/usr/bin/env bash
# The test suite: every backend built here against the reference, plus the ThreadSanitizer run
# of the Metal kernels on host threads. Extra arguments go to pytest.
. "$(dirname "$0")/env.sh"
if [ -f .ci/tsan.sh ]; then bash .ci/tsan.sh; fi
python -m pytest -q "$@"
