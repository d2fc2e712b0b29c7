#!/usr/bin/env bash
# The Objective-C++ MPS glue (torch_argon/csrc/metal/mps/*.mm) checked against Apple's real
# headers from Linux: each .mm compiled by clang for arm64-apple-macos14 (a syntax and semantic
# pass with warnings, then a Mach-O object), and the objects linked into a dylib against the
# SDK's .tbd stubs (Metal, Foundation, libobjc, libc++): every symbol left unresolved must be
# torch's or ours (the shared op bodies), so a misspelt or missing Apple API fails here. Run it whenever csrc/metal/mps/ or the kernels' bindings change.
#
# Needs a macOS sysroot in ARGON_MACOS_SDK (tools/make_macos_sysroot.sh assembles one from two
# public mirrors of the SDK; never commit it); prints a skip line and exits 0 without one.
# Environment: CXX (default clang++-19), PYTHON (default python3, with torch: its headers).
set -euo pipefail
cd "$(dirname "$0")/.."
SDK=${ARGON_MACOS_SDK:-}
if [ -z "$SDK" ] || [ ! -d "$SDK/System/Library/Frameworks/Metal.framework" ]; then
  echo "check_mps_glue: SKIP: ARGON_MACOS_SDK is not a macOS sysroot (tools/make_macos_sysroot.sh makes one)"
  exit 0
fi
CXX=${CXX:-clang++-19}
PYTHON=${PYTHON:-python3}
TI=$("$PYTHON" -c 'import torch.utils.cpp_extension as c; print(c.include_paths()[0])')
OUT=${GLUE_OUT:-build/mps_glue}
mkdir -p "$OUT"
"$PYTHON" -m build_tools.metal_codegen --out build/argon_generated >/dev/null  # metal_source.inc

TARGET=(-target arm64-apple-macos14 -isysroot "$SDK")
FLAGS=(-x objective-c++ -std=c++20 -fobjc-arc -fvisibility=hidden "${TARGET[@]}"
       -DTORCH_API_INCLUDE_EXTENSION_H -DTORCH_EXTENSION_NAME=_C -DARGON_WITH_MPS=1
       -I"$TI" -I"$TI/torch/csrc/api/include" -Itorch_argon/csrc -Itorch_argon/metal
       -Ibuild/argon_generated
       -Wall -Wextra -Wno-unused-parameter -Wunguarded-availability-new)
echo "check_mps_glue: $($CXX --version | head -1); sysroot $SDK"
rc=0
objects=()
for f in torch_argon/csrc/metal/mps/*.mm; do
  obj="$OUT/$(basename "$f" .mm).o"
  t0=$(date +%s)
  if "$CXX" "${FLAGS[@]}" -c -O2 "$f" -o "$obj" 2> "$OUT/$(basename "$f").log"; then
    warnings=$(grep -c "warning:" "$OUT/$(basename "$f").log" || true)
    echo "  compile $f: ok, $warnings warnings ($(( $(date +%s) - t0 )) s): $(file -b "$obj" | cut -d, -f1)"
    objects+=("$obj")
  else
    echo "  compile $f: FAILED"; cat "$OUT/$(basename "$f").log"; rc=1
  fi
  grep "warning:" "$OUT/$(basename "$f").log" | sed 's/^/    /' || true
done
if [ $rc -eq 0 ]; then
  # The link against the SDK's stubs with nothing left to load time: every symbol it cannot
  # resolve must be torch's or ours (csrc/metal/out_ops.cpp); an Apple symbol there is a misspelt
  # class or function, or one this SDK does not have.
  # lld's Mach-O linker: Debian's lld-19 puts ld64.lld under /usr/lib/llvm-19/bin only.
  LLD=$(command -v ld64.lld || ls /usr/lib/llvm-*/bin/ld64.lld 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -z "$LLD" ]; then
    echo "  link: FAILED: no ld64.lld (install lld, e.g. apt-get install lld-19)"
    echo "check_mps_glue: FAILED"
    exit 1
  fi
  PATH="$(dirname "$LLD"):$PATH"
  LINK=("$CXX" "${TARGET[@]}" -fuse-ld=lld -shared "${objects[@]}" -framework Metal
        -framework Foundation -lobjc -lc++)
  "${LINK[@]}" -Wl,--error-limit=0 -o "$OUT/strict.dylib" > "$OUT/link.log" 2>&1 || true
  sed -n 's/.*undefined symbol: //p' "$OUT/link.log" | sort -u > "$OUT/undefined.txt"
  other=$(grep -Ev '^(at|c10|torch|caffe2|argon)::' "$OUT/undefined.txt" || true)
  n_ours=$(grep -cE '^(at|c10|torch|caffe2|argon)::' "$OUT/undefined.txt" || true)
  link_errors=$(grep "error:" "$OUT/link.log" | grep -v "undefined symbol" | grep -v "linker command failed" || true)
  if [ -n "$other" ] || [ -n "$link_errors" ]; then
    echo "  link: FAILED"
    [ -n "$other" ] && echo "$other" | sed 's/^/    unresolved: /'
    [ -n "$link_errors" ] && echo "$link_errors" | sed 's/^/    /'
    rc=1
  else
    echo "  link against the SDK stubs (Metal, Foundation, libobjc, libc++): every Apple symbol resolved;"
    echo "    $n_ours left for load time, all torch's or ours, e.g.:"
    grep -E '^at::mps' "$OUT/undefined.txt" | sed 's/^/      /'
    dylib="$OUT/libargon_mps_glue.dylib"
    if "${LINK[@]}" -Wl,-undefined,dynamic_lookup -o "$dylib" 2>> "$OUT/link.log"; then
      echo "  dylib: $(file -b "$dylib" | cut -d, -f1)"
    else
      echo "  dylib link: FAILED"; tail "$OUT/link.log"; rc=1
    fi
  fi
fi
echo "check_mps_glue: $([ $rc -eq 0 ] && echo ok || echo FAILED)"
exit $rc
