// What the CUDA plan kernels share: their parameter block, how they read one entry, and the
// programmatic-dependent-launch instructions (let the next kernel start; wait for the previous).
// Both kernels (plan_grid.cuh where cooperative launch or clusters are, plan_portable.cuh
// everywhere) take a PlanParams; each uses the fields its comment names, and the launcher in
// plan_cuda.cu fills them.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "../plan_layout.h"
#include "cuda_common.cuh"

namespace argon::cuda {

struct PlanParams {
  const void* ids;
  const void* weights;
  FloatKind w_kind;
  int ids_64;  // ids are int64 (else int32)
  int n, K, E, tm, r_max, n_tiles;
  int chunks;              // portable kernels: chunks of 32 entries per warp (the grid kernel's
                           // is its template parameter)
  int cluster;             // grid kernel: segments, one per block of a cluster (replicas = grid /
                           // cluster); 0: one segment per block, exchanged over the grid
  int passes, digit_bits;  // portable kernel: radix passes over the key bits, bits per pass
  int* counts;
  int* offsets;
  int* sorted_token;
  float* sorted_weight;
  int* pos;
  int* tile_expert;
  int* meta;
  int* block_hist;  // workspace: portable two-kernel path [n_blocks, E] per-block counts;
                    // grid kernel, several segments: totals, then [E + 2][segments] counts
  int* block_bad;   // portable two-kernel path: [n_blocks]
  int pdl;          // grid kernel: launched with programmatic dependent launch (it then zeroes
                    // its shared memory before waiting for the previous kernel)
};

// Programmatic dependent launch (sm_90+; no-ops below): a kernel launched with it may start
// before the previous kernel in the stream ends, and must wait before it touches what that
// kernel writes or reads; a kernel lets the next such launch start early.
__device__ __forceinline__ void let_dependents_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_prerequisites() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// The key of entry i: its expert, or E for -1 and for out-of-range ids (counted in bad).
__device__ __forceinline__ int key_of(const PlanParams& p, int64_t i, int& bad) {
  const int64_t v = p.ids_64 ? static_cast<const int64_t*>(p.ids)[i]
                             : static_cast<int64_t>(static_cast<const int32_t*>(p.ids)[i]);
  if (v >= 0 && v < p.E) return static_cast<int>(v);
  bad += (v != -1);
  return p.E;
}

// The weight of entry i as float (exact for all three types: bf16 is the top half of a float).
__device__ __forceinline__ float weight_of(const PlanParams& p, int64_t i) {
  if (p.w_kind == FloatKind::kF32) return static_cast<const float*>(p.weights)[i];
  const unsigned short bits = static_cast<const unsigned short*>(p.weights)[i];
  if (p.w_kind == FloatKind::kBF16) return __uint_as_float(static_cast<unsigned>(bits) << 16);
  return __half2float(__ushort_as_half(bits));
}

// Keys and weights of four chunks of a lane, c0 .. c0 + 3 (slot = slot0 + 32 * c, entry
// begin + slot), into key[0..3] and wv[0..3]. Meant to have four loads in flight, but each id's
// range check follows its load, and the SASS (sm_90) waits for each id before the next load:
// one memory round trip per chunk (bench/plan_cuda_notes.md, "Leads");
// slots past chunk C or past n_local get key `absent` and weight 0 and read nothing. Weights
// are read only for the chunks c whose bit c is set in `weighed` (the others get 0).
__device__ __forceinline__ void load_four_chunks(const PlanParams& p, int64_t begin, int slot0,
                                                 int c0, int C, int n_local, int absent,
                                                 int* key, float* wv, int& bad,
                                                 unsigned weighed = ~0u) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int idx = slot0 + 32 * (c0 + j);
    const bool here = c0 + j < C && idx < n_local;
    key[j] = here ? key_of(p, begin + idx, bad) : absent;
    wv[j] = here && ((weighed >> (c0 + j)) & 1u) ? weight_of(p, begin + idx) : 0.f;
  }
}

__device__ __forceinline__ int round_up_pow2(int x, int m) { return (x + m - 1) & ~(m - 1); }

}  // namespace argon::cuda
