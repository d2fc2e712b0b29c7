#!/usr/bin/env bash
# The main job: a MoE prefill layer on the best device (mps, cuda, cpu), checked and timed.
# Extra arguments go to `python -m torch_argon` (see --help). The job runs in the caller's
# directory: relative paths (--gguf FILE, --json, --plot) are the caller's, and the report lands
# there by default.
ARGON_REQUIREMENTS="${ARGON_REQUIREMENTS:-requirements-main.txt}"
caller=$PWD
. "$(dirname "$0")/env.sh"  # (makes .venv and builds, in the checkout)
cd "$caller"
# exec: Ctrl-C reaches the job alone, which ends with one line and status 130. PYTHONSAFEPATH:
# the checkout's torch_argon (on .venv's path), not a torch_argon folder in the caller's directory.
PYTHONSAFEPATH=1 exec python -m torch_argon "$@"
