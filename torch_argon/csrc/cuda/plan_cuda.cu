// moe_plan on CUDA: deterministic, no global atomics, no host sync, graph-capturable.
//
// Algorithm. The row of entry i (expert e) is
//     offsets[e] + (entries of e in earlier blocks) + (entries of e before i in i's block),
// where a block is a segment of threads * C consecutive entries (C = chunks of 32 per warp,
// <= 16). The last term comes from a stable block-wide LSD radix sort of the packed items
// (key << 16 | local index), key = e, or E for -1 / out-of-range ids and for slots past n:
// passes of up to 5 key bits (2 for E = 512), each one
//   - inside a warp: one ballot per digit bit gives each lane its peers in the chunk (rank =
//     popc(peers & lanes below)) and gives lane d the chunk's count of digit d, which it keeps
//     as a running count over the warp's chunks (a register, no per-expert tables);
//   - across warps: the 32 digits x warps counts are scanned digit-major in one block scan;
//   - the item moves to its place in the other of two shared buffers for the next pass.
// After the last pass, an item's place q in the block's sorted order minus the first place of
// its expert in that order (a block scan of the block's per-expert counts) is its rank.
// Integer sums are exact whatever their order, so shared-memory atomics (per-expert counts)
// are used freely; nothing depends on the order in which atomics land.
//
// Kernels. A plan is a chain of block-wide steps that each block runs once, and on an H200
// their time follows the code they execute more than the work they do (stage clocks: ~2-4K
// cycles per step whatever n or E; T = 1 fell from 11 to 6 us when the unrolled 8-16-chunk
// loops were rolled up, code 52 KB -> 14 KB). So loops stay rolled (per-chunk state in shared
// and local memory), the block scan exists once (noinline), and blocks are small.
//   n <= 4096: ONE kernel, plan_kernel<256, false>. G blocks of 256 threads (G = E / 16, at
//     most 32) each compute the whole plan (counts by shared atomics, the scans over experts,
//     the sort) and write a 1/G share of the placements and of the padding / tile-map / tail
//     fills.
//   Larger n: TWO kernels over segments of 512 * C entries, C chosen for about 32 segments:
//     plan_count_kernel<512>  per-segment expert counts -> block_hist[n_blocks][E] (workspace);
//     plan_kernel<512, true>  loads and sorts its segment, then (programmatic dependent launch
//                             on sm_90: it starts while the count kernel runs and waits only
//                             here) adds up the block_hist cells (totals, earlier segments),
//                             scans the padded totals over experts redundantly in every block,
//                             places its segment; fills grid-strided.
// The split point, segment size, block count and the dependent launch are tunable
// (argon_cuda::plan_tuning, for the benchmark and tests).
//
// Every output element is written on every call: valid rows by placement; padding rows
// [offsets[e] + counts[e], offsets[e+1]) and expert e's tiles by one warp; the tail
// [n_rows, R_max) and its tiles grid-strided; counts, offsets, meta by block 0. Out-of-range
// ids (>= E or < -1) are treated as -1 and counted in meta[ARGON_META_N_BAD_IDS].
//
// Status (H200, bench/results/h200.json): 5.9-7.4 us for T <= 16, 11-21 us for T = 128..4096,
// 35-39 us at T = 16384, against targets of 6 us (T <= 4096) and 15 us (T = 16384).
//
// Limits: E < 65536 (16-bit keys) and shared memory 20 * E + 12 * 512 * C bytes (E up to about
// 6700 on sm_90); rows fit int32 (checked on the host); n_blocks * E ints of workspace, whose
// cells every block reads (8 per thread per round), so the two-kernel path slows down past
// ~32 segments of 8192 entries (fine to millions of entries, tuned for n <= 262144).
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include <ATen/cuda/EmptyTensor.h>

#include "../checks.h"
#include "../op_signatures.h"
#include "block_scan.cuh"
#include "cuda_common.cuh"

namespace argon::cuda {
namespace {

constexpr int kDigitBits = 5;   // radix digit: 32 values, one per lane
constexpr int kIdxBits = 16;    // sort item = key << 16 | index in the block
constexpr unsigned kIdxMask = (1u << kIdxBits) - 1u;
constexpr int kMaxChunks = 16;  // chunks of 32 entries per warp

// The two shapes (threads per block): small blocks keep each block-wide step (barrier, scan)
// short, which is what the plan's latency is made of (H200 stage clocks: ~1.5K cycles per
// step with 1024 threads).
constexpr int kSingleThreads = 256;  // one-kernel path: up to 256 * 16 = 4096 entries
constexpr int kMultiThreads = 512;   // two-kernel path: segments of up to 8192 entries
constexpr int kTargetSegments = 32;  // two-kernel path: about this many blocks (column reads)
static_assert(kMultiThreads * kMaxChunks <= (1 << kIdxBits), "block index must fit its bits");

// Tuning knobs, process-wide; set only by the benchmark and tests through plan_tuning.
int g_single_max_entries = kSingleThreads * kMaxChunks;  // one-kernel path up to this n
int g_chunks = 0;         // two-kernel path: chunks per warp (0 = automatic)
int g_single_blocks = 0;  // one-kernel path: blocks sharing the writes (0 = automatic)
int g_pdl = 1;            // two-kernel path: programmatic dependent launch (sm_90+)

struct PlanParams {
  const void* ids;
  const void* weights;
  FloatKind w_kind;
  int ids_64;  // ids are int64 (else int32)
  int n, K, E, tm, r_max, n_tiles;
  int chunks;              // C: entries per block = threads * C
  int passes, digit_bits;  // radix passes over the key bits, bits per pass (<= kDigitBits)
  int* counts;
  int* offsets;
  int* sorted_token;
  float* sorted_weight;
  int* pos;
  int* tile_expert;
  int* meta;
  int* block_hist;  // [n_blocks, E] per-block counts (two-kernel path)
  int* block_bad;   // [n_blocks]
};

// The sort key of entry i: its expert, or E for -1 and for out-of-range ids (counted in bad).
__device__ __forceinline__ int key_of(const PlanParams& p, int64_t i, int& bad) {
  const int64_t v = p.ids_64 ? static_cast<const int64_t*>(p.ids)[i]
                             : static_cast<int64_t>(static_cast<const int32_t*>(p.ids)[i]);
  if (v >= 0 && v < p.E) return static_cast<int>(v);
  bad += (v != -1);
  return p.E;
}

__device__ __forceinline__ int round_up_pow2(int x, int m) { return (x + m - 1) & ~(m - 1); }

// Programmatic dependent launch (sm_90+): the count kernel lets the place kernel start at
// once; the place kernel loads and sorts its segment, then waits for the counts.
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

// The weight of entry i as float (exact for all three types: bf16 is the top half of a float).
__device__ __forceinline__ float weight_of(const PlanParams& p, int64_t i) {
  if (p.w_kind == FloatKind::kF32) return static_cast<const float*>(p.weights)[i];
  const unsigned short bits = static_cast<const unsigned short*>(p.weights)[i];
  if (p.w_kind == FloatKind::kBF16) return __uint_as_float(static_cast<unsigned>(bits) << 16);
  return __half2float(__ushort_as_half(bits));
}

// ---- two-kernel path, first kernel: per-block expert counts ---------------------------------
template <int kThreads>
__global__ void __launch_bounds__(kThreads) plan_count_kernel(PlanParams p) {
  extern __shared__ int s_hist[];  // [E]
  __shared__ int s_bad;
  let_dependents_start();
  const int tid = threadIdx.x;
#pragma unroll 1
  for (int e = tid; e < p.E; e += kThreads) s_hist[e] = 0;
  if (tid == 0) s_bad = 0;
  __syncthreads();
  const int64_t begin = int64_t{blockIdx.x} * kThreads * p.chunks;
  const int n_local = static_cast<int>(min(int64_t{kThreads} * p.chunks, int64_t{p.n} - begin));
  int bad = 0;
#pragma unroll 1
  for (int i0 = tid; i0 < n_local; i0 += 4 * kThreads) {
    int key[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {  // four loads in flight
      const int idx = i0 + j * kThreads;
      key[j] = idx < n_local ? key_of(p, begin + idx, bad) : p.E;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (key[j] < p.E) atomicAdd(&s_hist[key[j]], 1);
    }
  }
  bad = warp_sum(bad);
  if ((tid & 31) == 0 && bad) atomicAdd(&s_bad, bad);
  __syncthreads();
  int* row = p.block_hist + int64_t{blockIdx.x} * p.E;
#pragma unroll 1
  for (int e = tid; e < p.E; e += kThreads) row[e] = s_hist[e];
  if (tid == 0) p.block_bad[blockIdx.x] = s_bad;
}

// ---- the plan proper (kMulti: one segment of the two-kernel path; else the whole plan) -----
// Loops are kept rolled (per-chunk state in shared / local memory): each block runs most of
// this code once, so fewer instructions to fetch is what makes it fast.
template <int kThreads, bool kMulti>
__global__ void __launch_bounds__(kThreads) plan_kernel(PlanParams p) {
  constexpr int kWarps = kThreads / 32;
  extern __shared__ __align__(16) unsigned char smem[];
  const int E = p.E, C = p.chunks, B = kThreads * p.chunks;
  int* s_cnt = reinterpret_cast<int*>(smem);  // [E]   entries of e in this block
  int* s_tot = kMulti ? s_cnt + E : s_cnt;    // [E]   ... in the plan
  int* s_before = s_cnt + 2 * E;              // [E]   ... in earlier blocks
  int* s_off = s_before + E;                  // [E+1] padded offsets
  int* s_rowbase = s_off + E + 1;             // [E]   row of place 0 of expert e
  unsigned* s_a = reinterpret_cast<unsigned*>(s_rowbase + E);  // [B] sort buffers (ping-pong)
  unsigned* s_b = s_a + B;                                     // [B]
  float* s_w = reinterpret_cast<float*>(s_b + B);              // [B] weights by local index
  __shared__ int s_digit[32 * kWarps];  // per (digit, warp) counts, digit-major
  __shared__ int s_warp[32];
  __shared__ int s_sum[2];  // valid entries, bad ids

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const unsigned lanes_below = (1u << lane) - 1u;
  const int64_t begin = kMulti ? int64_t{blockIdx.x} * B : 0;
  const int n_local = static_cast<int>(min(int64_t{B}, int64_t{p.n} - begin));
  const int slot0 = warp * C * 32 + lane;  // chunk c of this warp: slot0 + 32 * c

#pragma unroll 1
  for (int e = tid; e < E; e += kThreads) {
    s_cnt[e] = 0;
    if (kMulti) {
      s_tot[e] = 0;
      s_before[e] = 0;
    }
  }
  if (tid < 2) s_sum[tid] = 0;
  __syncthreads();

  // 1. Items (key << 16 | local index; slot = local index) and weights into shared memory,
  //    entries per expert of this block by shared atomics. Four chunks' loads in flight.
  int bad = 0;
#pragma unroll 1
  for (int c0 = 0; c0 < C; c0 += 4) {
    int key[4];
    float wv[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int idx = slot0 + 32 * (c0 + j);
      const bool here = c0 + j < C && idx < n_local;
      key[j] = here ? key_of(p, begin + idx, bad) : E;
      wv[j] = here ? weight_of(p, begin + idx) : 0.f;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int idx = slot0 + 32 * (c0 + j);
      if (c0 + j < C) {
        s_a[idx] = (static_cast<unsigned>(key[j]) << kIdxBits) | static_cast<unsigned>(idx);
        s_w[idx] = wv[j];
        if (key[j] < E) atomicAdd(&s_cnt[key[j]], 1);
      }
    }
  }
  if (!kMulti) {  // (the count kernel counted the two-kernel path's bad ids)
    bad = warp_sum(bad);
    if (lane == 0 && bad) atomicAdd(&s_sum[1], bad);
  }

  // 2. Stable radix sort of the block's items. Each pass reads src by slot and scatters to
  //    dst; the last pass leaves q (the item's place in the sorted order) in dst by slot.
  unsigned* src = s_a;
  unsigned* dst = s_b;
  int rank[kMaxChunks];  // per chunk (local memory: indexed in a rolled loop)
  const int n_digits = 1 << p.digit_bits;
#pragma unroll 1
  for (int pass = 0; pass < p.passes; ++pass) {
    __syncthreads();  // src is complete
    const int shift = kIdxBits + pass * p.digit_bits;
    int running = 0;  // lane d: entries of digit d in this warp's chunks so far
#pragma unroll 1
    for (int c = 0; c < C; ++c) {
      const unsigned d = (src[slot0 + 32 * c] >> shift) & (n_digits - 1);
      unsigned peers = ~0u, lane_digit = ~0u;
#pragma unroll 1
      for (int b = 0; b < p.digit_bits; ++b) {
        const unsigned bits = __ballot_sync(0xffffffffu, (d >> b) & 1u);
        peers &= ((d >> b) & 1u) ? bits : ~bits;
        lane_digit &= ((lane >> b) & 1) ? bits : ~bits;
      }
      rank[c] = __shfl_sync(0xffffffffu, running, d) + __popc(peers & lanes_below);
      running += __popc(lane_digit);
    }
    if (lane < n_digits) s_digit[lane * kWarps + warp] = running;
    block_exclusive_scan(s_digit, n_digits * kWarps, s_warp);  // barriers before and after
    const bool last = pass + 1 == p.passes;
#pragma unroll 1
    for (int c = 0; c < C; ++c) {
      const unsigned item = src[slot0 + 32 * c];
      const int q = rank[c] + s_digit[((item >> shift) & (n_digits - 1)) * kWarps + warp];
      if (last) {
        dst[slot0 + 32 * c] = static_cast<unsigned>(q);
      } else {
        dst[q] = item;
      }
    }
    if (!last) {
      unsigned* t = src;
      src = dst;
      dst = t;
    }
  }

  // 3. Two-kernel path: the plan's totals and the entries in earlier blocks, from the count
  //    kernel's table (eight cells per thread in flight, added up in shared memory).
  if constexpr (kMulti) {
    wait_for_prerequisites();
    const int n_blocks = gridDim.x, mine = blockIdx.x, cells = n_blocks * E;
#pragma unroll 1
    for (int x0 = tid; x0 < cells; x0 += 8 * kThreads) {
      int v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int x = x0 + j * kThreads;
        v[j] = x < cells ? p.block_hist[x] : 0;
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (v[j] != 0) {
          const int x = x0 + j * kThreads, b = x / E, e = x - b * E;
          atomicAdd(&s_tot[e], v[j]);
          if (b < mine) atomicAdd(&s_before[e], v[j]);
        }
      }
    }
    if (mine == 0) {
      bad = 0;  // step 1 counted this block's bad ids too; the count kernel's count them all
#pragma unroll 1
      for (int b = tid; b < n_blocks; b += kThreads) bad += p.block_bad[b];
      bad = warp_sum(bad);
      if (lane == 0 && bad) atomicAdd(&s_sum[1], bad);
    }
  }
  __syncthreads();

  // 4. Padded offsets (scan of the padded totals) and the first place of each expert in the
  //    block's sorted order (scan of the block's counts), through one scan call site.
  int valid = 0;
#pragma unroll 1
  for (int e = tid; e < E; e += kThreads) {
    const int tot = s_tot[e];
    s_off[e] = round_up_pow2(tot, p.tm);
    s_rowbase[e] = s_cnt[e];
    valid += tot;
  }
  valid = warp_sum(valid);
  if (lane == 0 && valid) atomicAdd(&s_sum[0], valid);
  int n_rows = 0;
#pragma unroll 1
  for (int k = 0; k < 2; ++k) {
    const int total = block_exclusive_scan(k == 0 ? s_off : s_rowbase, E, s_warp);
    if (k == 0) n_rows = total;
  }
#pragma unroll 1
  for (int e = tid; e < E; e += kThreads) {
    const int off = s_off[e];
    s_rowbase[e] = off + (kMulti ? s_before[e] : 0) - s_rowbase[e];
    if (blockIdx.x == 0) {
      p.counts[e] = s_tot[e];
      p.offsets[e] = off;
    }
  }
  if (tid == 0) s_off[E] = n_rows;
  __syncthreads();

  // 5. Placement (one-kernel path: each block places the chunks with (warp * C + c) % G ==
  //    its index). src holds the items and dst their places, by slot.
#pragma unroll 1
  for (int c = 0; c < C; ++c) {
    if (!kMulti && (warp * C + c) % static_cast<int>(gridDim.x) != static_cast<int>(blockIdx.x)) {
      continue;
    }
    const unsigned item = src[slot0 + 32 * c];
    const int idx = static_cast<int>(item & kIdxMask);
    if (idx >= n_local) continue;
    const int key = static_cast<int>(item >> kIdxBits);
    const int64_t i = begin + idx;
    int row = -1;
    if (key < E) {
      row = s_rowbase[key] + static_cast<int>(dst[slot0 + 32 * c]);
      p.sorted_token[row] = static_cast<int>(static_cast<uint32_t>(i) / static_cast<uint32_t>(p.K));
      p.sorted_weight[row] = s_w[idx];
    }
    p.pos[i] = row;
  }

  // 6. Padding rows and tiles of each expert (one warp per expert over the grid), the tail.
  const int tm_log2 = __ffs(p.tm) - 1;
#pragma unroll 1
  for (int e = blockIdx.x * kWarps + warp; e < E; e += gridDim.x * kWarps) {
    const int lo = s_off[e], hi = s_off[e + 1];
#pragma unroll 1
    for (int r = lo + s_tot[e] + lane; r < hi; r += 32) {
      p.sorted_token[r] = -1;
      p.sorted_weight[r] = 0.f;
    }
#pragma unroll 1
    for (int j = (lo >> tm_log2) + lane; j < (hi >> tm_log2); j += 32) p.tile_expert[j] = e;
  }
  const int gtid = blockIdx.x * kThreads + tid, stride = gridDim.x * kThreads;
#pragma unroll 1
  for (int r = n_rows + gtid; r < p.r_max; r += stride) {
    p.sorted_token[r] = -1;
    p.sorted_weight[r] = 0.f;
  }
#pragma unroll 1
  for (int j = (n_rows >> tm_log2) + gtid; j < p.n_tiles; j += stride) p.tile_expert[j] = -1;
  if (blockIdx.x == 0 && tid == 0) {
    p.offsets[E] = n_rows;
    p.meta[ARGON_META_N_ROWS] = n_rows;
    p.meta[ARGON_META_N_TILES] = n_rows >> tm_log2;
    p.meta[ARGON_META_N_VALID] = s_sum[0];
    p.meta[ARGON_META_N_BAD_IDS] = s_sum[1];
  }
}

// Dynamic shared memory of plan_kernel: per-expert arrays, then two sort buffers and weights.
size_t plan_smem_bytes(int E, int entries_per_block) {
  return size_t(5 * E + 1) * sizeof(int) +
         size_t(entries_per_block) * (2 * sizeof(unsigned) + sizeof(float));
}

// Dynamic shared memory above the default 48 KiB (static included) needs an opt-in per kernel
// and device; granted sizes are remembered so the call is made once, not on every launch.
template <auto kKernel>
void allow_smem(size_t bytes) {
  constexpr size_t kStaticMargin = 8 * 1024;  // the kernels' static shared memory is below this
  static int granted[64] = {};
  if (bytes + kStaticMargin <= 48 * 1024) return;
  int dev = 0;
  C10_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 64 && granted[dev] >= static_cast<int>(bytes)) return;
  C10_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(bytes)));
  if (dev < 64) granted[dev] = static_cast<int>(bytes);
}

// Launch the plan into outputs of the checked shapes (the workspace, if the two-kernel path
// needs one, is allocated here).
void launch_plan(const PlanDims& d, const Tensor& ids, const Tensor& w, const Tensor& counts,
                 const Tensor& offsets, const Tensor& sorted_token, const Tensor& sorted_weight,
                 const Tensor& pos, const Tensor& tile_expert, const Tensor& meta) {
  const int E = static_cast<int>(d.E);
  const auto* props = at::cuda::getCurrentDeviceProperties();
  const size_t max_block = size_t(kMultiThreads) * kMaxChunks;
  const int64_t e_limit = std::min<int64_t>(
      (1 << 16) - 1,
      (int64_t(props->sharedMemPerBlockOptin) - int64_t(plan_smem_bytes(0, max_block))) /
          int64_t(plan_smem_bytes(1, 0) - plan_smem_bytes(0, 0)));
  TORCH_CHECK(E <= e_limit, "moe_plan on CUDA supports n_expert up to ", e_limit,
              " on this device, got ", E);
  PlanParams p{};
  p.ids = ids.const_data_ptr();
  p.ids_64 = ids.scalar_type() == at::kLong;
  p.weights = w.const_data_ptr();
  p.w_kind = float_kind(w.scalar_type());
  p.n = static_cast<int>(d.entries());
  p.K = static_cast<int>(d.K);
  p.E = E;
  p.tm = static_cast<int>(d.tile_m);
  p.r_max = static_cast<int>(d.r_max);
  p.n_tiles = static_cast<int>(d.n_tiles);
  const int key_bits = 32 - __builtin_clz(static_cast<unsigned>(E));  // keys lie in [0, E]
  p.passes = (key_bits + kDigitBits - 1) / kDigitBits;
  p.digit_bits = (key_bits + p.passes - 1) / p.passes;
  p.counts = counts.data_ptr<int>();
  p.offsets = offsets.data_ptr<int>();
  p.sorted_token = sorted_token.data_ptr<int>();
  p.sorted_weight = sorted_weight.data_ptr<float>();
  p.pos = pos.data_ptr<int>();
  p.tile_expert = tile_expert.data_ptr<int>();
  p.meta = meta.data_ptr<int>();
  const cudaStream_t s = stream();

  if (p.n <= std::min(g_single_max_entries, kSingleThreads * kMaxChunks)) {
    // One kernel; every block computes the whole plan, so more blocks only split the writes
    // (about 16 experts' padding and tiles per warp of 8 warps: ~E / 128 blocks).
    constexpr auto kernel = plan_kernel<kSingleThreads, false>;
    p.chunks = std::max<int>(1, static_cast<int>(ceil_div(p.n, kSingleThreads)));
    const int blocks = g_single_blocks > 0
                           ? g_single_blocks
                           : static_cast<int>(std::clamp<int64_t>(ceil_div(E, 16), 1, 32));
    const size_t smem = plan_smem_bytes(E, kSingleThreads * p.chunks);
    allow_smem<kernel>(smem);
    kernel<<<blocks, kSingleThreads, smem, s>>>(p);
    ARGON_CUDA_CHECK_LAUNCH();
    return;
  }
  // Two kernels over segments of kMultiThreads * C entries, about kTargetSegments of them.
  const int auto_chunks =
      static_cast<int>(ceil_div(p.n, int64_t{kMultiThreads} * kTargetSegments));
  p.chunks = std::clamp(g_chunks > 0 ? g_chunks : auto_chunks, 1, kMaxChunks);
  const int n_blocks = static_cast<int>(ceil_div(p.n, int64_t{kMultiThreads} * p.chunks));
  const Tensor workspace = at::detail::empty_cuda({int64_t{n_blocks} * (E + 1)}, at::kInt,
                                                  ids.device(), std::nullopt);
  p.block_hist = workspace.data_ptr<int>();
  p.block_bad = p.block_hist + int64_t{n_blocks} * E;
  constexpr auto count = plan_count_kernel<kMultiThreads>;
  const size_t count_smem = size_t(E) * sizeof(int);
  allow_smem<count>(count_smem);
  count<<<n_blocks, kMultiThreads, count_smem, s>>>(p);
  ARGON_CUDA_CHECK_LAUNCH();
  constexpr auto place = plan_kernel<kMultiThreads, true>;
  const size_t smem = plan_smem_bytes(E, kMultiThreads * p.chunks);
  allow_smem<place>(smem);
  if (g_pdl && props->major >= 9) {
    // May start while the count kernel runs: it waits (griddepcontrol.wait) before reading
    // the counts. Captured into CUDA graphs as a programmatic edge.
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(n_blocks);
    cfg.blockDim = dim3(kMultiThreads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, place, p));
  } else {
    place<<<n_blocks, kMultiThreads, smem, s>>>(p);
  }
  ARGON_CUDA_CHECK_LAUNCH();
}

void moe_plan_out_cuda(const Tensor& topk_ids, const Tensor& topk_weights, int64_t n_expert,
                       int64_t tile_m, const Tensor& counts, const Tensor& offsets,
                       const Tensor& sorted_token, const Tensor& sorted_weight, const Tensor& pos,
                       const Tensor& tile_expert, const Tensor& meta) {
  const PlanDims d = check_plan_inputs(topk_ids, topk_weights, n_expert, tile_m);
  check_plan_outputs(d, topk_ids, counts, offsets, sorted_token, sorted_weight, pos, tile_expert,
                     meta);
  const c10::cuda::CUDAGuard guard(topk_ids.device());
  launch_plan(d, topk_ids.contiguous(), topk_weights.contiguous(), counts, offsets, sorted_token,
              sorted_weight, pos, tile_expert, meta);
}

// The functional form, registered for CUDA to cut eager overhead: its seven outputs come
// straight from the CUDA allocator (at::detail::empty_cuda, no dispatcher round trip each; one
// shared allocation would make the outputs alias, which the schema does not declare) and the
// kernels are launched directly. Sized by make_plan_outputs, as the composite form in
// functional.cpp.
PlanOutputs moe_plan_cuda(
    const Tensor& topk_ids, const Tensor& topk_weights, int64_t n_expert, int64_t tile_m) {
  const PlanDims d = check_plan_inputs(topk_ids, topk_weights, n_expert, tile_m);
  const auto dev = topk_ids.device();
  const c10::cuda::CUDAGuard guard(dev);
  PlanOutputs out = make_plan_outputs(
      d, [&](std::initializer_list<int64_t> size, at::ScalarType dtype) {
        return Tensor(at::detail::empty_cuda(size, dtype, dev, std::nullopt));
      });
  const auto& [counts, offsets, sorted_token, sorted_weight, pos, tile_expert, meta] = out;
  launch_plan(d, topk_ids.contiguous(), topk_weights.contiguous(), counts, offsets, sorted_token,
              sorted_weight, pos, tile_expert, meta);
  return out;
}

// Benchmark and test hook: the entries up to which the one-kernel path runs, the chunks per
// warp of the two-kernel path (0: automatic), the blocks of the one-kernel path (0: automatic),
// programmatic dependent launch of the two-kernel path (0 / 1); negative values leave a knob
// as is. Returns the previous values.
std::vector<int64_t> plan_tuning(int64_t single_max_entries, int64_t chunks, int64_t single_blocks,
                                 int64_t pdl) {
  std::vector<int64_t> previous{g_single_max_entries, g_chunks, g_single_blocks, g_pdl};
  if (single_max_entries >= 0) g_single_max_entries = static_cast<int>(std::min<int64_t>(single_max_entries, 1 << 30));
  if (chunks >= 0) g_chunks = static_cast<int>(std::min<int64_t>(chunks, kMaxChunks));
  if (single_blocks >= 0) g_single_blocks = static_cast<int>(std::min<int64_t>(single_blocks, 1024));
  if (pdl >= 0) g_pdl = pdl != 0;
  return previous;
}

}  // namespace

TORCH_LIBRARY_IMPL(argon, CUDA, m) {
  m.impl("moe_plan_out", TORCH_FN(moe_plan_out_cuda));
  m.impl("moe_plan", TORCH_FN(moe_plan_cuda));
}

// Internal knobs of the CUDA backend, for the benchmark and tests (not part of the public API).
TORCH_LIBRARY(argon_cuda, m) {
  m.def("plan_tuning(int single_max_entries, int chunks, int single_blocks=-1, int pdl=-1) -> int[]",
        TORCH_FN(plan_tuning));
}

}  // namespace argon::cuda
