// The portable fallback of moe_plan, for what the grid kernel (plan_grid.cuh) does not take:
// E > 1022, plans past its resident blocks, devices without cooperative launch. Simple rather
// than fast (the grid kernel takes every plan of the benchmarked shapes):
//   plan_keys_kernel     each entry's key: its expert, E for -1, E + 1 for out-of-range ids;
//                        every key's run emptied
//   at::sort             stable: the entries in (key, entry) order, the reference's row order
//   plan_runs_kernel     each key's run in the sorted keys: first position, end
//   plan_offsets_kernel  one block: counts, padded offsets (a block scan), meta
//   plan_scatter_kernel  the entry at sorted position j, expert e, to row offsets[e] + j -
//                        first[e]; padding, tail rows and tile_expert by a search of the offsets
// No atomics, so the same bytes on every run; no host sync; graph-capturable.
// Limit: E ints of shared memory in plan_offsets_kernel (the launcher checks it).
#pragma once
#include "block_scan.cuh"
#include "plan_common.cuh"

namespace argon::cuda {

constexpr int kFallbackThreads = 256;  // grid-stride kernels
constexpr int kFallbackScanThreads = 1024;

__global__ void plan_keys_kernel(PlanParams p) {
  const int stride = gridDim.x * blockDim.x;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += stride) {
    const int64_t v = p.ids_64 ? static_cast<const int64_t*>(p.ids)[i]
                               : static_cast<const int32_t*>(p.ids)[i];
    p.keys[i] = v >= 0 && v < p.E ? static_cast<int>(v) : v == -1 ? p.E : p.E + 1;
  }
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < 2 * (p.E + 2); e += stride) {
    p.runs[e] = 0;
  }
}

__global__ void plan_runs_kernel(PlanParams p) {  // p.keys: sorted
  int* first = p.runs;
  int* end = p.runs + p.E + 2;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < p.n; j += gridDim.x * blockDim.x) {
    const int key = p.keys[j];
    if (j == 0 || p.keys[j - 1] != key) first[key] = j;
    if (j == p.n - 1 || p.keys[j + 1] != key) end[key] = j + 1;
  }
}

__global__ void __launch_bounds__(kFallbackScanThreads) plan_offsets_kernel(PlanParams p) {
  extern __shared__ int s_off[];  // [E]
  __shared__ int s_warp[32];
  const int E = p.E;
  const int* first = p.runs;
  const int* end = p.runs + E + 2;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    p.counts[e] = end[e] - first[e];
    s_off[e] = round_up_pow2(end[e] - first[e], p.tm);
  }
  const int n_rows = block_exclusive_scan(s_off, E, s_warp);
  for (int e = threadIdx.x; e < E; e += blockDim.x) p.offsets[e] = s_off[e];
  if (threadIdx.x == 0) {
    p.offsets[E] = n_rows;
    p.meta[ARGON_META_N_ROWS] = n_rows;
    p.meta[ARGON_META_N_TILES] = n_rows / p.tm;
    p.meta[ARGON_META_N_VALID] = p.n - (end[E] - first[E]) - (end[E + 1] - first[E + 1]);
    p.meta[ARGON_META_N_BAD_IDS] = end[E + 1] - first[E + 1];
  }
}

// The expert whose rows [offsets[e], offsets[e + 1]) hold row r < offsets[E].
__device__ __forceinline__ int expert_of_row(const int* offsets, int E, int r) {
  int lo = 0, hi = E;  // offsets[lo] <= r < offsets[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (offsets[mid] <= r ? lo : hi) = mid;
  }
  return lo;
}

__global__ void plan_scatter_kernel(PlanParams p) {  // p.keys: sorted
  const int E = p.E, n_rows = p.offsets[E];
  const int work = max(p.n, max(p.r_max, p.n_tiles));
  for (int x = blockIdx.x * blockDim.x + threadIdx.x; x < work; x += gridDim.x * blockDim.x) {
    if (x < p.n) {  // x: a sorted position
      const int key = p.keys[x];
      const int64_t i = p.order[x];
      int row = -1;
      if (key < E) {
        row = p.offsets[key] + x - p.runs[key];
        p.sorted_token[row] = static_cast<int>(i / p.K);
        p.sorted_weight[row] = weight_of_bits(
            p.w_kind, p.w_kind == FloatKind::kF32 ? static_cast<const unsigned*>(p.weights)[i]
                                                  : static_cast<const uint16_t*>(p.weights)[i]);
      }
      p.pos[i] = row;
    }
    if (x < p.r_max) {  // x: a row; padding and the tail hold no entry
      const int e = x < n_rows ? expert_of_row(p.offsets, E, x) : -1;
      if (e < 0 || x >= p.offsets[e] + p.counts[e]) {
        p.sorted_token[x] = -1;
        p.sorted_weight[x] = 0.f;
      }
    }
    if (x < p.n_tiles) {  // x: a tile
      p.tile_expert[x] = x * p.tm < n_rows ? expert_of_row(p.offsets, E, x * p.tm) : -1;
    }
  }
}

}  // namespace argon::cuda
