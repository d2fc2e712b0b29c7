// moe_plan in ONE kernel launch on sm_90+: a thread-block cluster of G blocks (G <= 16)
// shares its per-expert counts through distributed shared memory, so no block waits on global
// memory, no workspace is needed, and nothing but the outputs is written.
//
// Algorithm. Block b of the cluster owns the entries [b * S, (b + 1) * S), S = threads * C;
// warp w of it owns C consecutive chunks of 32 consecutive entries. Then (b, w, chunk, lane)
// is flat-index order, and the row of entry i (expert e) is
//     offsets[e]                      scan of the padded totals over experts
//   + (entries of e in blocks < b)    sum over the cluster's blocks of their counts
//   + (entries of e in warps < w)     column scan of the block's per-warp count table h[w][e]
//   + (entries of e before i in w)    h[w][e] before i's chunk + popc(peers below i's lane)
// where the peers of a lane in its chunk (lanes holding the same key) come from one ballot per
// key bit, and the lowest peer adds the chunk's count to h[w][e] for the next chunk.
// That is a stable rank without a sort and without global atomics; integer sums are exact, so
// the bytes are the same on every run. Ids that are -1 or out of range get key E (counted
// in h's column E, so invalid entries need no separate reduction; out-of-range ones are also
// counted for meta); slots past the last entry get key E + 1 and touch nothing.
//
// Steps (B = block barrier, CB = cluster barrier):
//   load ids and weights (4 chunks in flight), zero h meanwhile   B
//   chunk loop: ballots, read h, the leader adds                   B
//   column scan of h (experts in parallel), block counts            CB (arrive.release + wait)
//   per expert: the G blocks' counts (shared::cluster loads) -> total, earlier blocks;
//   padded offsets by a one-barrier scan                            B; arrive (reads done)
//   placement; each expert's padding rows and tiles (32 experts per warp, walked one by one with
//   all lanes storing side by side) and the tail [n_rows, R_max), strided over the cluster;
//   wait (no block leaves while a peer may still read its counts).
// Block 0 writes counts, offsets and meta. Every output element is written on every call.
//
// Status (H200, bench_cuda.py plan_variants in bench/results/h200.json, uniform routing,
// E = 512, K = 10, graph replay; the best of 256 / 512 / 1024 threads against the best portable
// path): T = 1 5.1 us (6.9); T = 4 6.5 (6.9); T = 8 7.0 (6.8); T = 128 12.9 (10.7);
// T = 2048 20.4 (16.3); T = 16384 54.4 (34.1). So the launcher takes it for tiny plans only.
// Where the time goes (a sweep that stopped the kernel after each step): every block-wide step
// costs ~0.4-1 us even with no work (T = 1: loads + zeroing 1.0 us over the 0.9 us launch;
// chunk loop 0.4; column scan + barrier 0.8; totals + offsets 1.1-1.3); the placement's
// scattered stores from at most 16 SMs cost 3-5 us at T = 1024-4096 and 25 us at 16384; the
// chunk loop ~1 us per chunk with 32 warps; the walk over experts in step 6, serial within a
// warp, 1-4 us once all 512 experts have rows. Remedies (not done): a block-local sort so the
// placements coalesce; experts walked by many warps at once; more SMs than one cluster holds.
//
// Limits (the launcher checks them and otherwise takes the portable kernel): sm_90+; n up to
// G * S (G <= 16, C bounded by shared memory: 8 bytes per entry + 4 * (warps + 4) bytes per
// expert); E + 1 < 65536 (keys are packed in 16 bits); threads a multiple of 128, <= 1024.
#pragma once
#include <cooperative_groups.h>

#include "block_scan.cuh"
#include "plan_common.cuh"

namespace argon::cuda {

constexpr int kClusterMaxBlocks = 16;  // non-portable cluster size (8 is the portable one)

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ unsigned cluster_block_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
// Arrive: this thread's shared-memory writes are released to the cluster (or, relaxed, only
// its progress is signalled). Wait: returns once every thread of the cluster has arrived.
__device__ __forceinline__ void cluster_arrive_release() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// The block `rank` of the cluster's copy of the shared-memory int at `p` (a generic address
// into distributed shared memory, so the compiler schedules the loads like any other).
__device__ __forceinline__ const int* cluster_peer(const int* p, unsigned rank) {
  return cooperative_groups::this_cluster().map_shared_rank(p, rank);
}
#endif

// Dynamic shared memory of plan_cluster_kernel for `threads` threads and C chunks per warp.
inline size_t plan_cluster_smem_bytes(int E, int threads, int chunks) {
  const size_t per_entry = 2 * sizeof(int);  // packed key / rank, weight
  const size_t table = size_t(threads / 32) * size_t(E + 1);
  return size_t(threads) * chunks * per_entry + (table + 4 * size_t(E) + 4) * sizeof(int);
}

// kKeyBits: ballots per chunk for the peers, enough for keys up to E + 1 (10 covers E <= 1022).
template <int kKeyBits>
__global__ void __launch_bounds__(1024, 1) plan_cluster_kernel(PlanParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(16) unsigned char smem[];
  const int E = p.E, C = p.chunks;
  const int n_threads = blockDim.x, n_warps = n_threads >> 5, S = n_threads * C;
  const int hs = E + 1;  // h row: experts, then column E for invalid ids
  unsigned* s_state = reinterpret_cast<unsigned*>(smem);  // [S] key; then key << 16 | rank
  float* s_w = reinterpret_cast<float*>(s_state + S);      // [S] weights
  int* s_h = reinterpret_cast<int*>(s_w + S);              // [warps][E + 1]
  int* s_cnt = s_h + n_warps * hs;                          // [E + 2] block counts; bad ids
  int* s_tot = s_cnt + E + 2;                               // [E] entries of e in the plan
  int* s_off = s_tot + E;                                   // [E + 1] padded offsets
  int* s_rowbase = s_off + E + 1;                           // [E] row of this block's first e
  __shared__ int s_warp[32];
  __shared__ int s_bad_warp[32];

  const unsigned rank = cluster_block_rank(), n_blocks = gridDim.x;  // the grid is one cluster
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t begin = int64_t{rank} * S;
  const int n_local = static_cast<int>(max(int64_t{0}, min(int64_t{S}, int64_t{p.n} - begin)));
  const int slot0 = warp * 32 * C + lane;  // chunk c of this lane: slot0 + 32 * c
  const int kAbsent = E + 1;

  // 1. Keys and weights into shared memory (four chunks' loads in flight); h is zeroed while
  //    the first loads are in flight.
  int bad = 0;
#pragma unroll 1
  for (int c0 = 0; c0 < C; c0 += 4) {
    int key[4];
    float wv[4];
    load_four_chunks(p, begin, slot0, c0, C, n_local, kAbsent, key, wv, bad);
    if (c0 == 0) {
      const int words = n_warps * hs;
      int4* h4 = reinterpret_cast<int4*>(s_h);  // s_h is 16-byte aligned: S is a multiple of 128
#pragma unroll 1
      for (int q = tid; q < words / 4; q += n_threads) h4[q] = make_int4(0, 0, 0, 0);
      for (int q = (words & ~3) + tid; q < words; q += n_threads) s_h[q] = 0;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (c0 + j < C) {
        s_state[slot0 + 32 * (c0 + j)] = static_cast<unsigned>(key[j]);
        s_w[slot0 + 32 * (c0 + j)] = wv[j];
      }
    }
  }
  bad = warp_sum(bad);
  if (lane == 0) s_bad_warp[warp] = bad;
  __syncthreads();

  // 2. Rank inside the warp: the lane's peers in its chunk, plus the warp's earlier chunks.
  const unsigned lanes_below = (1u << lane) - 1u;
  int* h_w = s_h + warp * hs;
#pragma unroll 1
  for (int c = 0; c < C; ++c) {
    const int slot = slot0 + 32 * c;
    const int key = static_cast<int>(s_state[slot]);
    // Peers: one ballot per key bit, issued back to back (no branch between them; keys are
    // below 2^kKeyBits). __match_any_sync measured no faster on the H200.
    unsigned peers = 0xffffffffu;
#pragma unroll
    for (int b = 0; b < kKeyBits; ++b) {
      const unsigned ones = __ballot_sync(0xffffffffu, (key >> b) & 1);
      peers &= ((key >> b) & 1) ? ones : ~ones;
    }
    const int earlier = key != kAbsent ? h_w[key] : 0;
    __syncwarp();  // every peer has read h_w[key] before the leader adds to it
    if (key != kAbsent && lane == __ffs(peers) - 1) h_w[key] = earlier + __popc(peers);
    __syncwarp();
    s_state[slot] = (static_cast<unsigned>(key) << 16) |
                    static_cast<unsigned>(earlier + __popc(peers & lanes_below));
  }
  __syncthreads();

  // 3. Column scan: h[w][e] becomes the entries of e in warps before w; s_cnt[e] the block's.
#pragma unroll 1
  for (int e = tid; e < hs; e += n_threads) {
    int run = 0;
#pragma unroll 1
    for (int w0 = 0; w0 < n_warps; w0 += 4) {  // warps come in fours (threads % 128 == 0)
      int v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = s_h[(w0 + j) * hs + e];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        s_h[(w0 + j) * hs + e] = run;
        run += v[j];
      }
    }
    s_cnt[e] = run;
  }
  if (tid == 0) {
    int b = 0;
#pragma unroll 1
    for (int w = 0; w < n_warps; ++w) b += s_bad_warp[w];
    s_cnt[E + 1] = b;
  }
  const bool alone = n_blocks == 1;  // a one-block "cluster": block barriers suffice
  if (alone) {
    __syncthreads();
  } else {
    cluster_arrive_release();
    cluster_wait();  // every block's s_cnt is complete (also a block barrier)
  }

  // 4. Per expert (a run of consecutive experts per thread): the plan's total and the entries
  //    in earlier blocks, from every block of the cluster; then the padded offsets.
  const int per = (E + n_threads - 1) / n_threads;
  const int e_lo = min(E, tid * per), e_hi = min(E, e_lo + per);
  int padded_sum = 0;
#pragma unroll 1
  for (int e = e_lo; e < e_hi; ++e) {
    int tot = 0, before = 0;
#pragma unroll 4
    for (unsigned b = 0; b < n_blocks; ++b) {
      const int v = cluster_peer(s_cnt, b)[e];
      tot += v;
      before += b < rank ? v : 0;
    }
    s_tot[e] = tot;
    s_rowbase[e] = before;
    padded_sum += round_up_pow2(tot, p.tm);
  }
  int invalid = 0, bad_ids = 0;
  if (rank == 0 && tid == 0) {
#pragma unroll 1
    for (unsigned b = 0; b < n_blocks; ++b) {
      invalid += cluster_peer(s_cnt, b)[E];
      bad_ids += cluster_peer(s_cnt, b)[E + 1];
    }
  }
  if (!alone) cluster_arrive_relaxed();  // this block is done reading its peers' shared memory
  int n_rows = 0;
  int run = block_exclusive_scan_1bar(padded_sum, s_warp, n_rows);
#pragma unroll 1
  for (int e = e_lo; e < e_hi; ++e) {
    const int tot = s_tot[e];
    s_off[e] = run;
    s_rowbase[e] += run;
    if (rank == 0) {
      p.counts[e] = tot;
      p.offsets[e] = run;
    }
    run += round_up_pow2(tot, p.tm);
  }
  if (tid == 0) {
    s_off[E] = n_rows;
    if (rank == 0) {
      p.offsets[E] = n_rows;
      p.meta[ARGON_META_N_ROWS] = n_rows;
      p.meta[ARGON_META_N_TILES] = n_rows >> (__ffs(p.tm) - 1);
      p.meta[ARGON_META_N_VALID] = p.n - invalid;
      p.meta[ARGON_META_N_BAD_IDS] = bad_ids;
    }
  }
  __syncthreads();

  // 5. Placement of this block's entries.
#pragma unroll 1
  for (int c = 0; c < C; ++c) {
    const int slot = slot0 + 32 * c;
    if (slot >= n_local) break;  // slots grow with c
    const unsigned st = s_state[slot];
    const int key = static_cast<int>(st >> 16);
    const int64_t i = begin + slot;
    int row = -1;
    if (key < E) {
      row = s_rowbase[key] + h_w[key] + static_cast<int>(st & 0xffffu);
      p.sorted_token[row] = static_cast<int>(static_cast<uint32_t>(i) / static_cast<uint32_t>(p.K));
      p.sorted_weight[row] = s_w[slot];
    }
    p.pos[i] = row;
  }

  // 6. Each expert's padding rows and tiles. A warp takes 32 experts at a time, one per lane
  //    (their bounds load in parallel), then walks the ones with work, all lanes writing that
  //    expert's rows / tiles side by side so the stores coalesce. Rounds of 32 experts are
  //    strided over every warp of the cluster; then the tail.
  const int tm_log2 = __ffs(p.tm) - 1;
  const int n_cluster_warps = static_cast<int>(n_blocks) * n_warps;
#pragma unroll 1
  for (int e0 = (static_cast<int>(rank) * n_warps + warp) * 32; e0 < E; e0 += n_cluster_warps * 32) {
    const int e = e0 + lane;
    const int lo = e < E ? s_off[e] : 0, hi = e < E ? s_off[e + 1] : 0;
    const int pad = e < E ? lo + s_tot[e] : 0;
    unsigned todo = __ballot_sync(0xffffffffu, hi > lo);  // experts with rows (so tiles)
#pragma unroll 1
    while (todo) {
      const int j = __ffs(todo) - 1;
      todo &= todo - 1;
      const int jlo = __shfl_sync(0xffffffffu, lo, j), jhi = __shfl_sync(0xffffffffu, hi, j);
      const int jpad = __shfl_sync(0xffffffffu, pad, j);
#pragma unroll 1
      for (int r = jpad + lane; r < jhi; r += 32) {
        p.sorted_token[r] = -1;
        p.sorted_weight[r] = 0.f;
      }
#pragma unroll 1
      for (int t = (jlo >> tm_log2) + lane; t < (jhi >> tm_log2); t += 32) p.tile_expert[t] = e0 + j;
    }
  }
  const int gtid = static_cast<int>(rank) * n_threads + tid;
  const int stride = static_cast<int>(n_blocks) * n_threads;
#pragma unroll 1
  for (int j = (n_rows >> tm_log2) + gtid; j < p.n_tiles; j += stride) p.tile_expert[j] = -1;
#pragma unroll 1
  for (int r = n_rows + gtid; r < p.r_max; r += stride) {
    p.sorted_token[r] = -1;
    p.sorted_weight[r] = 0.f;
  }
  if (!alone) cluster_wait();  // peers may read this block's s_cnt until they arrive
#else
  __trap();  // the launcher takes this kernel only on sm_90+
#endif
}

}  // namespace argon::cuda
