#!/usr/bin/env bash
# Assembles a macOS sysroot for tools/check_mps_glue.sh from bare git clones of two public GitHub
# repositories that mirror Apple's SDK: hexops/xcode-frameworks (SDK 14.2: the frameworks'
# headers and .tbd stubs, usr/include, libc++) and hexops-graveyard/sdk-macos-12.0 (SDK 12.0:
# MetalPerformanceShaders and MetalPerformanceShadersGraph, which torch's ATen/mps headers import
# and the first lacks, and libSystem / libc++ stubs for the link).
#   tools/make_macos_sysroot.sh XCODE_FRAMEWORKS_GITDIR SDK_MACOS_12_GITDIR OUT_DIR
# Writes OUT_DIR only (put it outside the repository: Apple's headers are never committed), then
# prints the export line for ARGON_MACOS_SDK.
set -euo pipefail
if [ $# -ne 3 ]; then
  echo "usage: $0 XCODE_FRAMEWORKS_GITDIR SDK_MACOS_12_GITDIR OUT_DIR" >&2
  exit 2
fi
frameworks=$1 sdk12=$2 out=$3
case "$(cd "$(dirname "$out")" && pwd)/" in
  "$(cd "$(dirname "$0")/.." && pwd)"/*) echo "refusing to write Apple's headers inside the repository" >&2; exit 2 ;;
esac
rm -rf "$out" "$out.sdk12"
mkdir -p "$out/System/Library" "$out/usr" "$out.sdk12"
git --git-dir="$frameworks" archive HEAD Frameworks include lib | tar -x -C "$out"
mv "$out/Frameworks" "$out/System/Library/Frameworks"
mv "$out/include" "$out/lib" "$out/usr/"
git --git-dir="$sdk12" archive HEAD \
    root/System/Library/Frameworks/MetalPerformanceShaders.framework \
    root/System/Library/Frameworks/MetalPerformanceShadersGraph.framework \
    root/usr/lib/libSystem.tbd root/usr/lib/libSystem.B.tbd root/usr/lib/libc++.tbd \
    root/usr/lib/libc++.1.tbd root/usr/lib/libc++abi.tbd root/usr/lib/system | tar -x -C "$out.sdk12"
cp -a "$out.sdk12"/root/System/Library/Frameworks/MetalPerformanceShaders*.framework \
    "$out/System/Library/Frameworks/"
cp -an "$out.sdk12"/root/usr/lib/. "$out/usr/lib/"
rm -rf "$out.sdk12"
# The linker follows a framework's re-exports by install name (Foundation re-exports
# .../CoreFoundation.framework/Versions/A/CoreFoundation), where this mirror has only the
# framework's top-level .tbd: link each such stub where the install name points.
for tbd in "$out"/System/Library/Frameworks/*.framework/*.tbd; do
  fw=$(dirname "$tbd")
  name=$(basename "$tbd" .tbd)
  mkdir -p "$fw/Versions/A"
  [ -e "$fw/Versions/A/$name.tbd" ] || ln -s "../../$name.tbd" "$fw/Versions/A/$name.tbd"
done
echo "export ARGON_MACOS_SDK=$out"
