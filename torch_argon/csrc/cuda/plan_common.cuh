// What the CUDA plan kernels share: their parameter block, how they read chunks of entries, and the
// programmatic-dependent-launch instructions (let the next kernel start; wait for the previous).
// Both kernels (plan_grid.cuh where cooperative launch or clusters are, plan_portable.cuh
// everywhere) take a PlanParams; each uses the fields its comment names, and the launcher in
// plan_cuda.cu fills them.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

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

// Reading entries. The loads (issue_chunk_loads) are apart from what uses them
// (chunk_keys_and_weights), so that a kernel has the loads of all its chunks in flight at once
// and may do other work meanwhile. When each id's range check came right after its load, the
// compiler waited out a full memory round trip per chunk (SASS of plan_grid_kernel<5>: one
// LDG, its ISETP, the next LDG, ...).
template <int N>
struct ChunkLoads {
  int64_t id[N];       // -1 where absent
  unsigned wbits[N];   // a float's 32 bits, or a half's or a bfloat16's 16 in the low half
  bool here[N];        // the slot holds an entry
};

template <int N, typename Id>
__device__ __forceinline__ void load_ids_as(const void* ids, int64_t begin, const int* idx,
                                            const bool* here, int64_t* id) {
  Id raw[N];
#pragma unroll
  for (int j = 0; j < N; ++j) {
    raw[j] = here[j] ? static_cast<const Id*>(ids)[begin + idx[j]] : Id(-1);
  }
  // int32 ids are widened only after all N loads are issued.
#pragma unroll
  for (int j = 0; j < N; ++j) id[j] = static_cast<int64_t>(raw[j]);
}

// The ids of entries begin + idx[j] (-1 where here[j] is false), N loads in flight. Id is the
// ids' type where the kernel is compiled for one (int64_t or int32_t), else void: p.ids_64
// picks at run time.
template <int N, typename Id = void>
__device__ __forceinline__ void load_ids(const PlanParams& p, int64_t begin, const int* idx,
                                         const bool* here, int64_t* id) {
  if constexpr (!std::is_void_v<Id>) {
    load_ids_as<N, Id>(p.ids, begin, idx, here, id);
  } else if (p.ids_64) {
    load_ids_as<N, int64_t>(p.ids, begin, idx, here, id);
  } else {
    load_ids_as<N, int32_t>(p.ids, begin, idx, here, id);
  }
}

// The loads of N chunks of a lane, c0 .. c0 + N - 1 (slot = slot0 + 32 * c, entry begin +
// slot). Slots past chunk C or past n_local read nothing. Weights are read only for the chunks
// c whose bit c is set in `weighed` (the others get zero bits). Id: as for load_ids.
template <int N, typename Id = void>
__device__ __forceinline__ ChunkLoads<N> issue_chunk_loads(const PlanParams& p, int64_t begin,
                                                           int slot0, int c0, int C,
                                                           int n_local, unsigned weighed) {
  ChunkLoads<N> l;
  int idx[N];
#pragma unroll
  for (int j = 0; j < N; ++j) {
    idx[j] = slot0 + 32 * (c0 + j);
    l.here[j] = c0 + j < C && idx[j] < n_local;
  }
  load_ids<N, Id>(p, begin, idx, l.here, l.id);
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const int64_t i = begin + idx[j];
    l.wbits[j] = !l.here[j] || !((weighed >> (c0 + j)) & 1u) ? 0u
                 : p.w_kind == FloatKind::kF32 ? static_cast<const unsigned*>(p.weights)[i]
                                               : static_cast<const unsigned short*>(p.weights)[i];
  }
  return l;
}

// The key of an id: its expert, or E for -1 and for out-of-range ids (counted in bad).
__device__ __forceinline__ int key_of_id(const PlanParams& p, int64_t v, int& bad) {
  if (v >= 0 && v < p.E) return static_cast<int>(v);
  bad += (v != -1);
  return p.E;
}

// A weight as float (exact for all three types: bf16 is the top half of a float); zero bits
// are 0.0 in each.
__device__ __forceinline__ float weight_of_bits(FloatKind kind, unsigned bits) {
  if (kind == FloatKind::kF32) return __uint_as_float(bits);
  if (kind == FloatKind::kBF16) return __uint_as_float(bits << 16);
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
}

// Keys and weights from the loads: slots without an entry get key `absent` and weight 0.
template <int N>
__device__ __forceinline__ void chunk_keys_and_weights(const PlanParams& p,
                                                       const ChunkLoads<N>& l, int absent,
                                                       int* key, float* wv, int& bad) {
#pragma unroll
  for (int j = 0; j < N; ++j) {
    key[j] = l.here[j] ? key_of_id(p, l.id[j], bad) : absent;
    wv[j] = weight_of_bits(p.w_kind, l.wbits[j]);
  }
}

__device__ __forceinline__ int round_up_pow2(int x, int m) { return (x + m - 1) & ~(m - 1); }

// The tiles and padding rows of a plan, written once its padded offsets are known: s_off[0..E]
// (shared memory, s_off[E] = n_rows) and pad_start(e), the first padding row of expert e. The
// calling warp takes experts first_expert, first_expert + expert_stride, ... (the caller numbers
// its warps so that the experts spread over the grid) and writes each one's tile_expert entries
// and padding rows with its lanes side by side (coalesced), with no search over the offsets.
// Then the grid, thread gtid of `stride`, writes the tiles past the last expert's (-1) and the
// tail rows [n_rows, R_max).
template <typename PadStart>
__device__ __forceinline__ void write_tiles_and_padding(const PlanParams& p, const int* s_off,
                                                        PadStart pad_start, int n_rows,
                                                        int tm_log2, int first_expert,
                                                        int expert_stride, int gtid,
                                                        int stride) {
  const int lane = threadIdx.x & 31;
#pragma unroll 1
  for (int e = first_expert; e < p.E; e += expert_stride) {
    const int lo = s_off[e], hi = s_off[e + 1], pad = pad_start(e);
#pragma unroll 1
    for (int t = (lo >> tm_log2) + lane; t < (hi >> tm_log2); t += 32) p.tile_expert[t] = e;
#pragma unroll 1
    for (int r = pad + lane; r < hi; r += 32) {
      p.sorted_token[r] = -1;
      p.sorted_weight[r] = 0.f;
    }
  }
#pragma unroll 1
  for (int t = (n_rows >> tm_log2) + gtid; t < p.n_tiles; t += stride) p.tile_expert[t] = -1;
#pragma unroll 1
  for (int r = n_rows + gtid; r < p.r_max; r += stride) {
    p.sorted_token[r] = -1;
    p.sorted_weight[r] = 0.f;
  }
}

}  // namespace argon::cuda
