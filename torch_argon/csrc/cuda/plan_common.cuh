// What the CUDA plan kernels (plan_grid.cuh, plan_portable.cuh) share: their parameters, which
// the launcher (plan_cuda.cu) fills, and two small helpers.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "shared/plan_params.h"
#include "cuda_common.cuh"

namespace argon::cuda {

// Over 128 bytes: the compiler then reads each field where it is used instead of all of them up
// front (which changed the grid kernel's code throughout).
struct PlanParams {
  const void* ids;
  const void* weights;
  FloatKind w_kind;
  int ids_64;  // ids are int64 (else int32)
  int n, K, E, tm, r_max, n_tiles;
  int cluster;  // grid kernel: segments per cluster; 0: the grid shape
  int pdl;      // grid kernel: launched with programmatic dependent launch
  int* counts;
  int* offsets;
  int* sorted_token;
  float* sorted_weight;
  int* pos;
  int* tile_expert;
  int* meta;
  int* block_hist;       // grid shape: its workspace (plan_grid.cuh)
  int* keys;             // fallback: each entry's key, then the keys sorted
  int* runs;             // fallback: [2][E + 2] each key's first sorted position, then its end
  const int64_t* order;  // fallback: the entries in sorted order
};

// A weight's bits as float (exact for all three types: bf16 is the top half of a float).
__device__ __forceinline__ float weight_of_bits(FloatKind kind, unsigned bits) {
  if (kind == FloatKind::kF32) return __uint_as_float(bits);
  if (kind == FloatKind::kBF16) return __uint_as_float(bits << 16);
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
}

__device__ __forceinline__ int round_up_pow2(int x, int m) { return (x + m - 1) & ~(m - 1); }

}  // namespace argon::cuda
