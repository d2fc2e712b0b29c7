// moe_plan on any CUDA GPU (the portable kernels; the launcher prefers the one-launch grid
// kernel of plan_grid.cuh where it fits): deterministic, no global atomics, no host sync,
// graph-capturable.
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
//   Small n (the launcher's kSingleMaxEntries, at most 4096): ONE kernel,
//     plan_kernel<256, false>. G blocks of 256 threads (G = E / 16, at most 32) each compute
//     the whole plan (counts by shared atomics, the scans over experts, the sort) and write a
//     1/G share of the placements and of the padding / tile-map / tail fills.
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
// Status (H200, bench/results/h200.json): 6-7 us for T <= 16, 10.5-19.5 us for T = 128..4096,
// 32-37 us at T = 16384, against targets of 6 us (T <= 4096) and 15 us (T = 16384).
//
// Limits: E < 65536 (16-bit keys) and shared memory 20 * E + 12 * 512 * C bytes (E up to about
// 6700 on sm_90); rows fit int32 (checked on the host); n_blocks * E ints of workspace, whose
// cells every block reads (8 per thread per round), so the two-kernel path slows down past
// ~32 segments of 8192 entries (fine to millions of entries, tuned for n <= 262144).
#pragma once
#include "block_scan.cuh"
#include "plan_common.cuh"

namespace argon::cuda {

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

// ---- two-kernel path, first kernel: per-block expert counts ---------------------------------
template <int kThreads>
__global__ void __launch_bounds__(kThreads) plan_count_kernel(PlanParams p) {
  extern __shared__ int s_hist[];  // [E]
  __shared__ int s_bad;
  let_dependents_start();  // the place kernel may start now (sm_90+ dependent launch)
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
    int idx[4];
    bool here[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      idx[j] = i0 + j * kThreads;
      here[j] = idx[j] < n_local;
    }
    int64_t id[4];  // four loads in flight, then their keys
    load_ids<4>(p, begin, idx, here, id);
    int key[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) key[j] = key_of_id(p, id[j], bad);
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
  //    entries per expert of this block by shared atomics. Four chunks per round of loads.
  int bad = 0;
#pragma unroll 1
  for (int c0 = 0; c0 < C; c0 += 4) {
    int key[4];
    float wv[4];
    chunk_keys_and_weights<4>(p, issue_chunk_loads<4>(p, begin, slot0, c0, C, n_local, ~0u), E,
                              key, wv, bad);
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
    wait_for_prerequisites();  // it loaded and sorted its segment while the counts were made
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
  write_tiles_and_padding(
      p, s_off, [&](int e) { return s_off[e] + s_tot[e]; }, n_rows, tm_log2,
      blockIdx.x * kWarps + warp, gridDim.x * kWarps, blockIdx.x * kThreads + tid,
      gridDim.x * kThreads);
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

}  // namespace argon::cuda
