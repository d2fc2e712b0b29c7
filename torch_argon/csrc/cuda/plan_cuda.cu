// moe_plan on CUDA: deterministic, no global atomics, no host sync.
//
// Algorithm. The n = T*K entries are cut into segments: each block of 1024 threads (32 warps)
// owns `cpl * 1024` consecutive entries, each warp `cpl * 32` of those, each lane one entry of
// every 32 ("chunk" c of warp w holds entries w_begin + 32c + lane). The stable row of an entry
// is offsets[e] + (entries of e in earlier blocks) + (in earlier warps of its block)
// + (in earlier chunks of its warp) + (in earlier lanes of its chunk). Each term is computed
// without atomics whose order could vary:
//   - lanes: one ballot per bit of (e + 1) groups the lanes of a chunk by expert (cheaper than
//     __match_any_sync under contention); rank = popc(peers & lanes below);
//   - chunks: per-warp uint16 counters in shared memory [E][32 warps (+pad)], updated by one
//     leader lane per expert group, chunk after chunk (only its own warp touches its column);
//   - warps: an exclusive scan of that table over warps, one warp per expert (shuffles);
//   - blocks: per-block histograms [n_blocks][E] in global memory, scanned over blocks.
//
// Kernels (launch shape: blocks of 1024 threads).
//   Small n (n <= single_max, default 2048 entries = T 204 at K 10): ONE kernel, one block,
//   which counts, scans over warps and experts, places, and writes padding, tail and tile map.
//   Larger n: three kernels, the seed's hist / scan / place structure:
//     plan_hist   [n_blocks]  per-block expert counts (shared atomics: integer sums are
//                             order-independent) and out-of-range id counts;
//     plan_scan   [1]         per expert, an exclusive scan over blocks (each block's first row
//                             relative to the expert's start), counts, padded offsets (block
//                             scan over experts), meta;
//     plan_place  [n_blocks]  per-warp counts and ranks as above, placement, then the tile map
//                             (binary search of each tile in the offsets), padding rows (one
//                             thread per expert) and the tail, grid-strided.
//   Under CUDA graph replay a launch costs ~0.9 us, so the small path saves ~2 us of overhead;
//   the split point is where one block's serial work outgrows two launches (tunable, see
//   argon_cuda::plan_tuning, for benchmarking).
//
// Every output element is written on every call: valid rows by placement, padding rows
// [offsets[e] + counts[e], offsets[e+1]) and the tile map by expert, the tail [n_rows, R_max)
// and its tiles grid-strided. Out-of-range ids (>= E or < -1) are treated as -1 and counted in
// meta[ARGON_META_N_BAD_IDS].
//
// Status (H200, bench/results/h200.json): 12.6-40 us per plan under graph replay, against
// targets of 6 us (T <= 4096) and 15 us (T = 16384). ncu on the one-block kernel at T = 128:
// ~42K active cycles on its one SM at ~2 instructions per cycle, so the kernels are bound by
// the instructions of the few blocks that do the per-expert work (warp scan, fills), not by
// memory. Ablations (bench section plan_ablation) attribute the time; see the report of issue 4.
//
// Limits: shared memory per block is ~80 * E bytes (E <= ~2900 on sm_90); entries per block
// stay <= 16384, so the uint16 counters cannot overflow; rows fit int32 (checked on the host).
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include <ATen/cuda/EmptyTensor.h>

#include "../checks.h"
#include "../op_signatures.h"
#include "block_scan.cuh"
#include "../float_dispatch.h"
#include "cuda_common.cuh"

namespace argon::cuda {
namespace {

constexpr int kWarps = 32;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxChunks = 16;  // chunks of 32 entries per warp held in registers
constexpr int kRankStride = 34;  // uint16 per expert row of the per-warp counts (32 + pad)
constexpr int kRankBits = 10;   // a rank inside one warp's entries is < 32 * kMaxChunks = 512
static_assert(32 * kMaxChunks <= (1 << kRankBits), "ranks must fit in kRankBits");

// Tuning knobs (entries up to which the one-kernel path runs; chunks per warp on the
// three-kernel path). Process-wide; set only by the benchmark through argon_cuda::plan_tuning.
// Measured on an H200 (bench/results/h200.json, op "plan_variant"): the one-block path's
// serial chunk loop loses to three launches above ~2 chunks per warp, and the three-kernel
// path is fastest with the fewest chunks per warp that keep all blocks in one wave (a block
// of 1024 threads at 64 registers fills an SM). multi_chunks 0 = that automatic choice.
int g_single_max_entries = 2 * kThreads;
int g_skip_mask = 0;  // benchmark-only: leave stages out to time the others (wrong results)

enum : int {
  kSkipRanks = 1, kSkipWarpScan = 2, kSkipPlace = 4, kSkipFillExperts = 8, kSkipFillTail = 16,
  kSkipHistLaunch = 32, kSkipScanLaunch = 64, kSkipPlaceLaunch = 128,
};
int g_multi_chunks = 0;

struct PlanParams {
  const void* ids;
  const void* weights;
  int n, K, E, tm, cpl, r_max, n_tiles;
  int id_bits;  // bits of E (ids + 1 lie in [0, E])
  int skip;     // benchmark-only ablation mask (kSkip*); 0 in normal use
  int* counts;
  int* offsets;
  int* sorted_token;
  float* sorted_weight;
  int* pos;
  int* tile_expert;
  int* meta;
  int* block_hist;  // [n_blocks, E] per-block counts (three-kernel path)
  int* block_base;  // [n_blocks, E] their exclusive scan over blocks
  int* block_bad;   // [n_blocks]
};

// The expert of entry i, or -1; `bad` counts ids that are neither -1 nor in [0, E).
template <typename id_t>
__device__ __forceinline__ int expert_of(const id_t* ids, int64_t i, int E, int& bad) {
  const int64_t v = static_cast<int64_t>(ids[i]);
  if (v >= 0 && v < E) return static_cast<int>(v);
  bad += (v != -1);
  return -1;
}

__device__ __forceinline__ int round_up_pow2(int x, int m) { return (x + m - 1) & ~(m - 1); }

// The lanes of this warp holding the same expert as this lane (-1 counts as an expert too).
// One ballot per bit of (e + 1) (10 for E = 512): full-rate instructions, where
// __match_any_sync measured slow with 32 warps per SM using it (first H200 run).
__device__ __forceinline__ unsigned same_expert_lanes(int e, int n_bits) {
  const unsigned v = static_cast<unsigned>(e + 1);
  unsigned peers = 0xffffffffu;
  for (int b = 0; b < n_bits; ++b) {
    const bool bit = (v >> b) & 1u;
    const unsigned set = __ballot_sync(0xffffffffu, bit);
    peers &= bit ? set : ~set;
  }
  return peers;
}

// ---- three-kernel path: per-block histograms ----------------------------------------------
template <typename id_t>
__global__ void __launch_bounds__(kThreads) plan_hist_kernel(PlanParams p) {
  extern __shared__ int s_hist[];  // [E]
  __shared__ int s_bad;
  const int tid = threadIdx.x;
  for (int e = tid; e < p.E; e += kThreads) s_hist[e] = 0;
  if (tid == 0) s_bad = 0;
  __syncthreads();
  const id_t* ids = static_cast<const id_t*>(p.ids);
  const int64_t begin = int64_t{blockIdx.x} * kThreads * p.cpl;
  const int64_t end = min(int64_t{p.n}, begin + int64_t{kThreads} * p.cpl);
  int bad = 0;
#pragma unroll 4
  for (int64_t i = begin + tid; i < end; i += kThreads) {
    const int e = expert_of(ids, i, p.E, bad);
    if (e >= 0) atomicAdd(&s_hist[e], 1);
  }
  bad = warp_sum(bad);
  if ((tid & 31) == 0 && bad) atomicAdd(&s_bad, bad);
  __syncthreads();
  int* row = p.block_hist + int64_t{blockIdx.x} * p.E;
  for (int e = tid; e < p.E; e += kThreads) row[e] = s_hist[e];
  if (tid == 0) p.block_bad[blockIdx.x] = s_bad;
}

// ---- three-kernel path: scan over blocks and experts ----------------------------------------
__global__ void __launch_bounds__(kThreads) plan_scan_kernel(PlanParams p, int n_blocks) {
  extern __shared__ int s_rows[];  // [E]: padded rows per expert, then their exclusive scan
  __shared__ int s_warp[32];
  __shared__ int s_sum[2];  // valid entries, bad ids
  const int tid = threadIdx.x, E = p.E;
  if (tid == 0) s_sum[0] = s_sum[1] = 0;
  __syncthreads();
  int valid = 0;
  for (int e = tid; e < E; e += kThreads) {
    // Column e of the block table, in batches of 8 loads, and its exclusive prefix: block b's
    // first row of expert e, relative to offsets[e]. Input and output are different arrays, so
    // the compiler may issue the next batch's loads before this batch's stores.
    const int* __restrict__ col = p.block_hist + e;
    int* __restrict__ base = p.block_base + e;
    int run = 0;
#pragma unroll 2
    for (int b0 = 0; b0 < n_blocks; b0 += 8) {
      int c[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) c[j] = b0 + j < n_blocks ? __ldcg(col + int64_t(b0 + j) * E) : 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (b0 + j < n_blocks) base[int64_t(b0 + j) * E] = run;
        run += c[j];
      }
    }
    p.counts[e] = run;
    valid += run;
    s_rows[e] = round_up_pow2(run, p.tm);
  }
  int bad = 0;
  for (int b = tid; b < n_blocks; b += kThreads) bad += p.block_bad[b];
  valid = warp_sum(valid);
  bad = warp_sum(bad);
  if ((tid & 31) == 0) {
    if (valid) atomicAdd(&s_sum[0], valid);
    if (bad) atomicAdd(&s_sum[1], bad);
  }
  const int n_rows = block_exclusive_scan(s_rows, E, s_warp);
  for (int e = tid; e < E; e += kThreads) p.offsets[e] = s_rows[e];
  if (tid == 0) {
    p.offsets[E] = n_rows;
    p.meta[ARGON_META_N_ROWS] = n_rows;
    p.meta[ARGON_META_N_TILES] = n_rows / p.tm;
    p.meta[ARGON_META_N_VALID] = s_sum[0];
    p.meta[ARGON_META_N_BAD_IDS] = s_sum[1];
  }
}

// Tile map and padding rows from the padded offsets s_off[0..E] (shared memory), spread over
// every thread of the launch: tile j's expert is the last e with s_off[e] <= j * tile_m
// (binary search; experts without rows have s_off[e] == s_off[e + 1] and are skipped by it);
// expert e's padding rows [s_off[e] + count, s_off[e + 1]) (< tile_m of them) go to one thread.
// (A first version gave each warp 32 experts in turn; leaving it out saved ~13 us of the plan
// on an H200. This version's share has not been measured separately yet.)
__device__ __forceinline__ void fill_tiles_and_padding(const PlanParams& p, const int* s_off,
                                                       const int* s_cnt) {
  const int gtid = blockIdx.x * kThreads + threadIdx.x, stride = gridDim.x * kThreads;
  const int n_rows = s_off[p.E];
  for (int j = gtid; j < n_rows / p.tm; j += stride) {
    const int row = j * p.tm;
    int lo = 0, hi = p.E - 1;  // invariant: s_off[lo] <= row < n_rows, answer in [lo, hi]
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (s_off[mid] <= row) lo = mid; else hi = mid - 1;
    }
    p.tile_expert[j] = lo;
  }
  for (int e = gtid; e < p.E; e += stride) {
    for (int r = s_off[e] + s_cnt[e]; r < s_off[e + 1]; ++r) {
      p.sorted_token[r] = -1;
      p.sorted_weight[r] = 0.f;
    }
  }
}

// Rows [n_rows, R_max) and their tiles, grid-strided over every thread of the launch.
__device__ __forceinline__ void fill_tail(const PlanParams& p, int n_rows) {
  const int gtid = blockIdx.x * kThreads + threadIdx.x, stride = gridDim.x * kThreads;
  for (int r = n_rows + gtid; r < p.r_max; r += stride) {
    p.sorted_token[r] = -1;
    p.sorted_weight[r] = 0.f;
  }
  for (int j = n_rows / p.tm + gtid; j < p.n_tiles; j += stride) p.tile_expert[j] = -1;
}

// ---- placement (both paths; kSingle: the whole plan in one block) ---------------------------
template <typename id_t, typename w_t, bool kSingle>
__global__ void __launch_bounds__(kThreads) plan_place_kernel(PlanParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int E = p.E;
  int* s_base = reinterpret_cast<int*>(smem);  // [E]   first row of this block's entries of e
  int* s_off = s_base + E;                      // [E+1] padded offsets, s_off[E] = n_rows
  int* s_cnt = s_off + E + 1;                   // [E]   entries of e
  // [E][kRankStride] per-warp counts, expert-major so one warp scans an expert's 32 counts;
  // the odd word stride spreads a warp's accesses to different experts over the banks.
  uint16_t* s_rank = reinterpret_cast<uint16_t*>(s_cnt + E);
  __shared__ int s_warp[32];
  __shared__ int s_sum[2];  // valid entries, bad ids (one-kernel path)

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const unsigned lanes_before = (1u << lane) - 1u;
  if (kSingle && tid == 0) s_sum[0] = s_sum[1] = 0;
  if constexpr (!kSingle) {
    // The scan kernel's results, fetched first so their latency overlaps steps 1-2.
    for (int e = tid; e <= E; e += kThreads) {
      s_off[e] = p.offsets[e];
      if (e < E) {
        s_cnt[e] = p.counts[e];
        s_base[e] = s_off[e] + p.block_base[int64_t{blockIdx.x} * E + e];
      }
    }
  }

  // 1. This lane's entries: one per chunk. ent[c] holds the expert (or -1) until step 2
  //    packs it with the entry's rank in its warp: ((e + 1) << kRankBits) | rank.
  const id_t* ids = static_cast<const id_t*>(p.ids);
  const int64_t warp_begin =
      int64_t{blockIdx.x} * kThreads * p.cpl + int64_t{warp} * 32 * p.cpl + lane;
  int ent[kMaxChunks];
  int bad = 0;
#pragma unroll
  for (int c = 0; c < kMaxChunks; ++c) {
    ent[c] = -1;
    const int64_t i = warp_begin + 32 * c;
    if (c < p.cpl && i < p.n) ent[c] = expert_of(ids, i, E, bad);
  }

  // 2. Rank of each entry among its warp's entries of the same expert, chunk by chunk.
  for (int e = lane; e < E; e += 32) s_rank[e * kRankStride + warp] = 0;
  __syncwarp();
#pragma unroll
  for (int c = 0; c < kMaxChunks; ++c) {
    if (c < p.cpl && !(p.skip & kSkipRanks)) {
      const int e = ent[c];
      const unsigned peers = same_expert_lanes(e, p.id_bits);
      const int rank = __popc(peers & lanes_before);
      uint16_t* mine = s_rank + (e >= 0 ? e : 0) * kRankStride + warp;
      const int prior = e >= 0 ? *mine : 0;
      __syncwarp();
      if (e >= 0 && rank == 0) *mine = static_cast<uint16_t>(prior + __popc(peers));
      __syncwarp();
      ent[c] = ((e + 1) << kRankBits) | (prior + rank);
    }
  }
  __syncthreads();

  // 3. Per expert, one warp: exclusive scan of the 32 warps' counts (lane = warp index).
  int valid = 0;
  if (!(p.skip & kSkipWarpScan)) {
#pragma unroll 4
    for (int e = warp; e < E; e += kWarps) {
      uint16_t* counts = s_rank + e * kRankStride;
      const int v = counts[lane];
      const int incl = warp_inclusive_scan(v);
      counts[lane] = static_cast<uint16_t>(incl - v);
      if constexpr (kSingle) {
        if (lane == 31) {
          s_cnt[e] = incl;
          s_base[e] = round_up_pow2(incl, p.tm);
          valid += incl;
        }
      }
    }
  }
  if constexpr (kSingle) {
    valid = warp_sum(valid);
    bad = warp_sum(bad);
    __syncthreads();  // s_sum was zeroed before step 2's barrier; now add to it
    if (lane == 0) {
      if (valid) atomicAdd(&s_sum[0], valid);
      if (bad) atomicAdd(&s_sum[1], bad);
    }
    const int n_rows = block_exclusive_scan(s_base, E, s_warp);  // s_base: padded offsets
    for (int e = tid; e < E; e += kThreads) {
      s_off[e] = s_base[e];
      p.counts[e] = s_cnt[e];
      p.offsets[e] = s_base[e];
    }
    if (tid == 0) {
      s_off[E] = n_rows;
      p.offsets[E] = n_rows;
      p.meta[ARGON_META_N_ROWS] = n_rows;
      p.meta[ARGON_META_N_TILES] = n_rows / p.tm;
      p.meta[ARGON_META_N_VALID] = s_sum[0];
      p.meta[ARGON_META_N_BAD_IDS] = s_sum[1];
    }
  }
  __syncthreads();

  // 4. Placement.
  const w_t* weights = static_cast<const w_t*>(p.weights);
#pragma unroll
  for (int c = 0; c < kMaxChunks; ++c) {
    const int64_t i = warp_begin + 32 * c;
    if (c < p.cpl && i < p.n && !(p.skip & kSkipPlace)) {
      const int e = (ent[c] >> kRankBits) - 1;
      int row = -1;
      if (e >= 0) {
        row = s_base[e] + s_rank[e * kRankStride + warp] + (ent[c] & ((1 << kRankBits) - 1));
        p.sorted_token[row] = static_cast<int>(static_cast<uint32_t>(i) / static_cast<uint32_t>(p.K));
        p.sorted_weight[row] = to_float(weights[i]);
      }
      p.pos[i] = row;
    }
  }

  // 5. Tile map and padding rows, then the tail.
  if (!(p.skip & kSkipFillExperts)) fill_tiles_and_padding(p, s_off, s_cnt);
  if (!(p.skip & kSkipFillTail)) fill_tail(p, s_off[E]);
}

template <typename Kernel>
void allow_smem(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(bytes)));
  }
}

void moe_plan_out_cuda(const Tensor& topk_ids, const Tensor& topk_weights, int64_t n_expert,
                       int64_t tile_m, const Tensor& counts, const Tensor& offsets,
                       const Tensor& sorted_token, const Tensor& sorted_weight, const Tensor& pos,
                       const Tensor& tile_expert, const Tensor& meta) {
  const PlanDims d = check_plan_inputs(topk_ids, topk_weights, n_expert, tile_m);
  check_plan_outputs(d, topk_ids, counts, offsets, sorted_token, sorted_weight, pos, tile_expert,
                     meta);
  const c10::cuda::CUDAGuard guard(topk_ids.device());
  const Tensor ids = topk_ids.contiguous();
  const Tensor w = topk_weights.contiguous();
  const int E = static_cast<int>(d.E);
  const size_t per_expert = 3 * sizeof(int) + kRankStride * sizeof(uint16_t);
  const size_t place_smem = size_t(E) * per_expert + sizeof(int);
  const int max_smem = at::cuda::getCurrentDeviceProperties()->sharedMemPerBlockOptin;
  TORCH_CHECK(place_smem <= size_t(max_smem), "moe_plan on CUDA supports n_expert up to ",
              (max_smem - sizeof(int)) / per_expert, " on this device, got ", E);

  PlanParams p{};
  p.ids = ids.const_data_ptr();
  p.weights = w.const_data_ptr();
  p.n = static_cast<int>(d.entries());
  p.K = static_cast<int>(d.K);
  p.E = E;
  p.tm = static_cast<int>(d.tile_m);
  p.r_max = static_cast<int>(d.r_max);
  p.n_tiles = static_cast<int>(d.n_tiles);
  p.id_bits = 32 - __builtin_clz(static_cast<unsigned>(E));
  p.skip = g_skip_mask;
  // Keep ablations in bounds: rows and offsets computed without the warp scan, or from a
  // block table that nothing wrote this call, must not be used as addresses.
  if (p.skip & kSkipWarpScan) p.skip |= kSkipPlace | kSkipFillExperts | kSkipFillTail;
  if (p.skip & (kSkipHistLaunch | kSkipScanLaunch)) p.skip |= kSkipPlaceLaunch;
  p.counts = counts.data_ptr<int>();
  p.offsets = offsets.data_ptr<int>();
  p.sorted_token = sorted_token.data_ptr<int>();
  p.sorted_weight = sorted_weight.data_ptr<float>();
  p.pos = pos.data_ptr<int>();
  p.tile_expert = tile_expert.data_ptr<int>();
  p.meta = meta.data_ptr<int>();

  const bool single = p.n <= std::min(g_single_max_entries, kThreads * kMaxChunks);
  Tensor workspace;
  int n_blocks = 1;
  if (single) {
    p.cpl = static_cast<int>(ceil_div(p.n, kThreads));
  } else {
    const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
    const int auto_chunks = static_cast<int>(ceil_div(p.n, int64_t{kThreads} * sms));
    p.cpl = std::clamp(g_multi_chunks > 0 ? g_multi_chunks : auto_chunks, 1, kMaxChunks);
    n_blocks = static_cast<int>(ceil_div(p.n, int64_t{kThreads} * p.cpl));
    workspace = at::empty({int64_t{n_blocks} * (2 * E + 1)}, ids.options().dtype(at::kInt));
    p.block_hist = workspace.data_ptr<int>();
    p.block_base = p.block_hist + int64_t{n_blocks} * E;
    p.block_bad = p.block_base + int64_t{n_blocks} * E;
  }
  const cudaStream_t s = stream();

  AT_DISPATCH_INDEX_TYPES(ids.scalar_type(), "moe_plan_cuda_ids", [&] {
    using id_t = index_t;
    ARGON_DISPATCH_FLOAT(w.scalar_type(), "moe_plan_cuda_w", [&] {
      using w_t = scalar_t;
      if (single) {
        auto kernel = plan_place_kernel<id_t, w_t, true>;
        allow_smem(kernel, place_smem);
        kernel<<<1, kThreads, place_smem, s>>>(p);
        ARGON_CUDA_CHECK_LAUNCH();
        return;
      }
      auto hist = plan_hist_kernel<id_t>;
      allow_smem(hist, size_t(E) * sizeof(int));
      if (!(p.skip & kSkipHistLaunch)) {
        hist<<<n_blocks, kThreads, size_t(E) * sizeof(int), s>>>(p);
        ARGON_CUDA_CHECK_LAUNCH();
      }
      allow_smem(plan_scan_kernel, size_t(E) * sizeof(int));
      if (!(p.skip & kSkipScanLaunch)) {
        plan_scan_kernel<<<1, kThreads, size_t(E) * sizeof(int), s>>>(p, n_blocks);
        ARGON_CUDA_CHECK_LAUNCH();
      }
      auto place = plan_place_kernel<id_t, w_t, false>;
      allow_smem(place, place_smem);
      if (!(p.skip & kSkipPlaceLaunch)) {
        place<<<n_blocks, kThreads, place_smem, s>>>(p);
        ARGON_CUDA_CHECK_LAUNCH();
      }
    });
  });
}

// The functional form, registered for CUDA to cut eager overhead: its seven outputs come
// straight from the CUDA allocator (at::detail::empty_cuda, no dispatcher round trip each) and
// the _out kernel is called directly. Same outputs as the composite form in functional.cpp.
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor> moe_plan_cuda(
    const Tensor& topk_ids, const Tensor& topk_weights, int64_t n_expert, int64_t tile_m) {
  const PlanDims d = check_plan_inputs(topk_ids, topk_weights, n_expert, tile_m);
  const auto dev = topk_ids.device();
  auto make = [&](std::initializer_list<int64_t> size, at::ScalarType t) {
    return Tensor(at::detail::empty_cuda(size, t, dev, std::nullopt));
  };
  Tensor counts = make({d.E}, at::kInt), offsets = make({d.E + 1}, at::kInt),
         sorted_token = make({d.r_max}, at::kInt), sorted_weight = make({d.r_max}, at::kFloat),
         pos = make({d.T, d.K}, at::kInt), tile_expert = make({d.n_tiles}, at::kInt),
         meta = make({ARGON_META_SIZE}, at::kInt);
  moe_plan_out_cuda(topk_ids, topk_weights, n_expert, tile_m, counts, offsets, sorted_token,
                    sorted_weight, pos, tile_expert, meta);
  return {counts, offsets, sorted_token, sorted_weight, pos, tile_expert, meta};
}

// Benchmark hook: set the plan's path split (entries up to which one kernel runs) and the
// chunks per warp of the three-kernel path (0: automatic); negative values leave a knob as is.
// Returns the previous (single_max_entries, multi_chunks).
std::vector<int64_t> plan_tuning(int64_t single_max_entries, int64_t multi_chunks) {
  std::vector<int64_t> previous{g_single_max_entries, g_multi_chunks};
  if (single_max_entries >= 0) g_single_max_entries = static_cast<int>(single_max_entries);
  if (multi_chunks >= 0) g_multi_chunks = static_cast<int>(std::min<int64_t>(multi_chunks, kMaxChunks));
  return previous;
}

// Benchmark hook: stages to leave out (kSkip* bits), to attribute the plan's time. Returns the
// previous mask. The plan's outputs are wrong while a mask is set.
int64_t plan_debug_skip(int64_t mask) {
  const int64_t previous = g_skip_mask;
  g_skip_mask = static_cast<int>(mask);
  return previous;
}

}  // namespace

TORCH_LIBRARY_IMPL(argon, CUDA, m) {
  m.impl("moe_plan_out", TORCH_FN(moe_plan_out_cuda));
  m.impl("moe_plan", TORCH_FN(moe_plan_cuda));
}

// Internal knobs of the CUDA backend, for the benchmark (not part of the public API).
TORCH_LIBRARY(argon_cuda, m) {
  m.def("plan_tuning(int single_max_entries, int multi_chunks) -> int[]", TORCH_FN(plan_tuning));
  m.def("plan_debug_skip(int mask) -> int", TORCH_FN(plan_debug_skip));
}

}  // namespace argon::cuda
