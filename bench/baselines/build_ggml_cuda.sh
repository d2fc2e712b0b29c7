#!/usr/bin/env bash
# Builds ggml's test-backend-ops, llama.cpp's quantized MUL_MAT_ID baseline of bench/bench_quant.py
# (--llamacpp), from the source bench/baselines/stage_ggml.sh staged:
#
#   bash bench/baselines/build_ggml_cuda.sh          # CUDA backend, sm_90 only (the H100/H200)
#   bash bench/baselines/build_ggml_cuda.sh --cpu    # CPU backend only: the parser's test binary
#
# Writes bench/baselines/ggml_bin/test-backend-ops-cuda (or -cpu), stripped, ggml linked in
# statically, the CUDA runtime and cuBLAS dynamically (gitignored; ggml_mul_mat_id.py puts the
# running Python's NVIDIA wheels on its library path). The build tree is bench/baselines/ggml_build_cuda/ (or _cpu/);
# a second run rebuilds only what changed. Parallel jobs: MAX_JOBS (default: every core).
# ggml_build_cuda.unit_times gets each CUDA unit's "wall user sys command" seconds (where
# /usr/bin/time exists).
#
# What is built, and why:
# - test-backend-ops with bench/baselines/ggml_mul_mat_id_cases.patch applied (our lines: with
#   ARGON_MUL_MAT_ID_CASES set, perf mode runs exactly the MUL_MAT_ID shapes listed there, built
#   as ggml's own test_mul_mat_id cases; see bench/baselines/ggml_mul_mat_id.py).
# - CUDA for sm_90 only (90-real; ggml's MMQ has no sm_90a-only path), flash attention off
#   (GGML_CUDA_FA=OFF empties its kernels; their translation units still compile, quickly),
#   no NCCL, no VMM pool (the build machine has no libcuda.so to link; ggml then uses its
#   cudaMalloc pool, which the timed loop does not touch once warm). CUDA graphs on, as
#   llama.cpp builds ggml (standalone ggml defaults to off; ggml-cuda itself declines them
#   where MUL_MAT_ID takes a path that syncs with the host), and as our side is timed.
# - CPU backend without -march=native (the binary must run on other x86-64 hosts).
# cuBLAS headers and libraries: the CUDA toolkit's, or else the nvidia-cublas wheel of the
# python3 on PATH (CUBLAS_ROOT=<dir with include/ and lib/> overrides both).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
src="$here/ggml_src"
backend=cuda
[ "${1:-}" = "--cpu" ] && backend=cpu
build="$here/ggml_build_$backend"
bin_dir="$here/ggml_bin"
jobs="${MAX_JOBS:-$(nproc)}"

[ -f "$src/GGML_COMMIT" ] || { echo "build_ggml_cuda.sh: no staged ggml in $src: run bench/baselines/stage_ggml.sh first" >&2; exit 1; }

# Our cases: stage_ggml.sh applied the patch; applied again where `patch` exists, in case it
# changed since (a no-op for the compiler when it did not).
if command -v patch > /dev/null; then
  bash "$here/stage_ggml.sh" --patch-only
fi
grep -q ARGON_MUL_MAT_ID_CASES "$src/tests/test-backend-ops.cpp" \
  || { echo "build_ggml_cuda.sh: $src/tests/test-backend-ops.cpp lacks our cases' patch (run stage_ggml.sh)" >&2; exit 1; }

cmake_args=(
  -G Ninja -DCMAKE_BUILD_TYPE=Release
  -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DGGML_CCACHE=OFF
  -DGGML_BUILD_TESTS=ON -DGGML_BUILD_EXAMPLES=OFF
)
if [ "$backend" = cuda ]; then
  nvcc_bin="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
  cuda_home="$(cd "$(dirname "$(readlink -f "$nvcc_bin")")/.." && pwd)"
  cublas_root="${CUBLAS_ROOT:-}"
  if [ -z "$cublas_root" ] && [ ! -f "$cuda_home/include/cublas_v2.h" ]; then
    for d in $(python3 -c "import nvidia; print(' '.join(nvidia.__path__))" 2>/dev/null); do
      for sub in cu13 cublas; do
        [ -f "$d/$sub/include/cublas_v2.h" ] && { cublas_root="$d/$sub"; break 2; }
      done
    done
    [ -n "$cublas_root" ] || { echo "build_ggml_cuda.sh: no cublas_v2.h in $cuda_home and no nvidia-cublas wheel: set CUBLAS_ROOT" >&2; exit 1; }
  fi
  cmake_args+=(
    -DCMAKE_CUDA_COMPILER="$nvcc_bin" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real
    -DGGML_CUDA_FA=OFF -DGGML_CUDA_NCCL=OFF -DGGML_CUDA_NO_VMM=ON -DGGML_CUDA_GRAPHS=ON
  )
  if [ -x /usr/bin/time ]; then
    # each nvcc run's wall and CPU seconds, one line per translation unit: the data of the
    # build-time estimate for other core counts (bench/README.md)
    cmake_args+=(-DCMAKE_CUDA_COMPILER_LAUNCHER="/usr/bin/time;-a;-o;$build.unit_times;-f;%e %U %S %C")
  fi
  if [ -n "$cublas_root" ]; then
    lib() { ls "$cublas_root"/lib/lib$1.so* | head -n 1; }
    cmake_args+=(
      -DCUDA_cublas_LIBRARY="$(lib cublas)" -DCUDA_cublasLt_LIBRARY="$(lib cublasLt)"
      -DCMAKE_CUDA_FLAGS="-I$cublas_root/include" -DCMAKE_CXX_FLAGS="-I$cublas_root/include"
    )
  fi
fi

cmake -S "$src" -B "$build" "${cmake_args[@]}" > "$build.cmake.log" 2>&1 \
  || { tail -n 30 "$build.cmake.log"; echo "build_ggml_cuda.sh: cmake failed (log: $build.cmake.log)" >&2; exit 1; }
if [ "$backend" = cuda ]; then
  echo "CUDA translation units: $(ninja -C "$build" -t targets all | grep -c '\.cu\.o:')"
fi
t0=$SECONDS
ninja -C "$build" -j "$jobs" test-backend-ops
echo "built in $((SECONDS - t0)) s"
mkdir -p "$bin_dir"
strip -o "$bin_dir/test-backend-ops-$backend" "$build/bin/test-backend-ops"
cp "$src/GGML_COMMIT" "$bin_dir/GGML_COMMIT"
echo "$bin_dir/test-backend-ops-$backend: $(du -h "$bin_dir/test-backend-ops-$backend" | cut -f1)"
