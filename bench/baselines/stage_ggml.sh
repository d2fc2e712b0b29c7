#!/usr/bin/env bash
# Stages the ggml source that bench/baselines/build_ggml_cuda.sh builds into llama.cpp's quantized
# MUL_MAT_ID baseline (ggml's test-backend-ops): a benchmark baseline, never a dependency.
#
#   bash bench/baselines/stage_ggml.sh [GGML_GIT_DIR]
#   bash bench/baselines/stage_ggml.sh --patch-only   # re-apply our cases' patch only
#
# GGML_GIT_DIR is a git directory (bare or not) holding ggml-org/ggml's history (default: the
# mirror /work/.mirror/ggml-org+ggml/repo, or $GGML_GIT). Only the pinned commit below is
# exported, and only what the CPU and CUDA backends and tests/ need (the other backends'
# folders stay out, which keeps the staged tree small enough to carry to the device machine).
# Writes bench/baselines/ggml_src/ (gitignored) with GGML_COMMIT inside it, and applies
# bench/baselines/ggml_mul_mat_id_cases.patch (our lines: with ARGON_MUL_MAT_ID_CASES set,
# test-backend-ops' perf mode runs exactly the MUL_MAT_ID shapes listed there; see
# bench/baselines/ggml_mul_mat_id.py) here, where `patch` is sure to exist. A second run with
# the same commit only re-applies the patch.
set -euo pipefail

# The ggml commit every llama.cpp column in bench/results/ was measured with.
GGML_COMMIT=d99724f2b141fed9e1a9f402213506c081433465

here="$(cd "$(dirname "$0")" && pwd)"
dest="$here/ggml_src"

# test-backend-ops.cpp = ggml's (kept as test-backend-ops.cpp.orig) + our cases' patch. The file
# is rewritten only when its text changes, so a rebuild recompiles nothing else.
apply_cases_patch() {
  local tbo="$1/tests/test-backend-ops.cpp"
  [ -f "$tbo.orig" ] || cp "$tbo" "$tbo.orig"
  cp "$tbo.orig" "$tbo.patched"
  patch -s --no-backup-if-mismatch "$tbo.patched" < "$here/ggml_mul_mat_id_cases.patch"
  if cmp -s "$tbo.patched" "$tbo"; then rm "$tbo.patched"; else mv "$tbo.patched" "$tbo"; fi
}
if [ "${1:-}" = "--patch-only" ]; then
  apply_cases_patch "$dest"
  exit 0
fi

git_dir="${1:-${GGML_GIT:-/work/.mirror/ggml-org+ggml/repo}}"
if [ -f "$dest/GGML_COMMIT" ] && [ "$(cat "$dest/GGML_COMMIT")" = "$GGML_COMMIT" ]; then
  apply_cases_patch "$dest"
  echo "ggml $GGML_COMMIT already staged in $dest"
  exit 0
fi
if ! git --git-dir="$git_dir" cat-file -e "$GGML_COMMIT^{commit}" 2>/dev/null; then
  echo "stage_ggml.sh: $git_dir does not hold ggml commit $GGML_COMMIT" >&2
  echo "  (pass a git directory of ggml-org/ggml that has it, e.g. a clone of github.com/ggml-org/ggml)" >&2
  exit 1
fi

rm -rf "$dest" "$dest.part"
mkdir -p "$dest.part"
git --git-dir="$git_dir" archive "$GGML_COMMIT" \
    CMakeLists.txt LICENSE ggml.pc.in cmake include tests \
    src/CMakeLists.txt src/ggml-cpu src/ggml-cuda src/ggml-blas \
    $(git --git-dir="$git_dir" ls-tree --name-only "$GGML_COMMIT" src/ | grep -v '^src/ggml-[a-z]*$' \
      | grep -v '^src/CMakeLists.txt$') \
  | tar -x -C "$dest.part"
echo "$GGML_COMMIT" > "$dest.part/GGML_COMMIT"
apply_cases_patch "$dest.part"
mv "$dest.part" "$dest"
echo "staged ggml $GGML_COMMIT in $dest ($(du -sh "$dest" | cut -f1))"
