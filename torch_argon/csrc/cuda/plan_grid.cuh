// moe_plan in ONE launch, 512-thread blocks, in one of two shapes the launcher picks:
//
//   * Cluster shape (small and medium plans): the plan is cut into p.cluster segments (1, or
//     up to 16 on sm_90+), one per block of a thread-block cluster, and each block of a
//     cluster adds its per-expert counts (as u16 pairs) into one of two sums in every other
//     block's shared memory, the earlier segments' or the later segments' (bulk adds, which
//     signal an mbarrier there as they land). The grid holds several such
//     clusters, the replicas: each counts every entry, but ranks and writes only its share, so
//     the writes spread over many SMs.
//   * Grid shape (large plans, cooperative launch): one segment per block, one block per SM,
//     up to 128 blocks; the blocks exchange their counts through a global workspace across
//     two grid barriers (cooperative_groups grid sync).
//
// Algorithm. Segment s owns the entries [s * S, (s + 1) * S), S = 512 * C (C, the chunks per
// warp, is a template parameter, as is the ids' type: the instruction cache holds a kernel of
// one C much better than one loop over up to eight); warp w owns C consecutive chunks of 32
// consecutive entries, so (segment, warp, chunk, lane) is flat-index order. The row of entry
// i, expert e, is
//     offsets[e]                      exclusive scan of the padded totals over experts
//   + (entries of e in segments < s)  exclusive scan over segments of their counts
//   + (entries of e in warps < w)     scan of the block's per-warp count table h[e][w]
//   + (entries of e before i in w)    h[e][w] before i's chunk + lanes below i with its key
// where every valid entry adds one to h[e][w] (a shared atomic), chunk by chunk, and a lane of a
// chunk the block places (another replica places the others) reads h[e][w] before its chunk
// adds (h holds u16 counts: warps 2i and 2i + 1 share a word); a lane's peers (the lanes of its
// chunk with the same key) come from one ballot per key bit, after the counts are scanned and
// sent (the ballots wait behind the exchange's barrier, not in front of it). Keys, weights and
// ranks stay in registers. That is a stable rank without a sort and without global atomics;
// integer sums are exact, so the bytes are the same on every run.
// Ids that are -1 or out of range get key E (counted, not ranked; out-of-range ones also for
// meta); slots past the last entry get key E + 1 and touch nothing.
//
// Steps (B = block barrier, CB = cluster barrier, GB = grid barrier):
//   load keys and weights (all C chunks in flight), zero h meanwhile (with
//   dependent launch: zero h, wait for the previous kernel, then load); cluster shape: set
//   up the exchange's mbarrier, zero the two sums and arrive at a cluster barrier
//                                                                           B / CB arrive
//   counts: shared atomics into h, chunk by chunk; before each chunk this replica places,
//   its lanes read h[e][w] (the warp's earlier entries of e)                B
//   scan of h per expert (one thread, two int4); the block's counts (columns E, E + 1:
//   invalid and out-of-range ids) go to shared memory, and in the grid shape to column b of
//   the workspace table [E + 2][G]; cluster shape: once every mbarrier is set up, the block
//   adds its counts into each peer's earlier or later sum           B, CB wait / B / GB
//   ranks of the placed chunks (ballots; the rank sums from the scanned h)
//   cluster shape: the threads that read the sums wait for the peers' adds (mbarrier);
//   CB arrive. Grid shape: one warp segment per table row scans the G block counts in place
//   (exclusive) and writes the row total                                   mbarrier / GB
//   per four experts (thread order = expert order): totals and this block's prefix (from the
//   two sums and its own counts, or from the workspace); padded offsets by a one-barrier
//   scan                                                                    B
//   placement: the entries of chunk q (q = warp * C + c) by replica q mod replicas; in the grid
//   shape with C >= 2, staged: each entry goes to shared memory in block-sorted order (by
//   expert, then rank), and the block writes from there, so entries of one expert, which have
//   consecutive rows, are written by neighbouring lanes and their stores coalesce
//   tiles, per expert: the warp of expert e (experts dealt over the grid's warps) writes the
//   tile_expert entries of e's tiles and e's padding rows, lanes side by side, with no search
//   over the offsets; then the grid writes the tiles and rows past the last expert's.
// Block 0 writes counts, offsets and meta. Every output element is written on every call.
// Cluster shape: a block exits only after a cluster barrier (CB wait), whose arrivals each
// follow a block's receipt of every add into it, so no add still reads a block that exited.
// Dependent launch (cluster shape on sm_90+, p.pdl): the kernel lets the next kernel of the
// stream start at once, and, itself launched early, zeroes h before it waits for the previous
// kernel (griddepcontrol.wait), ahead of its first global load; the grid shape's cooperative
// launch is not launched so. The launcher keeps the cluster shape to one block per SM (its
// shared-memory request, one_block_per_sm_smem in plan_cuda.cu): launched early, two blocks to
// an SM had run the plan on half its SMs.
//
// Where the time goes (H200, E = 512, K = 10, uniform), measured before each replica ranked
// only the chunks it places, before the loads of all chunks were in flight, before clusters
// of 8 took T <= 2048, and while the blocks loaded the peers' counts from the peers' shared
// memory, before the bulk copies (bench/plan_cuda_notes.md has what each of those saved). The
// kernel alone under graph replay (lab harness, 20 launches per graph; a tiny kernel costs
// 1.0 us): 3.2 us with no entries, 4.2 at T = 16 (one segment), 5.4 at T = 128 (clusters of
// 4), 5.6 at T = 256 (of 8), 6.2 at T = 512, 7.0 at T = 1024, 7.8 at T = 2048 and 9.4 at
// T = 4096 (of 16, 6 replicas); the grid shape 9.4 at T = 1024, 10.3 at T = 4096, 11.2 at
// T = 8192, 12.8 at T = 16384.
// Per step (clock64 at the barriers, thread 0, median over blocks; cycles at 1.97 GHz): with
// no entries ~1.2K prologue and zeroing, ~0.9K ranks, ~0.8K h scan, ~1.25K offsets, ~0.4K
// placement; loads and ranks ~0.5K and ~0.65K more per chunk; a cluster barrier ~1.0-1.3K,
// then the peers' counts 1.75K for 8 peers (2.2K as int4 through generic pointers); the grid
// exchange 5.5-6.9K (two grid barriers). On session 10's kernel at T = 4096 (clusters of 16,
// C = 5): loads 2.0K, ranks 1.3K, h scan 0.9K, cluster barrier 1.1K, the peers' counts 2.6K,
// offsets scan and writes 1.4K, placement 0.8K, tiles 2.9K; with no output stores at all the
// kernel alone is 1.3-1.6 us faster, with the peers' counts read locally 0.75
// (bench/plan_cuda_notes.md, session 10, which also has the exchange through st.async and
// mbarriers that lost; session 11 has a two-level exchange that lost too). Session 16, on the
// bulk-copy kernel at T = 4096: without the placement's two scattered stores the kernel alone
// is 1.1 us (uniform) / 0.7 (Zipf) faster, and as fast with the same stores sent to
// consecutive addresses: the cost is the L2 sector writes, one per entry and array. Session
// 17, on the bulk-add kernel at T = 4096 (kernel alone 7.97 us, uniform): loads 2.2K, counts
// 1.0K, h scan 0.85K, exchange 0.8K (0.2K to the end of its cluster wait, the sends 0.6K; 1.6K
// while warp 0 issued all of them), offsets 3.2K (of which the ranks and the wait for the
// peers' adds 1.5K, the sums' reads 0.3K, the scan 0.8K), placement 0.75K, tiles 1.8K, exit
// 0.74K.
// Nsight Compute: 7-13 % of issue slots busy, 10-18 cycles per instruction per warp: chains of
// latencies (barriers, shared-memory round trips, loads), not throughput. Distributed shared
// memory moved about 8 bytes per cycle per SM in this exchange. Measured and slower: pushing
// counts into the peers (remote stores), spreading the peer loads over all warps, exchanging
// through L2 behind the cluster barrier (its release half is a MEMBAR.GPU), 1024-thread blocks
// (+1.3 us with no entries); each replica writing the rows of its experts (e mod replicas),
// staged for coalesced stores, +0.5 to +2.7 us (every chunk's weights and ranks, and the
// staging pass, cost more than the coalescing saves); the same (within 0.05 us): computing
// every chunk's ballots before the rank chain.
// Code size matters: with C a runtime value (58 KB of code) the kernel took 4.75 us with no
// entries, against 4.0 with one C compiled (22 KB).
//
// Limits (the launcher checks them and otherwise takes the portable kernels): E <= 1022 (keys
// are 10 bits; E + 2 columns fit four per thread); C <= 8; grid shape: G <= 128 resident
// blocks; cluster shape: sm_90+, p.cluster <= 16 (above 8 where the device allows non-portable
// cluster sizes); a block's count of one expert is at most S <= 4096, so a sum of up to 15
// peers' counts stays below 2^16 (the packed u16 pairs never carry); shared memory
// plan_grid_smem_bytes(E, C, cluster).
#pragma once
#include <cooperative_groups.h>

#include "block_scan.cuh"
#include "plan_common.cuh"

namespace argon::cuda {

constexpr int kGridThreads = 512;          // threads per block (16 warps)
constexpr int kGridWarps = kGridThreads / 32;
constexpr int kGridMaxChunks = 8;          // chunks per warp, held in registers
// h row of one expert: the warps' counts as u16 pairs (a count is at most S <= 4096, so no
// carry crosses the halves), then 4 words of padding, so that int4 column scans hit every bank
// once per quarter warp. Against one word per warp (20-word rows), H200, same-run A/B,
// bit-exact, plans back to back: -0.13 us uniform / -0.08 Zipf at T = 4096, -0.03 to -0.16 at
// T = 128-8192 but for T = 1024 (+0.07 / +0.12) and 16384 (+0.01 / +0.05); zeroing only the
// 16 count words of the old rows was slower everywhere (bench/plan_cuda_notes.md, session 23).
constexpr int kGridHWords = kGridWarps / 2;
constexpr int kGridHStride = kGridHWords + 4;
constexpr int kGridKeyBits = 10;           // ballots per chunk: keys up to E + 1 < 1024
constexpr int kGridMaxBlocks = 128;        // segments: four per lane of one warp in step 4
constexpr int kGridMaxClusterSegments = 16;  // cluster shape: 16 is a non-portable size (the
                                            // launcher asks the device whether it runs it)

// The workspace of a plan of several segments, in ints: the plan's totals per column (a row
// padded to whole int4), then the [E + 2][blocks] table of block counts.
__host__ __device__ inline int plan_grid_totals_row(int E) { return (E + 2 + 3) & ~3; }
inline int64_t plan_grid_workspace_ints(int E, int blocks) {
  return plan_grid_totals_row(E) + int64_t{E + 2} * blocks;
}

// Shared memory: h (reused to stage the placement: row, token, weight per entry), the block's
// counts (a totals row), four per-expert arrays (bases, padding starts, local starts,
// offsets + 1), then (cluster shape) two accumulators into which the peers' bulk adds of their
// u16 counts land: the earlier segments' sum and the later segments' sum.
__host__ __device__ inline int plan_grid_h_words(int E, int C) {
  return E * kGridHStride > 3 * kGridThreads * C ? E * kGridHStride : 3 * kGridThreads * C;
}
// h, and so s_cnt after it (a bulk add's source), end on a 16-byte boundary: bulk copies need
// 16-byte aligned addresses.
static_assert(kGridHStride % 4 == 0 && (3 * kGridThreads) % 4 == 0, "h must span whole int4");
// A block's u16 counts, as the peers receive them: whole 16-byte pieces (8 columns each).
__host__ __device__ inline int plan_grid_send_bytes(int E) { return (E + 2 + 7) / 8 * 16; }
__host__ __device__ inline int plan_grid_acc_words(int E) { return plan_grid_send_bytes(E) / 4; }
__host__ __device__ inline int plan_grid_acc_word(int E, int C) {  // 16-byte aligned
  return (plan_grid_h_words(E, C) + plan_grid_totals_row(E) + 4 * E + 1 + 3) & ~3;
}
// `cluster`: the launch's segments per cluster (0: the grid shape, 1: one segment); only
// clusters of two or more exchange, so only they have the accumulators.
inline size_t plan_grid_smem_bytes(int E, int C, int cluster) {
  const int accumulators = cluster >= 2 ? 2 : 0;
  return (size_t(plan_grid_acc_word(E, C)) + size_t(accumulators) * plan_grid_acc_words(E)) *
         sizeof(int);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define ARGON_PLAN_CLUSTERS 1
// Cluster barrier halves: arrive only signals progress (relaxed: the counts travel by bulk
// adds, ordered by their mbarrier; the fences below order what the adds depend on); wait
// returns once every thread of the cluster arrived.
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// The cluster exchange's completion: an mbarrier of one arrival (this thread's, here) that
// also waits for `bytes` of bulk adds to land. The fence makes the initialisation visible to
// the cluster's blocks, which signal it, once they have passed a cluster barrier after it.
__device__ __forceinline__ void exchange_barrier_init(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(bar)) : "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               ::"r"(shared_address(bar)), "r"(bytes) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// Returns once the barrier's first phase is complete: every expected byte has landed.
__device__ __forceinline__ void exchange_barrier_wait(uint64_t* bar) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;"
        " selp.u32 %0, 1, 0, p; }"
        : "=r"(done) : "r"(shared_address(bar)) : "memory");
  }
}
// Adds `bytes` (a multiple of 16) of u32 words from this block's shared memory at `src` into
// the words at the address of `dst` in block `rank` of the cluster, by the bulk-copy engine,
// and signals `bar` there (at the address of this block's `bar`) with the bytes once they
// have landed. Each word's add is atomic (relaxed), so adds from several blocks into one
// accumulator give the same sum in any order.
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
// Orders this thread's shared-memory writes before later bulk adds of this block that read
// them.
__device__ __forceinline__ void fence_shared_for_bulk_copies() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// The accumulators' zeros must be in place before any peer's add reaches them: the writers
// release them to the async proxy ahead of their (relaxed) cluster arrive, and the issuers of
// the adds acquire them after their cluster wait. The restricted forms (PTX ISA 8.6, CUDA
// 12.8) cover shared memory only; the general fence and a release arrive would each cost a
// MEMBAR.GPU, which older compilers still get.
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

// h's cell of expert e for a warp: the word of its warp pair, and its half of that word.
__device__ __forceinline__ unsigned* h_pair(int* s_h, int e, int warp) {
  return reinterpret_cast<unsigned*>(s_h) + e * kGridHStride + (warp >> 1);
}
__device__ __forceinline__ int h_count(unsigned pair, int warp) {
  return static_cast<int>((pair >> ((warp & 1) * 16)) & 0xffffu);
}
__device__ __forceinline__ unsigned h_one(int warp) { return 1u << ((warp & 1) * 16); }

// Id: the ids' type (int64_t or int32_t; p.ids_64 says which the launcher picked this for).
template <int C, typename Id>
__global__ void __launch_bounds__(kGridThreads, 1) plan_grid_kernel(PlanParams p) {
  static_assert(C >= 1 && C <= kGridMaxChunks, "chunks per warp");
  constexpr int S = kGridThreads * C;          // entries per segment
  extern __shared__ __align__(16) int smem_words[];
  __shared__ long long s_warp[32];
  __shared__ int s_invalid, s_bad;
  __shared__ uint64_t s_exchange_bar;  // cluster shape: the peers' counts have landed
  // The parameters span three constant-cache lines; reading one field of each here lets their
  // misses overlap at the start instead of stalling later steps (lab: -0.05 us at T <= 128).
  asm volatile("" ::"l"(p.ids), "r"(p.cluster), "l"(p.meta));
  const int E = p.E;
  int* s_h = smem_words;  // [E][kGridHStride] per-warp counts (u16) of each expert; later the
  int* s_cnt = s_h + plan_grid_h_words(E, C);     // [totals row] block counts (in the cluster
                                                  // shape as u16, copied to the peers)
  int* s_base = s_cnt + plan_grid_totals_row(E);  // [E] row of this block's first entry of e
  int* s_pad = s_base + E;                        // [E] first padding row of e
  int* s_loc = s_pad + E;                         // [E] first block-sorted slot of e (staged)
  int* s_off = s_loc + E;                         // [E + 1] padded offsets
  // Cluster shape: the sum of the earlier segments' u16 counts, then that of the later
  // segments' (the peers' bulk adds land there).
  uint32_t* s_acc_early = reinterpret_cast<uint32_t*>(smem_words + plan_grid_acc_word(E, C));
  uint32_t* s_acc_late = s_acc_early + plan_grid_acc_words(E);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int b = blockIdx.x, G = gridDim.x;
  // Segments exchanged over the grid (p.cluster == 0): block b owns segment b (G segments, all
  // resident: cooperative launch). Else p.cluster segments, one per block of a cluster, and the
  // G / p.cluster clusters are replicas: each counts every entry, ranks and writes its share.
  const bool grid_exchange = p.cluster == 0;
  const int segs = grid_exchange ? G : p.cluster;
  const int seg = grid_exchange ? b : b % segs;       // 1-D clusters: the rank in the cluster
  const int replicas = grid_exchange ? 1 : G / segs;
  const int replica = grid_exchange ? 0 : b / segs;
  const bool cluster_exchange = !grid_exchange && segs > 1;
  // A block's count of one expert is at most S <= 4096 entries: u16 halves the bytes the
  // cluster's blocks exchange (distributed shared memory moved ~8 bytes per cycle per SM here).
  unsigned short* s_cnt16 = reinterpret_cast<unsigned short*>(s_cnt);
  const int64_t begin = int64_t{seg} * S;
  const int n_local = static_cast<int>(max(int64_t{0}, min(int64_t{S}, int64_t{p.n} - begin)));
  const int slot0 = warp * 32 * C + lane;  // chunk c of this lane: slot0 + 32 * c
  const int kAbsent = E + 1;
  // Chunk q = warp * C + c of the segment is placed by replica q mod replicas: bit c of `own`.
  // Only those chunks need ranks and weights here; the others are only counted.
  unsigned own = 0;
#pragma unroll
  for (int c = 0; c < C; ++c) own |= ((warp * C + c) % replicas == replica ? 1u : 0u) << c;

  // 1. Keys and weights into registers (the loads of all C chunks in flight); h is zeroed
  //    while the loads are in flight. Launched with programmatic dependent launch
  //    (p.pdl), h is zeroed first, while the previous kernel may still run, and the loads wait
  //    for it. Either way the next kernel of the stream may start now, if launched so.
  let_dependents_start();
  const auto zero_h = [&] {
    const int words = E * kGridHStride;  // a multiple of 4 (with the padding: one plain loop)
    int4* h4 = reinterpret_cast<int4*>(s_h);
#pragma unroll 1
    for (int q = tid; q < words / 4; q += kGridThreads) h4[q] = make_int4(0, 0, 0, 0);
    if (tid == 0) s_invalid = s_bad = 0;
#ifdef ARGON_PLAN_CLUSTERS
    if (cluster_exchange) {  // the exchange barrier and zeroed sums, before any peer adds
      if (tid == 0) {
        exchange_barrier_init(&s_exchange_bar, (segs - 1) * plan_grid_send_bytes(E));
      }
      if (tid < 2 * plan_grid_acc_words(E) / 4) {  // both sums, adjacent, as int4 (<= 256)
        reinterpret_cast<int4*>(s_acc_early)[tid] = make_int4(0, 0, 0, 0);
        release_zeros_to_peers_adds();
      }
      cluster_arrive_relaxed();
    }
#endif
  };
  int key[C];
  float wv[C];
  int bad = 0;
  if (p.pdl) {
    zero_h();
    wait_for_prerequisites();
  }
  const ChunkLoads<C> loads = issue_chunk_loads<C, Id>(p, begin, slot0, 0, C, n_local, own);
  if (!p.pdl) zero_h();
  chunk_keys_and_weights<C>(p, loads, kAbsent, key, wv, bad);
  __syncthreads();

  // 2. Count: every valid entry adds one to h[e][warp] (a shared atomic; integer sums, so the same
  //    bytes on every run). Before a chunk this replica places (bit c of `own`) is counted,
  //    each lane keeps h[e][warp] of its key: the entries of e in the warp's earlier chunks.
  //    The ballots that rank inside a chunk come later, behind the exchange's barrier (step
  //    4): only the counts are on the way to it.
  int rank[C];
  int invalid = 0;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int k = key[c];
    const bool valid = k < E;
    invalid += k == E;
    unsigned* h = h_pair(s_h, k, warp);
    if ((own >> c) & 1u) {  // the same for the whole warp
      __syncwarp();         // the atomics of earlier chunks are visible to every lane
      rank[c] = valid ? h_count(*h, warp) : 0;
      __syncwarp();         // every lane has read h before this chunk adds to it
    }
    if (valid) atomicAdd(h, h_one(warp));
  }
  invalid = warp_sum(invalid);
  bad = warp_sum(bad);
  if (lane == 0 && invalid != 0) atomicAdd(&s_invalid, invalid);  // integer sums: same bytes
  if (lane == 0 && bad != 0) atomicAdd(&s_bad, bad);              // on every run
  __syncthreads();

  // 3. Column scan (thread e, its h row as two int4 of u16 pairs): h[e][w] becomes the entries
  //    of e in warps before w (at most S <= 4096: each pair stays two u16). The block's counts
  //    (columns E, E + 1: invalid and out-of-range ids) go to column b of the workspace's
  //    count table [E + 2][G], or stay in shared memory.
  const int ws_row = plan_grid_totals_row(E);
  int* ws_tot = p.block_hist;             // [ws_row] plan totals per column
  int* ws_cnt = p.block_hist + ws_row;    // [E + 2][G] block counts, then exclusive prefixes
#pragma unroll 1
  for (int e = tid; e < E; e += kGridThreads) {
    uint4* row = reinterpret_cast<uint4*>(s_h + e * kGridHStride);
    uint4 v[kGridHWords / 4];
#pragma unroll
    for (int j = 0; j < kGridHWords / 4; ++j) v[j] = row[j];
    int run = 0;
    const auto pair_prefix = [&run](unsigned& pair) {  // (lo, hi) becomes (run, run + lo)
      const int lo = static_cast<int>(pair & 0xffffu);
      const int hi = static_cast<int>(pair >> 16);
      pair = static_cast<unsigned>(run) | (static_cast<unsigned>(run + lo) << 16);
      run += lo + hi;
    };
#pragma unroll
    for (int j = 0; j < kGridHWords / 4; ++j) {  // in warp order
      pair_prefix(v[j].x);
      pair_prefix(v[j].y);
      pair_prefix(v[j].z);
      pair_prefix(v[j].w);
    }
#pragma unroll
    for (int j = 0; j < kGridHWords / 4; ++j) row[j] = v[j];
    if (cluster_exchange) {
      s_cnt16[e] = static_cast<unsigned short>(run);
    } else {
      s_cnt[e] = run;
    }
    if (grid_exchange) ws_cnt[int64_t{e} * G + b] = run;
  }
  if (tid == 0) {
    if (grid_exchange) {
      ws_cnt[int64_t{E} * G + b] = s_invalid;
      ws_cnt[int64_t{E + 1} * G + b] = s_bad;
    } else if (cluster_exchange) {
      s_cnt16[E] = static_cast<unsigned short>(s_invalid);
      s_cnt16[E + 1] = static_cast<unsigned short>(s_bad);
    } else {
      s_cnt[E] = s_invalid;
      s_cnt[E + 1] = s_bad;
    }
  }

  // Thread m owns columns 4m .. 4m + 3, so thread order is expert order for the scan in step 5.
  const int quads = ws_row / 4;

  // 4. Per column: the plan's total and the entries in earlier blocks. With several segments,
  //    one warp per column scans its G block counts (a row of the table, a few loads per lane)
  //    between two grid barriers, so each block then loads only what it needs. The ranks are
  //    taken while the exchange is under way: after the first grid barrier, or between sending
  //    the counts and waiting for the peers' (H200, same-run A/B against ranks before the h scan,
  //    bit-exact: plans back to back -0.08 to -0.17 us at T = 128-1024, within 0.1 at
  //    2048-4096, -0.54 at 8192; behind the router top-k -0.1 to -0.3 at T = 128, 512 and
  //    3072, within 0.1 at 1024, 2048 and 4096, -0.5 at 8192; bench/plan_cuda_notes.md).
  if (grid_exchange) {
    cooperative_groups::this_grid().sync();  // also a block barrier
  } else if (cluster_exchange) {
#ifdef ARGON_PLAN_CLUSTERS
    fence_shared_for_bulk_copies();  // this thread's part of s_cnt, before the adds read it
    __syncthreads();                 // h is scanned, s_cnt written
    cluster_wait();  // every block's exchange barrier is initialised, its accumulators zeroed
    // To every peer, lane 0 of one warp each: a warp issues its bulk operations one after
    // another (the instruction takes one lane's operands at a time). Against the lanes of warp
    // 0 (H200, same-run A/B, bit-exact): back to back -0.04 to -0.16 us at T = 128-6144;
    // behind the router top-k -0.01 to -0.13, +0.22 / +0.15 at 2048 (plan_cuda_notes.md, s. 17).
    if (lane == 0 && warp < segs - 1) {
      const int peer = seg + 1 + warp < segs ? seg + 1 + warp : seg + 1 + warp - segs;
      acquire_peers_zeros_for_adds();
      cluster_bulk_add(seg < peer ? s_acc_early : s_acc_late, s_cnt16, plan_grid_send_bytes(E),
                       &s_exchange_bar, peer);
    }
#else
    __trap();  // no cluster code in this build: the launcher never picks this shape for it
#endif
  } else {
    __syncthreads();
  }
  // The rank of each entry this replica places: the entries of its expert in the block's
  // earlier warps (h, scanned), in the warp's earlier chunks (step 2), and in its chunk on lower
  // lanes (peers from one ballot per key bit). One copy for every shape: a copy in each shape's
  // branch, each inlined, made the kernel 17-63 % longer (SASS).
  const unsigned lanes_below = (1u << lane) - 1u;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    if (!((own >> c) & 1u)) continue;  // the same for the whole warp
    const unsigned peers = warp_peers(key[c]);
    if (key[c] < E) {
      rank[c] += h_count(*h_pair(s_h, key[c], warp), warp) + __popc(peers & lanes_below);
    }
  }
  if (grid_exchange) {
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
  } else if (cluster_exchange) {
#ifdef ARGON_PLAN_CLUSTERS
    // Only the threads that read the sums (below) wait for them; the others go on to the
    // offsets scan's block barrier. The exit's cluster barrier still completes only after
    // every block's readers saw every add into it land, so no add reads a block that exited
    // (H200, same-run A/B of the reader-only wait, bit-exact: T = 3072-6144 -0.06 to -0.19 us
    // back to back and behind the router top-k; bench/plan_cuda_notes.md, session 16).
    if (tid < quads) exchange_barrier_wait(&s_exchange_bar);
    cluster_arrive_relaxed();
#endif
  }
  // h is read no more: the staging (grid shape only) reuses it after the offsets scan, whose
  // block barriers every thread reaches after its rank reads above.

  // The totals and this block's prefix, four columns per thread (threads below quads).
  int tq[4] = {0, 0, 0, 0}, bq[4] = {0, 0, 0, 0};
  if (tid < quads && !cluster_exchange) {
    if (grid_exchange) {
      const int4 t4 = __ldcg(reinterpret_cast<const int4*>(ws_tot) + tid);
      tq[0] = t4.x; tq[1] = t4.y; tq[2] = t4.z; tq[3] = t4.w;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        if (4 * tid + k < E + 2) bq[k] = __ldcg(ws_cnt + int64_t{4 * tid + k} * G + b);
      }
    } else {  // one segment
      const int4 t4 = reinterpret_cast<const int4*>(s_cnt)[tid];
      tq[0] = t4.x; tq[1] = t4.y; tq[2] = t4.z; tq[3] = t4.w;
    }
  }
#ifdef ARGON_PLAN_CLUSTERS
  // The cluster's blocks' counts (u16 columns, packed in pairs): the accumulators hold the sums
  // of the earlier and of the later segments' counts (each at most 15 segments of at most
  // S <= 4096 entries: no carry into the high half), so this block's prefix is the earlier
  // sum and the totals add its own counts. Thread m reads 8 bytes of each of the three.
  // The peers used to copy their counts into one slot each, summed here (16-byte loads, a
  // lane pair sharing eight columns): that sum took 1.1K cycles in clusters of 8 and 1.4K in
  // clusters of 16; these reads take ~0.3K (lab, T = 4096). H200, same-run A/B of the bulk adds
  // against the copies, bit-exact: back to back -0.38 to -0.46 us at T = 2048-6144 (T = 4096
  // 6.58 / 6.17 -> 6.19 / 5.80), -0.22 / -0.09 at 128, +0.14 / +0.01 at 1024; behind the
  // router top-k -0.44 to -0.60 at T = 128, 2048, 4096 and 6144 but +0.67 / +0.54 at 1024 and
  // +1.02 / +0.94 at 3072, where dependent launch behind the top-k now costs instead of saving
  // (bench/plan_cuda_notes.md, session 17).
  if (cluster_exchange && tid < quads) {
    const uint2 early = reinterpret_cast<const uint2*>(s_acc_early)[tid];
    const uint2 late = reinterpret_cast<const uint2*>(s_acc_late)[tid];
    const uint2 own = reinterpret_cast<const uint2*>(s_cnt16)[tid];
    const uint32_t ew[2] = {early.x, early.y}, lw[2] = {late.x, late.y}, ow[2] = {own.x, own.y};
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      bq[2 * k] = static_cast<int>(ew[k] & 0xffffu);
      bq[2 * k + 1] = static_cast<int>(ew[k] >> 16);
      tq[2 * k] = bq[2 * k] + static_cast<int>((lw[k] & 0xffffu) + (ow[k] & 0xffffu));
      tq[2 * k + 1] = bq[2 * k + 1] + static_cast<int>((lw[k] >> 16) + (ow[k] >> 16));
    }
  }
#endif

  // 5. Padded offsets (one scan over the block), per-expert bases, counts / offsets / meta.
  //    Staged, the block's own counts are scanned alongside (the high word of one 64-bit scan)
  //    for each expert's first slot in block-sorted order; otherwise a 32-bit scan (half the
  //    shuffles: -0.1 us at T = 1024-4096, bench/plan_cuda_notes.md, session 11).
  const bool staged = C >= 2 && grid_exchange;
  const int e0 = 4 * tid;
  int lq[4] = {0, 0, 0, 0};
  if (staged && tid < quads) {
    const int4 l4 = reinterpret_cast<const int4*>(s_cnt)[tid];
    lq[0] = l4.x; lq[1] = l4.y; lq[2] = l4.z; lq[3] = l4.w;
  }
  int padded = 0, local = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if (e0 + k < E) {
      padded += round_up_pow2(tq[k], p.tm);
      local += lq[k];
    }
  }
  int n_rows = 0, n_staged = 0, off = 0, loc = 0;
  if (staged) {  // padded sums stay below 2^31: the low word never carries
    long long total = 0;
    const long long both = block_exclusive_scan_1bar(
        padded + (static_cast<long long>(local) << 32), s_warp, total);
    n_rows = static_cast<int>(total & 0xffffffffll);
    n_staged = static_cast<int>(total >> 32);
    off = static_cast<int>(both & 0xffffffffll);
    loc = static_cast<int>(both >> 32);
  } else {
    off = block_exclusive_scan_1bar(padded, reinterpret_cast<int*>(s_warp), n_rows);
  }
  const bool writer = b == 0;  // every block has the same values
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int e = e0 + k;
    if (e < E) {
      s_off[e] = off;
      s_base[e] = off + bq[k];
      s_pad[e] = off + tq[k];
      s_loc[e] = loc;
      loc += lq[k];
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

  // 6. Placement of this block's entries: chunk q of the segment (q = warp * C + c) by the
  //    replica q mod replicas. Staged (h is free now): each entry goes to shared memory in
  //    block-sorted order, then the block writes them in that order.
  int* s_row = s_h;
  int* s_tok = s_h + S;
  float* s_w = reinterpret_cast<float*>(s_h + 2 * S);
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int slot = slot0 + 32 * c;
    const bool mine = (own >> c) & 1u;  // staged: one replica, which owns every chunk
    if (mine && slot < n_local) {
      const int64_t i = begin + slot;
      int row = -1;
      if (key[c] < E) {
        row = s_base[key[c]] + rank[c];
        const int token = static_cast<int>(static_cast<uint32_t>(i) / static_cast<uint32_t>(p.K));
        if (staged) {
          const int at = s_loc[key[c]] + rank[c];
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
    for (int at = tid; at < n_staged; at += kGridThreads) {
      const int row = s_row[at];
      p.sorted_token[row] = s_tok[at];
      p.sorted_weight[row] = s_w[at];
    }
  }

  // 7. Tiles and padding rows, per expert, with no search (write_tiles_and_padding): expert e
  //    goes to grid warp e mod (grid warps), the warps numbered across blocks first so that the
  //    experts spread over the SMs. An expert with many tiles is one warp's loop of 32 tiles a
  //    pass (all entries on one expert: at most R_max / (32 tm) passes). Against a loop over
  //    tiles that searched each tile's expert in the offsets (H200, same-run A/B, bit-exact):
  //    plans back to back -0.02 to -0.26 us at T = 128-16384 (T = 4096 -0.10), behind the
  //    router top-k -0.01 to -0.55 (bench/plan_cuda_notes.md, session 14).
  write_tiles_and_padding(
      p, s_off, [&](int e) { return s_pad[e]; }, n_rows, tm_log2, warp * G + b,
      G * kGridWarps, b * kGridThreads + tid, G * kGridThreads);
#ifdef ARGON_PLAN_CLUSTERS
  if (cluster_exchange) cluster_wait();  // adds may read s_cnt until every block arrived
#endif
}

}  // namespace argon::cuda
