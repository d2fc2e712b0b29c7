#!/usr/bin/env bash
# The main job: a MoE prefill layer on the best device (mps, cuda, cpu), checked and timed.
# Extra arguments go to `python -m torch_argon` (see --help).
ARGON_REQUIREMENTS="${ARGON_REQUIREMENTS:-requirements-main.txt}"
. "$(dirname "$0")/env.sh"
python -m torch_argon "$@"
