// moe_plan in ONE launch of 512-thread blocks, for E <= 1022, in the shape plan_cuda.cu picks:
//   * Cluster shape: the plan cut into p.cluster segments (1, or 2-16 on sm_90+), one per block
//     of a thread-block cluster; each block adds its per-expert counts (u16 pairs) into one of
//     two sums in every peer's shared memory, the earlier segments' or the later ones' (bulk
//     adds that signal an mbarrier there). The grid holds several such clusters, replicas:
//     each counts every entry but ranks and writes only its share, so the writes spread.
//   * Grid shape (cooperative launch): one segment per block, up to 128 blocks, exchanging
//     their counts through a global workspace between two grid barriers.
//
// Segment s owns the entries [s S, (s + 1) S), S = 512 C; warp w owns C consecutive chunks of
// 32, so (segment, warp, chunk, lane) is entry order. C and the ids' type are template
// parameters (a kernel of one C fits the instruction cache far better than a loop over up to
// eight). The row of entry i, expert e, is
//     offsets[e]                       scan of the padded totals over experts
//   + (entries of e in segments < s)   scan over segments: the exchange
//   + (entries of e in warps < w)      scan of the block's per-warp counts h[e][w]
//   + (entries of e before i in w)     h[e][w] read before i's chunk adds to it, plus the lanes
//                                      below i in its chunk with the same key (ballots)
// a stable rank without a sort or global atomics; integer sums are exact in any order, so the
// bytes are the same on every run. Ids -1 and out of range get key E (counted, not placed;
// out-of-range ones also in meta), slots past the last entry key E + 1 (they touch nothing).
//
// Steps, one function each (B: block barrier, CB: cluster barrier, GB: grid barrier):
//   1. load_entries: keys and weights into registers, all C chunks' loads in flight; h zeroed
//      (cluster shape: the exchange set up, CB arrive) while they fly, or, with dependent
//      launch, before waiting for the previous kernel                                 B
//   2. count_entries: a shared atomic into h per valid entry; the lanes of a chunk this
//      replica places first read h (the warp's earlier entries of their key)           B
//   3. scan_warp_counts: h rows to exclusive prefixes over warps; the block's counts (columns
//      E, E + 1: invalid, out-of-range ids) to shared memory, in the grid shape to the table
//   4. exchange_and_rank: send the counts to the peers (CB wait) or GB; rank the placed chunks
//      meanwhile; wait for the peers' adds (readers only; CB arrive) or scan the table  GB
//   5. padded_offsets: four experts per thread (thread order = expert order); one block scan;
//      block 0 writes counts, offsets, meta                                            B
//   6. place_entries: chunk q = warp C + c by replica q mod replicas; grid shape with C >= 2:
//      staged in block-sorted order so that an expert's consecutive rows are stored together
//   7. write_tiles_and_padding; cluster shape: CB wait, so no peer's add reads an exited block.
// Every output element is written on every call. Where the time goes and what was tried:
// bench/plan_cuda_notes.md.
//
// Limits (the launcher checks them): E <= 1022 (10-bit keys); C <= 8; grid shape: G <= 128
// resident blocks; cluster shape: sm_90+, at most 16 segments. A block's count of an expert is
// at most S <= 4096, so u16 pairs never carry, even summed over 15 peers.
#pragma once
#include <cooperative_groups.h>

#include "block_scan.cuh"
#include "plan_common.cuh"

namespace argon::cuda {

constexpr int kGridThreads = 512;  // 16 warps
constexpr int kGridWarps = kGridThreads / 32;
constexpr int kGridMaxChunks = 8;  // chunks per warp, held in registers
// An h row: the warps' counts as u16 pairs (warps 2i and 2i + 1 share a word), then 4 words of
// padding so that the int4 column scan hits every bank once per quarter warp.
constexpr int kGridHWords = kGridWarps / 2;
constexpr int kGridHStride = kGridHWords + 4;
constexpr int kGridKeyBits = 10;             // ballots per chunk: keys up to E + 1 < 1024
constexpr int kGridMaxBlocks = 128;          // grid shape: four blocks per lane in step 4
constexpr int kGridMaxClusterSegments = 16;  // above 8: a non-portable cluster size

// The grid shape's workspace, in ints: the plan's totals per column (a row padded to whole
// int4), then the [E + 2][blocks] table of block counts.
__host__ __device__ inline int plan_grid_totals_row(int E) { return (E + 2 + 3) & ~3; }
inline int64_t plan_grid_workspace_ints(int E, int blocks) {
  return plan_grid_totals_row(E) + int64_t{E + 2} * blocks;
}

// Shared memory: h (reused to stage the placement: row, token, weight per entry), the block's
// counts (a totals row), four per-expert arrays, then (clusters of 2 or more) the two sums the
// peers add into. Bulk copies need 16-byte aligned addresses: h spans whole int4.
__host__ __device__ inline int plan_grid_h_words(int E, int C) {
  return E * kGridHStride > 3 * kGridThreads * C ? E * kGridHStride : 3 * kGridThreads * C;
}
static_assert(kGridHStride % 4 == 0 && (3 * kGridThreads) % 4 == 0, "h must span whole int4");
// A block's u16 counts as the peers receive them: whole 16-byte pieces (8 columns each).
__host__ __device__ inline int plan_grid_send_bytes(int E) { return (E + 2 + 7) / 8 * 16; }
__host__ __device__ inline int plan_grid_acc_words(int E) { return plan_grid_send_bytes(E) / 4; }
__host__ __device__ inline int plan_grid_acc_word(int E, int C) {  // 16-byte aligned
  return (plan_grid_h_words(E, C) + plan_grid_totals_row(E) + 4 * E + 1 + 3) & ~3;
}
// `cluster`: segments per cluster (0: the grid shape; 1: one segment, which exchanges nothing).
inline size_t plan_grid_smem_bytes(int E, int C, int cluster) {
  const int accumulators = cluster >= 2 ? 2 : 0;
  return (size_t(plan_grid_acc_word(E, C)) + size_t(accumulators) * plan_grid_acc_words(E)) *
         sizeof(int);
}

// Programmatic dependent launch (sm_90+; no-ops below): a kernel launched with it may start
// before the previous kernel of the stream ends, and waits before it touches what that kernel
// writes or reads; a kernel lets the next such launch start early.
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

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define ARGON_PLAN_CLUSTERS 1
// Cluster barrier halves. The arrive is relaxed: the counts travel by bulk adds, ordered by
// their mbarrier, and the fences below order what the adds depend on.
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// An mbarrier of one arrival (this thread's) that also waits for `bytes` of bulk adds; the
// fence publishes its initialisation to the peers, which signal it after a later CB.
__device__ __forceinline__ void exchange_barrier_init(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(bar)) : "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               ::"r"(shared_address(bar)), "r"(bytes) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void exchange_barrier_wait(uint64_t* bar) {  // every byte landed
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;"
        " selp.u32 %0, 1, 0, p; }"
        : "=r"(done) : "r"(shared_address(bar)) : "memory");
  }
}
// Adds `bytes` (a multiple of 16) of u32 words at `src` into the words at `dst` in block `rank`
// of the cluster by the bulk-copy engine, signalling `bar` there as they land. Each word's add
// is atomic, so adds from several blocks give the same sum in any order.
__device__ __forceinline__ void cluster_bulk_add(void* dst, const void* src, uint32_t bytes,
                                                 uint64_t* bar, int rank) {
  uint32_t remote_dst, remote_bar;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote_dst) : "r"(shared_address(dst)), "r"(rank));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote_bar) : "r"(shared_address(bar)), "r"(rank));
  asm volatile(
      "cp.reduce.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes.add.u32"
      " [%0], [%1], %2, [%3];"
      ::"r"(remote_dst), "r"(shared_address(src)), "r"(bytes), "r"(remote_bar) : "memory");
}
// This thread's shared-memory writes before this block's later bulk adds that read them.
__device__ __forceinline__ void fence_shared_for_bulk_copies() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// The sums' zeros must be in place before any peer's add reaches them: their writers release
// them to the async proxy before their relaxed CB arrive, the adds' issuers acquire them after
// their CB wait. The restricted forms (PTX ISA 8.6, CUDA 12.8) cover shared memory only; the
// general ones cost a MEMBAR.GPU each.
__device__ __forceinline__ void release_zeros_to_peers_adds() {
#if __CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 8)
  asm volatile("fence.proxy.async::generic.release.sync_restrict::shared::cta.cluster;" :::
               "memory");
#else
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("fence.acq_rel.cluster;" ::: "memory");
#endif
}
__device__ __forceinline__ void acquire_peers_zeros_for_adds() {
#if __CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 8)
  asm volatile("fence.proxy.async::generic.acquire.sync_restrict::shared::cluster.cluster;" :::
               "memory");
#else
  asm volatile("fence.proxy.async.shared::cluster;" ::: "memory");
#endif
}
#endif

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

// The lanes of the warp holding the calling lane's key (< 2^10): one ballot per key bit (faster
// here than __match_any_sync).
__device__ __forceinline__ unsigned warp_peers(int key) {
  unsigned peers = 0xffffffffu;
#pragma unroll
  for (int bit = 0; bit < kGridKeyBits; ++bit) {
    const unsigned ones = __ballot_sync(0xffffffffu, (key >> bit) & 1);
    peers &= ((key >> bit) & 1) ? ones : ~ones;
  }
  return peers;
}

// h's cell of expert e for a warp: the word of its warp pair, and its half of that word.
__device__ __forceinline__ unsigned* h_pair(int* s_h, int e, int warp) {
  return reinterpret_cast<unsigned*>(s_h) + e * kGridHStride + (warp >> 1);
}
__device__ __forceinline__ int h_count(unsigned pair, int warp) {
  return static_cast<int>((pair >> ((warp & 1) * 16)) & 0xffffu);
}
__device__ __forceinline__ unsigned h_one(int warp) { return 1u << ((warp & 1) * 16); }

// Reading entries: the loads (issue_chunk_loads) apart from what uses them
// (chunk_keys_and_weights), so that all C chunks' loads are in flight at once: with each id's
// range check right after its load, the compiler waited out a memory round trip per chunk.
template <int N>
struct ChunkLoads {
  int64_t id[N];      // -1 where absent
  unsigned wbits[N];  // a float's 32 bits, or a half's or a bfloat16's 16 in the low half
  bool here[N];       // the slot holds an entry
};
// Chunks 0 .. N - 1 of a lane (slot slot0 + 32 c, entry begin + slot); slots past n_local read
// nothing, and weights only for the chunks whose bit is set in `weighed`.
template <int N, typename Id>
__device__ __forceinline__ ChunkLoads<N> issue_chunk_loads(const PlanParams& p, int64_t begin,
                                                           int slot0, int n_local,
                                                           unsigned weighed) {
  ChunkLoads<N> l;
  int idx[N];
  Id raw[N];
#pragma unroll
  for (int j = 0; j < N; ++j) {
    idx[j] = slot0 + 32 * j;
    l.here[j] = idx[j] < n_local;
  }
#pragma unroll
  for (int j = 0; j < N; ++j) {
    raw[j] = l.here[j] ? static_cast<const Id*>(p.ids)[begin + idx[j]] : Id(-1);
  }
#pragma unroll
  for (int j = 0; j < N; ++j) l.id[j] = static_cast<int64_t>(raw[j]);  // after all N loads
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const int64_t i = begin + idx[j];
    l.wbits[j] = !l.here[j] || !((weighed >> j) & 1u) ? 0u
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
// Keys and weights from the loads; slots without an entry get key `absent` and weight 0.
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

// The tiles and padding rows, once the padded offsets s_off[0..E] (s_off[E] = n_rows) and
// pad_start(e), expert e's first padding row, are in shared memory. The calling warp takes
// experts first_expert, first_expert + expert_stride, ... and writes each one's tile_expert
// entries and padding rows, lanes side by side, with no search over the offsets; then thread
// gtid of `stride` writes the tiles past the last expert's (-1) and the tail rows.
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

// A block's shared memory, as file-scope symbols: a step that addresses it through a pointer
// handed to it got generic address arithmetic.
extern __shared__ __align__(16) int grid_smem[];  // laid out by plan_grid_smem_bytes
__shared__ long long grid_s_warp[32];             // scan scratch
__shared__ int grid_s_invalid, grid_s_bad;        // the block's invalid, out-of-range ids
__shared__ uint64_t grid_s_exchange_bar;          // cluster shape: the peers' adds landed
template <int C>
struct GridSmem {
  int* h;      // [E][kGridHStride] u16 per-warp counts; later the staging area
  int* cnt;    // [totals row] the block's counts (u16 in the cluster shape: sent)
  int* base;   // [E] row of the block's first entry of e
  int* pad;    // [E] first padding row of e
  int* loc;    // [E] first block-sorted slot of e (staged)
  int* off;    // [E + 1] padded offsets
  uint32_t* acc_early;  // cluster shape: the peers' adds of the earlier segments' counts
  uint32_t* acc_late;   // ... and of the later segments'
  __device__ __forceinline__ unsigned short* cnt16() const {
    return reinterpret_cast<unsigned short*>(cnt);
  }
  __device__ __forceinline__ explicit GridSmem(int E)
      : h(grid_smem), cnt(h + plan_grid_h_words(E, C)), base(cnt + plan_grid_totals_row(E)),
        pad(base + E), loc(pad + E), off(loc + E),
        acc_early(reinterpret_cast<uint32_t*>(grid_smem + plan_grid_acc_word(E, C))),
        acc_late(acc_early + plan_grid_acc_words(E)) {}
};

// What the steps of a block read: its place in the plan. Grid shape (p.cluster == 0): block b
// owns segment b of G. Cluster shape: p.cluster segments, one per block of a cluster (1-D: b
// mod segs is the rank in it); the clusters are the replicas.
struct GridBlock {
  int E, tid, warp, lane, b, G;
  bool grid_exchange, cluster_exchange;
  int segs, seg, replicas, replica;
  int64_t begin;       // the segment's first entry
  int n_local, slot0;  // entries in the segment; chunk c of this lane is slot slot0 + 32 c
  unsigned own;        // bit c: this replica places chunk c (q = warp C + c, q mod replicas)
};

// h to zero (whole rows, padding included: one plain loop) and the block's id counts; cluster
// shape: the exchange's mbarrier set up and the two sums zeroed, then a CB arrive.
template <int C>
__device__ __forceinline__ void zero_counts(const GridBlock& k) {
  const GridSmem<C> m(k.E);
  int4* h4 = reinterpret_cast<int4*>(m.h);
#pragma unroll 1
  for (int q = k.tid; q < k.E * kGridHStride / 4; q += kGridThreads) h4[q] = make_int4(0, 0, 0, 0);
  if (k.tid == 0) grid_s_invalid = grid_s_bad = 0;
#ifdef ARGON_PLAN_CLUSTERS
  if (k.cluster_exchange) {
    if (k.tid == 0) {
      exchange_barrier_init(&grid_s_exchange_bar, (k.segs - 1) * plan_grid_send_bytes(k.E));
    }
    if (k.tid < 2 * plan_grid_acc_words(k.E) / 4) {  // both sums, adjacent, as int4 (<= 256)
      reinterpret_cast<int4*>(m.acc_early)[k.tid] = make_int4(0, 0, 0, 0);
      release_zeros_to_peers_adds();
    }
    cluster_arrive_relaxed();
  }
#endif
}

// 1. The next kernel of the stream may start now (if launched so). With dependent launch
//    (p.pdl) the block zeroes while the previous kernel may still run, then waits for it;
//    otherwise it zeroes while the loads fly.
template <int C, typename Id>
__device__ __forceinline__ void load_entries(const GridBlock& k, const PlanParams& p, int* key,
                                             float* wv, int& bad) {
  let_dependents_start();
  if (p.pdl) {
    zero_counts<C>(k);
    wait_for_prerequisites();
  }
  const ChunkLoads<C> loads = issue_chunk_loads<C, Id>(p, k.begin, k.slot0, k.n_local, k.own);
  if (!p.pdl) zero_counts<C>(k);
  chunk_keys_and_weights<C>(p, loads, k.E + 1, key, wv, bad);
  __syncthreads();
}

// 2. The ballots that rank within a chunk wait for step 4: only the counts stand between the
//    loads and the exchange.
template <int C>
__device__ __forceinline__ void count_entries(const GridBlock& k, const int* key, int* rank,
                                              int bad) {
  const GridSmem<C> m(k.E);
  int invalid = 0;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const bool valid = key[c] < k.E;
    invalid += key[c] == k.E;
    unsigned* h = h_pair(m.h, key[c], k.warp);
    if ((k.own >> c) & 1u) {  // the same for the whole warp
      __syncwarp();           // the earlier chunks' atomics are visible to every lane
      rank[c] = valid ? h_count(*h, k.warp) : 0;
      __syncwarp();           // every lane has read h before this chunk adds to it
    }
    if (valid) atomicAdd(h, h_one(k.warp));
  }
  invalid = warp_sum(invalid);
  bad = warp_sum(bad);
  if (k.lane == 0 && invalid != 0) atomicAdd(&grid_s_invalid, invalid);
  if (k.lane == 0 && bad != 0) atomicAdd(&grid_s_bad, bad);
  __syncthreads();
}

// 3. Thread e scans its h row (two int4 of u16 pairs, in warp order); the block's counts go to
//    column b of the workspace table in the grid shape.
template <int C>
__device__ __forceinline__ void scan_warp_counts(const GridBlock& k, const PlanParams& p) {
  const int E = k.E;
  const GridSmem<C> m(E);
  int* ws_cnt = p.block_hist + plan_grid_totals_row(E);  // [E + 2][G]
#pragma unroll 1
  for (int e = k.tid; e < E; e += kGridThreads) {
    uint4* row = reinterpret_cast<uint4*>(m.h + e * kGridHStride);
    uint4 v[kGridHWords / 4];
#pragma unroll
    for (int j = 0; j < kGridHWords / 4; ++j) v[j] = row[j];
    int run = 0;
    const auto pair_prefix = [&run](unsigned& pair) {  // (lo, hi) becomes (run, run + lo)
      const int lo = static_cast<int>(pair & 0xffffu), hi = static_cast<int>(pair >> 16);
      pair = static_cast<unsigned>(run) | (static_cast<unsigned>(run + lo) << 16);
      run += lo + hi;
    };
#pragma unroll
    for (int j = 0; j < kGridHWords / 4; ++j) {
      pair_prefix(v[j].x);
      pair_prefix(v[j].y);
      pair_prefix(v[j].z);
      pair_prefix(v[j].w);
    }
#pragma unroll
    for (int j = 0; j < kGridHWords / 4; ++j) row[j] = v[j];
    if (k.cluster_exchange) {
      m.cnt16()[e] = static_cast<unsigned short>(run);
    } else {
      m.cnt[e] = run;
    }
    if (k.grid_exchange) ws_cnt[int64_t{e} * k.G + k.b] = run;
  }
  if (k.tid == 0) {
    if (k.grid_exchange) {
      ws_cnt[int64_t{E} * k.G + k.b] = grid_s_invalid;
      ws_cnt[int64_t{E + 1} * k.G + k.b] = grid_s_bad;
    } else if (k.cluster_exchange) {
      m.cnt16()[E] = static_cast<unsigned short>(grid_s_invalid);
      m.cnt16()[E + 1] = static_cast<unsigned short>(grid_s_bad);
    } else {
      m.cnt[E] = grid_s_invalid;
      m.cnt[E + 1] = grid_s_bad;
    }
  }
}

// Grid shape, between the grid barriers: a segment of lanes per table row (a power of two,
// four blocks per lane) scans the row in place and writes its total.
__device__ __forceinline__ void scan_table_rows(const GridBlock& k, const PlanParams& p) {
  const int E = k.E, G = k.G;
  int* ws_cnt = p.block_hist + plan_grid_totals_row(E);
  const int lanes = min(32, 1 << (32 - __clz(max(1, (G + 3) / 4) - 1)));
  const int cols_per_warp = 32 / lanes, sub = k.lane & (lanes - 1);
#pragma unroll 1
  for (int col0 = (k.b * kGridWarps + k.warp) * cols_per_warp; col0 < E + 2;
       col0 += G * kGridWarps * cols_per_warp) {
    const int col = col0 + k.lane / lanes;
    int* cnt_row = ws_cnt + int64_t{col} * G;
    int v[4];
    int sum = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[j] = col < E + 2 && 4 * sub + j < G ? __ldcg(cnt_row + 4 * sub + j) : 0;
      sum += v[j];
    }
    int total = 0;
    int run = warp_segment_exclusive_scan(sum, lanes, total);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (col < E + 2 && 4 * sub + j < G) cnt_row[4 * sub + j] = run;
      run += v[j];
    }
    if (col < E + 2 && sub == 0) p.block_hist[col] = total;  // the totals row
  }
}

// 4. The ranks are taken while the exchange is under way: after the first grid barrier, or
//    between sending the counts and waiting for the peers'. Then threads below quads get the
//    totals (tq) and this block's prefix (bq) of columns 4 tid .. 4 tid + 3.
template <int C>
__device__ __forceinline__ void exchange_and_rank(const GridBlock& k, const PlanParams& p,
                                                  const int* key, int* rank, int* tq, int* bq) {
  const int E = k.E, tid = k.tid, quads = plan_grid_totals_row(E) / 4;
  const GridSmem<C> m(E);
  if (k.grid_exchange) {
    cooperative_groups::this_grid().sync();  // also a block barrier
  } else if (k.cluster_exchange) {
#ifdef ARGON_PLAN_CLUSTERS
    fence_shared_for_bulk_copies();  // this thread's part of the counts, before the adds
    __syncthreads();
    cluster_wait();  // every peer's mbarrier is set up and its sums zeroed
    if (k.lane == 0 && k.warp < k.segs - 1) {  // a peer per warp: a warp's bulk ops serialise
      const int peer = k.seg + 1 + k.warp < k.segs ? k.seg + 1 + k.warp
                                                   : k.seg + 1 + k.warp - k.segs;
      acquire_peers_zeros_for_adds();
      cluster_bulk_add(k.seg < peer ? m.acc_early : m.acc_late, m.cnt16(),
                       plan_grid_send_bytes(E), &grid_s_exchange_bar, peer);
    }
#else
    __trap();  // no cluster code in this build: the launcher never picks this shape for it
#endif
  } else {
    __syncthreads();
  }
  // The key's entries in the block's earlier warps (h, scanned), in the warp's earlier chunks
  // (step 2), on lower lanes of the chunk. One copy for every shape (a copy per shape made the
  // kernel 17-63 % longer).
  const unsigned lanes_below = (1u << k.lane) - 1u;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    if (!((k.own >> c) & 1u)) continue;  // the same for the whole warp
    const unsigned peers = warp_peers(key[c]);
    if (key[c] < E) {
      rank[c] += h_count(*h_pair(m.h, key[c], k.warp), k.warp) + __popc(peers & lanes_below);
    }
  }
  if (k.grid_exchange) {
    scan_table_rows(k, p);
    cooperative_groups::this_grid().sync();
  } else if (k.cluster_exchange) {
#ifdef ARGON_PLAN_CLUSTERS
    // Only the readers of the sums wait for them; the exit's CB completes only after every
    // block's readers saw every add into it land.
    if (tid < quads) exchange_barrier_wait(&grid_s_exchange_bar);
    cluster_arrive_relaxed();
#endif
  }
  if (tid < quads && !k.cluster_exchange) {
    if (k.grid_exchange) {
      const int4 t4 = __ldcg(reinterpret_cast<const int4*>(p.block_hist) + tid);
      tq[0] = t4.x, tq[1] = t4.y, tq[2] = t4.z, tq[3] = t4.w;
      const int* ws_cnt = p.block_hist + plan_grid_totals_row(E);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (4 * tid + j < E + 2) bq[j] = __ldcg(ws_cnt + int64_t{4 * tid + j} * k.G + k.b);
      }
    } else {  // one segment
      const int4 t4 = reinterpret_cast<const int4*>(m.cnt)[tid];
      tq[0] = t4.x, tq[1] = t4.y, tq[2] = t4.z, tq[3] = t4.w;
    }
  }
#ifdef ARGON_PLAN_CLUSTERS
  // Cluster shape: this block's prefix is the earlier segments' sum; the totals add the later
  // ones' and its own counts.
  if (k.cluster_exchange && tid < quads) {
    const uint2 early = reinterpret_cast<const uint2*>(m.acc_early)[tid];
    const uint2 late = reinterpret_cast<const uint2*>(m.acc_late)[tid];
    const uint2 own = reinterpret_cast<const uint2*>(m.cnt16())[tid];
    const uint32_t ew[2] = {early.x, early.y}, lw[2] = {late.x, late.y}, ow[2] = {own.x, own.y};
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      bq[2 * j] = static_cast<int>(ew[j] & 0xffffu);
      bq[2 * j + 1] = static_cast<int>(ew[j] >> 16);
      tq[2 * j] = bq[2 * j] + static_cast<int>((lw[j] & 0xffffu) + (ow[j] & 0xffffu));
      tq[2 * j + 1] = bq[2 * j + 1] + static_cast<int>((lw[j] >> 16) + (ow[j] >> 16));
    }
  }
#endif
}

// 5. Staged, the block's own counts are scanned alongside the padded totals (the high word of
//    one 64-bit scan) for each expert's first slot in block-sorted order; else a 32-bit scan.
template <int C>
__device__ __forceinline__ void padded_offsets(const GridBlock& k, const PlanParams& p,
                                               const int* tq, const int* bq, int& n_rows,
                                               int& n_staged) {
  const int E = k.E, tid = k.tid, quads = plan_grid_totals_row(E) / 4;
  const GridSmem<C> m(E);
  const bool staged = C >= 2 && k.grid_exchange;
  const int e0 = 4 * tid;
  int lq[4] = {0, 0, 0, 0};
  if (staged && tid < quads) {
    const int4 l4 = reinterpret_cast<const int4*>(m.cnt)[tid];
    lq[0] = l4.x, lq[1] = l4.y, lq[2] = l4.z, lq[3] = l4.w;
  }
  int padded = 0, local = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if (e0 + j < E) {
      padded += round_up_pow2(tq[j], p.tm);
      local += lq[j];
    }
  }
  int off = 0, loc = 0;
  if (staged) {  // padded sums stay below 2^31: the low word never carries
    long long total = 0;
    const long long both = block_exclusive_scan_1bar(
        padded + (static_cast<long long>(local) << 32), grid_s_warp, total);
    n_rows = static_cast<int>(total & 0xffffffffll);
    n_staged = static_cast<int>(total >> 32);
    off = static_cast<int>(both & 0xffffffffll);
    loc = static_cast<int>(both >> 32);
  } else {
    off = block_exclusive_scan_1bar(padded, reinterpret_cast<int*>(grid_s_warp), n_rows);
  }
  const bool writer = k.b == 0;  // every block has the same values
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int e = e0 + j;
    if (e < E) {
      m.off[e] = off;
      m.base[e] = off + bq[j];
      m.pad[e] = off + tq[j];
      m.loc[e] = loc;
      loc += lq[j];
      if (writer) {
        p.counts[e] = tq[j];
        p.offsets[e] = off;
      }
      off += round_up_pow2(tq[j], p.tm);
    } else if (writer && e == E) {
      p.meta[ARGON_META_N_VALID] = p.n - tq[j];
    } else if (writer && e == E + 1) {
      p.meta[ARGON_META_N_BAD_IDS] = tq[j];
    }
  }
  if (tid == 0) {
    m.off[E] = n_rows;
    if (writer) {
      p.offsets[E] = n_rows;
      p.meta[ARGON_META_N_ROWS] = n_rows;
      p.meta[ARGON_META_N_TILES] = n_rows >> (__ffs(p.tm) - 1);
    }
  }
  __syncthreads();
}

// 6. Staged (h is free now): each entry to shared memory in block-sorted order, then the block
//    stores them in that order.
template <int C>
__device__ __forceinline__ void place_entries(const GridBlock& k, const PlanParams& p,
                                              const int* key, const float* wv, const int* rank,
                                              int n_staged) {
  constexpr int S = kGridThreads * C;
  const GridSmem<C> m(k.E);
  const bool staged = C >= 2 && k.grid_exchange;
  int* s_row = m.h;
  int* s_tok = m.h + S;
  float* s_w = reinterpret_cast<float*>(m.h + 2 * S);
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int slot = k.slot0 + 32 * c;
    if (((k.own >> c) & 1u) && slot < k.n_local) {  // staged: one replica, owning every chunk
      const int64_t i = k.begin + slot;
      int row = -1;
      if (key[c] < k.E) {
        row = m.base[key[c]] + rank[c];
        const int token = static_cast<int>(static_cast<uint32_t>(i) / static_cast<uint32_t>(p.K));
        if (staged) {
          const int at = m.loc[key[c]] + rank[c];
          s_row[at] = row;
          s_tok[at] = token;
          s_w[at] = wv[c];
        } else {
          p.sorted_token[row] = token;
          p.sorted_weight[row] = wv[c];
        }
      }
      p.pos[i] = row;
    }
  }
  if (staged) {
    __syncthreads();
#pragma unroll 1
    for (int at = k.tid; at < n_staged; at += kGridThreads) {
      const int row = s_row[at];
      p.sorted_token[row] = s_tok[at];
      p.sorted_weight[row] = s_w[at];
    }
  }
}

template <int C, typename Id>
__global__ void __launch_bounds__(kGridThreads, 1) plan_grid_kernel(PlanParams p) {
  static_assert(C >= 1 && C <= kGridMaxChunks, "chunks per warp");
  constexpr int S = kGridThreads * C;
  // The parameters span three constant-cache lines: touching one field of each here overlaps
  // their misses instead of stalling later steps.
  asm volatile("" ::"l"(p.ids), "r"(p.cluster), "l"(p.block_hist));
  const int E = p.E;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int b = blockIdx.x, G = gridDim.x;
  const bool grid_exchange = p.cluster == 0;
  const int segs = grid_exchange ? G : p.cluster;
  const int seg = grid_exchange ? b : b % segs;
  const int replicas = grid_exchange ? 1 : G / segs;
  const int replica = grid_exchange ? 0 : b / segs;
  const int64_t begin = int64_t{seg} * S;
  const int n_local = static_cast<int>(max(int64_t{0}, min(int64_t{S}, int64_t{p.n} - begin)));
  unsigned own = 0;  // only the chunks a replica places need ranks and weights
#pragma unroll
  for (int c = 0; c < C; ++c) own |= ((warp * C + c) % replicas == replica ? 1u : 0u) << c;
  const GridBlock k{E,    tid, warp,     lane,    b,     G,       grid_exchange,
                    !grid_exchange && segs > 1, segs, seg, replicas, replica, begin, n_local,
                    warp * 32 * C + lane,       own};
  int key[C], rank[C], bad = 0, tq[4] = {0, 0, 0, 0}, bq[4] = {0, 0, 0, 0};
  int n_rows = 0, n_staged = 0;
  float wv[C];
  load_entries<C, Id>(k, p, key, wv, bad);
  count_entries<C>(k, key, rank, bad);
  scan_warp_counts<C>(k, p);
  exchange_and_rank<C>(k, p, key, rank, tq, bq);
  padded_offsets<C>(k, p, tq, bq, n_rows, n_staged);
  place_entries<C>(k, p, key, wv, rank, n_staged);
  // 7. Expert e by grid warp e mod (grid warps), the warps numbered across blocks first so
  //    that the experts spread over the SMs.
  const GridSmem<C> m(E);
  write_tiles_and_padding(
      p, m.off, [&](int e) { return m.pad[e]; }, n_rows, __ffs(p.tm) - 1, warp * G + b,
      G * kGridWarps, b * kGridThreads + tid, G * kGridThreads);
#ifdef ARGON_PLAN_CLUSTERS
  if (k.cluster_exchange) cluster_wait();  // the peers' adds may read the counts until then
#endif
}

}  // namespace argon::cuda
