#!/usr/bin/env bash
# Stages vLLM's Triton fused_moe (a benchmark baseline, never a dependency of torch_argon) into a
# gitignored folder that a device call can carry (the GPU machines have no network):
#
#   bash bench/baselines/stage_vllm.sh                 # vLLM 0.33.0 into .baselines/vllm/
#   bash bench/baselines/stage_vllm.sh 0.33.0 DEST     # another version / folder
#   VLLM_WHEEL=/path/vllm-0.33.0-....whl bash bench/baselines/stage_vllm.sh   # no download
#
# What it takes from vLLM's PyPI wheel (pip download --no-deps; ~340 MB, kept only in a temporary
# folder), about 100 KB in all:
#   fused_moe/fused_moe.py             the Triton kernel, its launcher and vLLM's driver
#                                      (fused_experts_impl, the config lookup)
#   fused_moe/moe_align_block_size.py  the Python side of the token/expert alignment
#   fused_moe/configs/E=512,N=512,device_name=*.json, E=128,N=768,device_name=*.json
#                                      vLLM's tuned block configs for our two layer shapes (N is
#                                      the expert width I), bf16/fp16 only: the fp8/int8/int4
#                                      variants (",dtype=..." in the name) are left out
#   LICENSE                            vLLM's (Apache-2.0)
#   VERSION.json                       the version, the wheel's name and sha256, the files
# VLLM_SHAPES="512x512 128x768 ..." (E x N) stages the configs of other shapes too.
# vLLM's compiled ops (_C, _moe_C) are built for another torch and are not taken:
# bench/baselines/vllm_glue.py supplies their equivalents.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VERSION="${1:-0.33.0}"
DEST="${2:-$ROOT/.baselines/vllm}"
SHAPES="${VLLM_SHAPES:-512x512 128x768}"
PYTHON="${PYTHON:-python3}"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
wheel="${VLLM_WHEEL:-}"
if [ -z "$wheel" ]; then
  echo "stage_vllm: downloading vllm==$VERSION (wheel, no dependencies)" >&2
  # vLLM's wheels are abi3 for x86-64 Linux: ask for that one whatever this host is
  "$PYTHON" -m pip download -q "vllm==$VERSION" --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_31_x86_64 --platform manylinux_2_35_x86_64 -d "$tmp"
  wheel="$(ls "$tmp"/vllm-"$VERSION"-*.whl)"
fi

rm -rf "$DEST"
mkdir -p "$DEST"
"$PYTHON" - "$wheel" "$DEST" "$VERSION" $SHAPES <<'EOF'
import datetime
import hashlib
import json
import os
import re
import sys
import zipfile

wheel, dest, version, shapes = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
PKG = "vllm/model_executor/layers/fused_moe/"
wanted_configs = set()
for shape in shapes:
    e, n = shape.split("x")
    wanted_configs.add((int(e), int(n)))
config_name = re.compile(r"E=(\d+),N=(\d+),device_name=([^,]+)\.json$")

taken = {}
with zipfile.ZipFile(wheel) as z:
    names = z.namelist()
    members = {PKG + "fused_moe.py": "fused_moe/fused_moe.py",
               PKG + "moe_align_block_size.py": "fused_moe/moe_align_block_size.py"}
    members.update({n: "LICENSE" for n in names
                    if re.fullmatch(r"vllm-[^/]+\.dist-info/(licenses/)?LICENSE", n)})
    for n in names:
        if n.startswith(PKG + "configs/"):
            m = config_name.search(n.rsplit("/", 1)[1])
            if m and (int(m.group(1)), int(m.group(2))) in wanted_configs:
                members[n] = "fused_moe/configs/" + n.rsplit("/", 1)[1]
    missing = [n for n in list(members)[:2] if n not in names]
    if missing:
        sys.exit(f"stage_vllm: {os.path.basename(wheel)} has no {missing}: this vLLM version "
                 "lays out fused_moe differently; stage a version the adapter knows")
    for src, rel in members.items():
        path = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with z.open(src) as f, open(path, "wb") as out:
            out.write(f.read())
        taken[rel] = src

with open(wheel, "rb") as f:
    sha = hashlib.sha256(f.read()).hexdigest()
configs = sorted(r for r in taken if r.startswith("fused_moe/configs/"))
record = {"vllm": version, "wheel": os.path.basename(wheel), "wheel_sha256": sha,
          "staged_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
          "files": sorted(taken), "configs_for_shapes_ExN": shapes}
with open(os.path.join(dest, "VERSION.json"), "w") as f:
    json.dump(record, f, indent=1)
print(f"stage_vllm: vLLM {version} -> {dest}: {len(taken)} files, {len(configs)} configs:")
for c in configs:
    print("  " + c.split("/")[-1])
EOF
du -sh "$DEST" | sed 's/^/stage_vllm: size /'
