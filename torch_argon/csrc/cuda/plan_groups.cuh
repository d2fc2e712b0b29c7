// What the grouped-GEMM paths of moe_mm and moe_mm_weight_grad share: the group ends that
// torch._grouped_mm takes, derived on the device from a plan's tile map, with the check that the
// map has the plan's layout (each caller falls back to its own tile kernel where it has not).
#pragma once
#include "block_scan.cuh"
#include "cuda_common.cuh"

namespace argon::cuda {
namespace {

// torch._grouped_mm refuses more groups than this ("Can't process more than 1024 groups"):
// stacks of more experts take the tile kernel.
constexpr int64_t kGroupedMmMaxGroups = 1024;

// Whether torch._grouped_mm takes `w` [E, N, Kd] (bf16) as the weights w^T of moe_mm's product:
// row-major rows of Kd (a stack as stored) or column-major (its transposed view, as the backward
// passes it), the other strides 16-byte multiples.
inline bool grouped_mm_takes_weights(const at::Tensor& w) {
  const bool rows = w.stride(2) == 1 && w.stride(1) % 8 == 0;
  const bool columns = w.stride(1) == 1 && w.stride(2) % 8 == 0;
  return (rows || columns) && w.stride(0) % 8 == 0;
}

// Group ends for torch._grouped_mm from tile_expert, and whether tile_expert has the plan's
// layout. One block: tiles per expert (shared atomics: integer counts, order-free), a block
// scan, then every tile checks that it lies inside its expert's range.
__global__ void __launch_bounds__(1024)
    group_ends_kernel(const int* tile_expert, int n_tiles, int E, int tm, int* ends, int* ok) {
  extern __shared__ int s_first[];  // [E]: tiles per expert, then first tile of each expert
  __shared__ int s_warp[32];
  for (int e = threadIdx.x; e < E; e += blockDim.x) s_first[e] = 0;
  __syncthreads();
  for (int j = threadIdx.x; j < n_tiles; j += blockDim.x) {
    const int e = tile_expert[j];
    if (e >= 0 && e < E) atomicAdd(&s_first[e], 1);
  }
  const int total = block_exclusive_scan(s_first, E, s_warp);
  int good = 1;
  for (int j = threadIdx.x; j < n_tiles; j += blockDim.x) {
    const int e = tile_expert[j];
    if (e >= 0 && e < E) {
      const int end = e + 1 < E ? s_first[e + 1] : total;
      good &= j >= s_first[e] && j < end;
    } else {
      good &= j >= total;
    }
  }
  good = __syncthreads_and(good);
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    ends[e] = (e + 1 < E ? s_first[e + 1] : total) * tm;
  }
  if (threadIdx.x == 0) *ok = good;
}

}  // namespace
}  // namespace argon::cuda
