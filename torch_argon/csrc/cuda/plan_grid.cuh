// moe_plan in ONE launch on any GPU with cooperative launch: 512-thread blocks spread over the
// whole GPU. A plan of up to 5 chunks per warp (2560 entries) is one segment: every block ranks
// all of it and writes its share of the outputs, with no exchange. A larger plan is cut into
// one segment per block (G blocks, all resident: the launcher sizes G from the occupancy query
// and launches with the cooperative attribute), and the blocks exchange their per-expert
// counts through a global workspace across two grid barriers (cooperative_groups grid sync).
//
// Algorithm. Block b owns the entries [b * S, (b + 1) * S), S = 512 * C; warp w of it owns
// C consecutive chunks of 32 consecutive entries, so (b, w, chunk, lane) is flat-index order.
// The row of entry i, expert e, is
//     offsets[e]                      exclusive scan of the padded totals over experts
//   + (entries of e in blocks < b)    exclusive scan over blocks of the workspace counts
//   + (entries of e in warps < w)     scan of the block's per-warp count table h[e][w]
//   + (entries of e before i in w)    h[e][w] before i's chunk + lanes below i with its key
// where a lane's peers (the lanes of its chunk with the same key) come from one ballot per key
// bit, and the lowest peer adds the chunk's count to h[e][w] for the next chunk. Keys, weights
// and ranks stay in registers (C <= 8). That is a stable rank without a sort and without global
// atomics; integer sums are exact, so the bytes are the same on every run. Ids that are -1 or
// out of range get key E (counted, not ranked; out-of-range ones also for meta); slots past
// the last entry get key E + 1 and touch nothing.
//
// Steps (B = block barrier, GB = grid barrier):
//   load keys and weights (four chunks in flight), zero h meanwhile         B
//   ranks inside each warp, chunk by chunk                                  B
//   scan of h per expert (one thread, four int4); the block's counts go to column b of the
//   workspace table [E + 2][G] (columns E, E + 1: invalid and out-of-range counts)    GB
//   one warp segment per table row scans the G block counts in place (exclusive) and writes
//   the row total                                                           GB
//   per four experts (thread order = expert order): totals and this block's prefix; padded
//   offsets by a one-barrier scan                                           B
//   placement of the block's entries; then, strided over the grid's warps, one lane per tile
//   finds its expert by binary search over the offsets and writes tile_expert, and the warp
//   writes each padded tile's padding rows with its lanes side by side; the tail rows.
// Block 0 writes counts, offsets and meta. Every output element is written on every call.
//
// Where the time goes (H200, E = 512, K = 10, uniform; lab clocks per step, cycles at ~1.9 GHz;
// graph replay 5.2 us at T = 1, 6.9 at T = 128, 10.8 at T = 4096, 15.7 at T = 16384):
// launch ~0.9 us; load + zero ~1.3K cycles; ranks ~1.3K (C = 1) to ~2.4K (C = 3); h scan
// ~0.9-1.7K; the exchange (two grid barriers of ~2K each and the row scans) 5-7K; offsets
// ~1.3-1.6K; placement ~2.5K per 512 entries a block (scattered 4-byte stores); tiles and
// padding 0.2-2K. The exchange is what keeps T >= 256 above 10 us.
//
// Limits (the launcher checks them and otherwise takes the portable kernels): E <= 1022 (keys
// are 10 bits; E + 2 columns fit four per thread); C <= 8; G <= 128 resident blocks; shared
// memory 4 * (20 E + 3 E + 1) bytes.
#pragma once
#include <cooperative_groups.h>

#include "block_scan.cuh"
#include "plan_common.cuh"

namespace argon::cuda {

constexpr int kGridThreads = 512;          // threads per block (16 warps)
constexpr int kGridWarps = kGridThreads / 32;
constexpr int kGridMaxChunks = 8;          // chunks per warp, held in registers
constexpr int kGridHStride = kGridWarps + 4;  // h row of one expert: int4 column scans hit
                                              // every bank once per quarter warp
constexpr int kGridKeyBits = 10;           // ballots per chunk: keys up to E + 1 < 1024
constexpr int kGridMaxBlocks = 128;        // segments: four per lane of one warp in step 4

// The workspace of a plan of several segments, in ints: the plan's totals per column (a row
// padded to whole int4), then the [E + 2][blocks] table of block counts.
__host__ __device__ inline int plan_grid_totals_row(int E) { return (E + 2 + 3) & ~3; }
inline int64_t plan_grid_workspace_ints(int E, int blocks) {
  return plan_grid_totals_row(E) + int64_t{E + 2} * blocks;
}

inline size_t plan_grid_smem_bytes(int E) {
  return (size_t(E) * kGridHStride + 3 * size_t(E) + 1) * sizeof(int);
}

// Exclusive prefix sum within each segment of `width` lanes (a power of two); `total` gets the
// segment's sum. All lanes of the warp must call it.
__device__ __forceinline__ int warp_segment_exclusive_scan(int x, int width, int& total) {
  const int sub = threadIdx.x & (width - 1);
  int incl = x;
#pragma unroll 1
  for (int d = 1; d < width; d <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, incl, d, width);
    if (sub >= d) incl += y;
  }
  total = __shfl_sync(0xffffffffu, incl, width - 1, width);
  return incl - x;
}

// Peers of the calling lane in its warp: the lanes holding the same key (keys < 2^10), from
// one ballot per key bit (H200: 1.9K cycles for two chunks against 2.9K with __match_any_sync).
__device__ __forceinline__ unsigned warp_peers(int key) {
  unsigned peers = 0xffffffffu;
#pragma unroll
  for (int bit = 0; bit < kGridKeyBits; ++bit) {
    const unsigned ones = __ballot_sync(0xffffffffu, (key >> bit) & 1);
    peers &= ((key >> bit) & 1) ? ones : ~ones;
  }
  return peers;
}

__global__ void __launch_bounds__(kGridThreads, 1) plan_grid_kernel(PlanParams p) {
  extern __shared__ __align__(16) int smem_words[];
  __shared__ int s_warp[32];
  __shared__ int s_invalid, s_bad;
  const int E = p.E, C = p.chunks;
  int* s_h = smem_words;                 // [E][kGridHStride] per-warp counts of each expert
  int* s_base = s_h + E * kGridHStride;  // [E] row of this block's first entry of e
  int* s_pad = s_base + E;              // [E] first padding row of e
  int* s_off = s_pad + E;               // [E + 1] padded offsets

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int b = blockIdx.x, G = gridDim.x, S = kGridThreads * C;
  // One segment: every block ranks all entries and writes its share of the outputs (no
  // exchange). Several: block b owns segment b (G == segments, all resident: cooperative).
  const bool one_segment = p.n <= S;
  const int64_t begin = one_segment ? 0 : int64_t{b} * S;
  const int n_local = static_cast<int>(max(int64_t{0}, min(int64_t{S}, int64_t{p.n} - begin)));
  const int slot0 = warp * 32 * C + lane;  // chunk c of this lane: slot0 + 32 * c
  const int kAbsent = E + 1;

  // 1. Keys and weights into registers (four chunks' loads in flight at a time); h is zeroed
  //    while the first loads are in flight.
  int key[kGridMaxChunks];
  float wv[kGridMaxChunks];
  int bad = 0;
  load_four_chunks(p, begin, slot0, 0, C, n_local, kAbsent, key, wv, bad);
  {
    const int words = E * kGridHStride;  // a multiple of 4
    int4* h4 = reinterpret_cast<int4*>(s_h);
#pragma unroll 1
    for (int q = tid; q < words / 4; q += kGridThreads) h4[q] = make_int4(0, 0, 0, 0);
    if (tid == 0) s_invalid = s_bad = 0;
  }
  if (C > 4) {
    load_four_chunks(p, begin, slot0, 4, C, n_local, kAbsent, key + 4, wv + 4, bad);
  }
  __syncthreads();

  // 2. Rank inside the warp: the lane's peers in its chunk, plus the warp's earlier chunks
  //    (h[e][warp] counts the warp's entries of e so far; the lowest peer adds the chunk's).
  const unsigned lanes_below = (1u << lane) - 1u;
  int rank[kGridMaxChunks];
  int invalid = 0;
#pragma unroll
  for (int c = 0; c < kGridMaxChunks; ++c) {
    rank[c] = 0;
    if (c < C) {
      const int k = key[c];
      invalid += k == E;
      const unsigned peers = warp_peers(k);
      int* h = s_h + k * kGridHStride + warp;
      const bool valid = k < E;
      const int earlier = valid ? *h : 0;
      __syncwarp();  // every peer has read h before the leader adds to it
      if (valid && lane == __ffs(peers) - 1) *h = earlier + __popc(peers);
      __syncwarp();
      rank[c] = earlier + __popc(peers & lanes_below);
    }
  }
  invalid = warp_sum(invalid);
  bad = warp_sum(bad);
  if (lane == 0 && invalid != 0) atomicAdd(&s_invalid, invalid);  // integer sums: same bytes
  if (lane == 0 && bad != 0) atomicAdd(&s_bad, bad);              // on every run
  __syncthreads();

  // 3. Column scan (thread e, its h row as four int4): h[e][w] becomes the entries of e in
  //    warps before w. The block's counts (columns E, E + 1: invalid and out-of-range ids) go
  //    to column b of the workspace's count table [E + 2][G], or stay in shared memory.
  const int ws_row = plan_grid_totals_row(E);
  int* ws_tot = p.block_hist;             // [ws_row] plan totals per column
  int* ws_cnt = p.block_hist + ws_row;    // [E + 2][G] block counts, then exclusive prefixes
  int* s_cnt = s_base;  // [E + 2] block counts with one segment (s_base is written after use)
#pragma unroll 1
  for (int e = tid; e < E; e += kGridThreads) {
    int4* row = reinterpret_cast<int4*>(s_h + e * kGridHStride);
    int4 v[kGridWarps / 4];
#pragma unroll
    for (int j = 0; j < kGridWarps / 4; ++j) v[j] = row[j];
    int run = 0;
#pragma unroll
    for (int j = 0; j < kGridWarps / 4; ++j) {
      const int4 x = v[j];
      v[j] = make_int4(run, run + x.x, run + x.x + x.y, run + x.x + x.y + x.z);
      run += x.x + x.y + x.z + x.w;
    }
#pragma unroll
    for (int j = 0; j < kGridWarps / 4; ++j) row[j] = v[j];
    if (one_segment) s_cnt[e] = run; else ws_cnt[int64_t{e} * G + b] = run;
  }
  if (tid == 0) {
    if (one_segment) {
      s_cnt[E] = s_invalid;
      s_cnt[E + 1] = s_bad;
    } else {
      ws_cnt[int64_t{E} * G + b] = s_invalid;
      ws_cnt[int64_t{E + 1} * G + b] = s_bad;
    }
  }

  // 4. Per column: the plan's total and the entries in earlier blocks. With several segments,
  //    one warp per column scans its G block counts (a row of the table, a few loads per lane)
  //    between two grid barriers, so each block then loads only what it needs.
  if (!one_segment) {
    cooperative_groups::this_grid().sync();  // also a block barrier
    // Lanes per column: enough for four blocks each (a power of two, so segments align).
    const int lanes = min(32, 1 << (32 - __clz(max(1, (G + 3) / 4) - 1)));
    const int cols_per_warp = 32 / lanes, sub = lane & (lanes - 1);
#pragma unroll 1
    for (int col0 = (b * kGridWarps + warp) * cols_per_warp; col0 < E + 2;
         col0 += G * kGridWarps * cols_per_warp) {
      const int col = col0 + lane / lanes;
      int* cnt_row = ws_cnt + int64_t{col} * G;
      int v[4];
      int sum = 0;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int g = 4 * sub + k;  // each lane a run of four blocks
        v[k] = col < E + 2 && g < G ? __ldcg(cnt_row + g) : 0;
        sum += v[k];
      }
      int total = 0;
      int run = warp_segment_exclusive_scan(sum, lanes, total);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int g = 4 * sub + k;
        if (col < E + 2 && g < G) cnt_row[g] = run;
        run += v[k];
      }
      if (col < E + 2 && sub == 0) ws_tot[col] = total;
    }
    cooperative_groups::this_grid().sync();
  } else {
    __syncthreads();
  }

  // Each entry's rank across the block's warps; h is free from here on.
#pragma unroll
  for (int c = 0; c < kGridMaxChunks; ++c) {
    if (c < C && key[c] < E) rank[c] += s_h[key[c] * kGridHStride + warp];
  }
  // Thread m owns columns 4m .. 4m + 3, so thread order is expert order for the scan below.
  const int quads = ws_row / 4;
  int tq[4] = {0, 0, 0, 0}, bq[4] = {0, 0, 0, 0};
  if (tid < quads) {
    const int4 t4 = one_segment ? reinterpret_cast<const int4*>(s_cnt)[tid]
                                : __ldcg(reinterpret_cast<const int4*>(ws_tot) + tid);
    tq[0] = t4.x; tq[1] = t4.y; tq[2] = t4.z; tq[3] = t4.w;
    if (!one_segment) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        if (4 * tid + k < E + 2) bq[k] = __ldcg(ws_cnt + int64_t{4 * tid + k} * G + b);
      }
    }
  }

  // 5. Padded offsets (one scan over the block), per-expert bases, counts / offsets / meta.
  const int e0 = 4 * tid;
  int padded = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) padded += e0 + k < E ? round_up_pow2(tq[k], p.tm) : 0;
  int n_rows = 0;
  int off = block_exclusive_scan_1bar(padded, s_warp, n_rows);
  __syncthreads();  // s_cnt (in s_base) is read before s_base is written
  const bool writer = b == 0;  // every block has the same values
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int e = e0 + k;
    if (e < E) {
      s_off[e] = off;
      s_base[e] = off + bq[k];
      s_pad[e] = off + tq[k];
      if (writer) {
        p.counts[e] = tq[k];
        p.offsets[e] = off;
      }
      off += round_up_pow2(tq[k], p.tm);
    } else if (writer && e == E) {
      p.meta[ARGON_META_N_VALID] = p.n - tq[k];
    } else if (writer && e == E + 1) {
      p.meta[ARGON_META_N_BAD_IDS] = tq[k];
    }
  }
  const int tm_log2 = __ffs(p.tm) - 1;
  if (tid == 0) {
    s_off[E] = n_rows;
    if (writer) {
      p.offsets[E] = n_rows;
      p.meta[ARGON_META_N_ROWS] = n_rows;
      p.meta[ARGON_META_N_TILES] = n_rows >> tm_log2;
    }
  }
  __syncthreads();

  // 6. Placement of this block's entries (one segment: block b places the warps w = b mod G).
  const bool places = !one_segment || warp % G == b;
#pragma unroll
  for (int c = 0; c < kGridMaxChunks; ++c) {
    const int slot = slot0 + 32 * c;
    if (places && c < C && slot < n_local) {
      const int64_t i = begin + slot;
      int row = -1;
      if (key[c] < E) {
        row = s_base[key[c]] + rank[c];
        p.sorted_token[row] = static_cast<int>(static_cast<uint32_t>(i) / static_cast<uint32_t>(p.K));
        p.sorted_weight[row] = wv[c];
      }
      p.pos[i] = row;
    }
  }

  // 7. Tiles: lane l of grid warp gw takes tiles j = (32 * pass + l) * (grid warps) + gw, so
  //    even a few tiles spread over every warp. A tile's expert is the last e with
  //    offsets[e] <= its first row (empty experts before it share that offset and have a
  //    smaller e). An expert's padding rows are in its last tile; the warp writes each such
  //    tile's padding rows with all lanes side by side, so the stores coalesce. Then the tail
  //    [n_rows, R_max), coalesced.
  const int grid_warps = G * kGridWarps, gw = b * kGridWarps + warp;
#pragma unroll 1
  for (int j0 = gw; j0 < p.n_tiles; j0 += 32 * grid_warps) {
    const int j = j0 + lane * grid_warps;
    int pad_lo = 0, pad_hi = 0;
    if (j < p.n_tiles) {
      const int lo = j << tm_log2;
      int e = -1;
      if (lo < n_rows) {
        int l = 0, h = E;  // s_off[l] <= lo < s_off[h] (s_off[E] = n_rows)
#pragma unroll 1
        while (h - l > 1) {
          const int mid = (l + h) >> 1;
          if (s_off[mid] <= lo) l = mid; else h = mid;
        }
        e = l;
        pad_lo = max(lo, s_pad[e]);
        pad_hi = lo + p.tm;
      }
      p.tile_expert[j] = e;
    }
    unsigned todo = __ballot_sync(0xffffffffu, pad_hi > pad_lo);
#pragma unroll 1
    while (todo) {
      const int src = __ffs(todo) - 1;
      todo &= todo - 1;
      const int r_lo = __shfl_sync(0xffffffffu, pad_lo, src);
      const int r_hi = __shfl_sync(0xffffffffu, pad_hi, src);
#pragma unroll 1
      for (int r = r_lo + lane; r < r_hi; r += 32) {
        p.sorted_token[r] = -1;
        p.sorted_weight[r] = 0.f;
      }
    }
  }
  const int stride = G * kGridThreads;
#pragma unroll 1
  for (int r = n_rows + b * kGridThreads + tid; r < p.r_max; r += stride) {
    p.sorted_token[r] = -1;
    p.sorted_weight[r] = 0.f;
  }
}

}  // namespace argon::cuda
