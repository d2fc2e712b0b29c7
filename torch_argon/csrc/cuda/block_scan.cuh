// Block-wide collectives used by the plan and moe_mm kernels.
#pragma once
#include <cstdint>

namespace argon::cuda {

__device__ __forceinline__ int warp_sum(int x) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) x += __shfl_xor_sync(0xffffffffu, x, d);
  return x;
}

// Exclusive prefix sum, in place, of s[0, n) in shared memory (any n: each thread owns a run
// of ceil(n / blockDim.x) elements, added in a fixed order); returns the total to every thread.
// blockDim.x a multiple of 32; `s_warp`: 32 ints of scratch; all threads call it; it begins and
// ends with a barrier. Not inlined, loops rolled: one copy serves every call site, as the plan
// kernels are bound by fetching their instructions.
static __device__ __noinline__ int block_exclusive_scan(int* s, int n, int* s_warp) {
  __syncthreads();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int n_warps = blockDim.x >> 5;
  const int per = (n + blockDim.x - 1) / blockDim.x;
  const int lo = min(n, tid * per), hi = min(n, lo + per);
  int sum = 0;
#pragma unroll 1
  for (int i = lo; i < hi; ++i) sum += s[i];
  int incl = sum;
#pragma unroll 1
  for (int d = 1; d < 32; d <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= d) incl += y;
  }
  if (lane == 31) s_warp[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    int v = lane < n_warps ? s_warp[lane] : 0;
#pragma unroll 1
    for (int d = 1; d < 32; d <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, v, d);
      if (lane >= d) v += y;
    }
    s_warp[lane] = v;
  }
  __syncthreads();
  int run = incl - sum + (warp > 0 ? s_warp[warp - 1] : 0);
  const int total = s_warp[n_warps - 1];
#pragma unroll 1
  for (int i = lo; i < hi; ++i) {
    const int v = s[i];
    s[i] = run;
    run += v;
  }
  __syncthreads();
  return total;
}

// Exclusive prefix sum over the block of one value per thread (thread order) with ONE barrier:
// after it every warp scans the warp totals itself instead of waiting for warp 0's result.
// Returns the thread's prefix and sets `total` in every thread. `s_warp` (32 values) must be
// free, and holds warp totals after: a caller that scans again needs a barrier first.
template <class V>
__device__ __forceinline__ V block_exclusive_scan_1bar(V x, V* s_warp, V& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_warps = blockDim.x >> 5;
  V incl = x;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const V y = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= d) incl += y;
  }
  if (lane == 31) s_warp[warp] = incl;
  __syncthreads();
  V v = lane < n_warps ? s_warp[lane] : V{0};
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const V y = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += y;
  }
  total = __shfl_sync(0xffffffffu, v, 31);
  const V warps_before = __shfl_sync(0xffffffffu, v, (warp + 31) & 31);
  return (warp > 0 ? warps_before : V{0}) + incl - x;
}

}  // namespace argon::cuda
