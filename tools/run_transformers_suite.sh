#!/usr/bin/env bash
# Run transformers' own model tests for the MoE families torch_argon patches (qwen3_moe, mixtral,
# olmoe, qwen2_moe, qwen3_next) with torch_argon.integrations.transformers.patch() applied to
# every model the tests build (at the end of PreTrainedModel.post_init, so from_pretrained's
# meta-device models are patched before their weights load, as a user's hook would).
#
#   tools/run_transformers_suite.sh TESTS_DIR [pytest args...]
#
# TESTS_DIR: the tests/ folder of a transformers checkout of the installed version (it needs
#   tests/models/<family>/, test_modeling_common.py and what those import; transformers' test
#   dependencies, e.g. parameterized, must be importable).
# ARGON=0: the same run without patching (the baseline to compare failures against).
# PYTHON: the interpreter (default: python). The checkout this script is in comes first on
#   PYTHONPATH, so its torch_argon is the one tested.
#
# On exit it prints how many blocks were patched, how many were skipped (and why), and how many
# block forwards ran on argon or fell back to the original forward (gradients needed). A patched
# run that patched no block, or whose blocks never ran on argon, fails (exit 3): a green suite that
# tested nothing is the failure this guards against. Exit: pytest's status, or 3.
set -euo pipefail

if [[ $# -lt 1 || ! -d "$1" ]]; then
    echo "usage: $0 TESTS_DIR [pytest args...]  (TESTS_DIR: a transformers checkout's tests/)" >&2
    exit 2
fi
tests_dir=$(cd "$1" && pwd)
shift
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python}

targets=()
for family in qwen3_moe mixtral olmoe qwen2_moe qwen3_next; do
    if [[ -d "$tests_dir/models/$family" ]]; then
        targets+=("$tests_dir/models/$family")
    else
        echo "note: $tests_dir/models/$family is missing: $family not run" >&2
    fi
done
if [[ ${#targets[@]} -eq 0 ]]; then
    echo "no family's tests under $tests_dir/models" >&2
    exit 2
fi

plugin_dir=$(mktemp -d)
trap 'rm -rf "$plugin_dir"' EXIT
cat > "$plugin_dir/argon_suite_plugin.py" <<'EOF'
"""pytest plugin: patch every transformers model at the end of its __init__ and count what
torch_argon did (ARGON=0: count nothing, patch nothing)."""
import collections
import os
import warnings

import pytest

COUNTS = collections.Counter()
SKIPPED = collections.Counter()
ENABLED = os.environ.get("ARGON", "1") != "0"


def pytest_configure(config):
    if not ENABLED:
        return
    import transformers
    from torch_argon.integrations import transformers as argon_hf

    post_init = transformers.PreTrainedModel.post_init

    def post_init_then_patch(self, *args, **kwargs):
        post_init(self, *args, **kwargs)
        # patch() warns of the blocks it skips, and of a model whose blocks are patched already
        # (an outer model after its inner one): counted here instead, out of the tests' way.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            report = argon_hf.patch(self, strict=False)
        COUNTS["models patched"] += bool(report)
        COUNTS["blocks patched"] += len(report)
        for why in report.skipped.values():
            SKIPPED[why] += 1

    transformers.PreTrainedModel.post_init = post_init_then_patch

    run_on_argon = argon_hf.argon_forward
    why_original = argon_hf._why_original_forward

    def counting_argon_forward(*args, **kwargs):
        COUNTS["block forwards on argon"] += 1
        return run_on_argon(*args, **kwargs)

    def counting_why_original(*args, **kwargs):
        reason = why_original(*args, **kwargs)
        if reason:
            COUNTS[f"block forwards on the original forward ({reason})"] += 1
        return reason

    argon_hf.argon_forward = counting_argon_forward
    argon_hf._why_original_forward = counting_why_original


def pytest_terminal_summary(terminalreporter):
    write = terminalreporter.write_line
    if not ENABLED:
        write("torch_argon: ARGON=0, models not patched (baseline run)")
        return
    write("torch_argon: " + ", ".join(f"{k}: {v}" for k, v in sorted(COUNTS.items())))
    for why, n in SKIPPED.most_common():
        write(f"torch_argon: {n} block(s) skipped: {why}")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    if not ENABLED or session.testscollected == 0:
        return
    if COUNTS["blocks patched"] == 0 or COUNTS["block forwards on argon"] == 0:
        print(f"\ntorch_argon: FAILED: {COUNTS['blocks patched']} block(s) patched, "
              f"{COUNTS['block forwards on argon']} forward(s) on argon: this run tested nothing "
              f"of argon")
        session.exitstatus = 3
EOF

cd "$(dirname "$tests_dir")"
export PYTHONPATH="$repo:$plugin_dir${PYTHONPATH:+:$PYTHONPATH}"
echo "transformers $("$python" -c 'import transformers; print(transformers.__version__)'), ARGON=${ARGON:-1}, tests: $tests_dir" >&2
"$python" -m pytest -p argon_suite_plugin -p no:cacheprovider --rootdir "$(dirname "$tests_dir")" \
    "${targets[@]}" "$@"
