#!/usr/bin/env bash
# Same-run A/B of the whole layer between two built trees (bench/layer_ab.py): the sides run
# alternately (base, new, new, base), one process each, then the table.
#   bash bench/layer_ab.sh BASE_TREE NEW_TREE OUT [layer_ab.py run options]
set -uo pipefail
base=$1 new=$2 out=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
. "$here/gpu_env.sh"
for side in "base1:$base" "new1:$new" "new2:$new" "base2:$base"; do
  python3 "$here/layer_ab.py" run "${side%%:*}" --tree "${side#*:}" --out "$out" "$@" ||
    echo "layer_ab: ${side%%:*} failed"
done
python3 "$here/layer_ab.py" table "$out"
