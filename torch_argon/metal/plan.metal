// The MoE plan in three dispatches, with nothing to clear beforehand:
//   plan_hist  (n_blocks threadgroups)  per-block, per-expert counts and per-block bad-id counts;
//   plan_scan  (one threadgroup)        counts, offsets, per-block rank bases, padding rows, tile map,
//                                       the tail past n_rows, and meta;
//   plan_place (n_blocks threadgroups)  the stable row of every entry.
// Scratch `block_counts` is [n_blocks, E + 1] int32: plan_hist writes every element, plan_scan
// turns the first E columns into exclusive prefixes over blocks, plan_place reads them.
// Limits (plan_params.h): E <= ARGON_PLAN_MAX_EXPERTS; any K (repeated ids included); T*K plus
// padding must fit int32 rows (checked by the host).
#include "argon_common.h"
#include "shared/plan_params.h"

#if defined(__METAL_VERSION__) && __METAL_VERSION__ >= 320
#pragma METAL fp contract(off)
#endif

// Entry i's expert: in [0, E), -1 (skipped), or ARGON_BAD_ID. int64 ids are read as two words
// (little endian), so ids beyond 32 bits are recognised as bad rather than truncated.
inline int load_plan_id(device const int* ids, uint i, constant ArgonPlanParams& p) {
  int lo, hi;
  if (p.ids_64bit != 0) {
    lo = ids[2 * ulong(i)];
    hi = ids[2 * ulong(i) + 1];
  } else {
    lo = ids[i];
    hi = lo < 0 ? -1 : 0;
  }
  if (hi == 0 && lo >= 0 && uint(lo) < p.n_expert) return lo;
  if (hi == -1 && lo == -1) return -1;
  return ARGON_BAD_ID;
}

// plan_hist: block b's histogram of experts, and its count of bad ids.
// Launch: n_blocks threadgroups of p.block threads; lane tid counts entry b * block + tid.
// The threadgroup histogram is zeroed here, so no clear dispatch is needed; every element of
// block_counts[b, 0..E] is written.
kernel void plan_hist(device const int* ids [[buffer(0)]],
                      constant ArgonPlanParams& p [[buffer(1)]],
                      device int* block_counts [[buffer(2)]],
                      uint b [[threadgroup_position_in_grid]],
                      uint tid [[thread_position_in_threadgroup]]) {
  threadgroup atomic_uint hist[ARGON_PLAN_MAX_EXPERTS + 1];  // [E]: bad ids
  for (uint e = tid; e <= p.n_expert; e += p.block) {
    atomic_store_explicit(&hist[e], 0u, memory_order_relaxed);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  const uint i = b * p.block + tid;
  if (i < p.n_entries) {
    const int e = load_plan_id(ids, i, p);
    if (e >= 0) {
      atomic_fetch_add_explicit(&hist[e], 1u, memory_order_relaxed);
    } else if (e == ARGON_BAD_ID) {
      atomic_fetch_add_explicit(&hist[p.n_expert], 1u, memory_order_relaxed);
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  device int* out = block_counts + ulong(b) * (p.n_expert + 1);
  for (uint e = tid; e <= p.n_expert; e += p.block) {
    out[e] = int(atomic_load_explicit(&hist[e], memory_order_relaxed));
  }
}

// plan_scan: one threadgroup of p.scan_threads threads; thread tid owns experts
// [tid * per, (tid + 1) * per) with per = ceil(E / scan_threads), so any E up to the limit.
// Per expert: the exclusive prefix of its counts over blocks (in place), its count, and its
// padded size; a threadgroup scan of the padded sizes (simd prefix + per-simdgroup totals) gives
// offsets. Then each thread writes its experts' padding rows (-1 / 0) and tiles, all threads
// stride over the tail rows and tiles past n_rows, and thread 0 writes offsets[0] and meta.
kernel void plan_scan(constant ArgonPlanParams& p [[buffer(0)]],
                      device int* block_counts [[buffer(1)]],
                      device int* counts [[buffer(2)]],
                      device int* offsets [[buffer(3)]],
                      device int* sorted_token [[buffer(4)]],
                      device float* sorted_weight [[buffer(5)]],
                      device int* tile_expert [[buffer(6)]],
                      device int* meta [[buffer(7)]],
                      uint tid [[thread_position_in_threadgroup]],
                      uint simd_group [[simdgroup_index_in_threadgroup]],
                      uint simd_lane [[thread_index_in_simdgroup]]) {
  threadgroup int sg_rows[ARGON_PLAN_SCAN_THREADS / 32];
  threadgroup int sg_valid[ARGON_PLAN_SCAN_THREADS / 32];
  threadgroup int sg_bad[ARGON_PLAN_SCAN_THREADS / 32];

  const uint E = p.n_expert, stride = E + 1, tm = p.tile_m;
  const uint per = (E + p.scan_threads - 1) / p.scan_threads;
  const uint e0 = min(E, tid * per), e1 = min(E, e0 + per);

  int my_rows = 0, my_valid = 0, my_bad = 0;
  for (uint e = e0; e < e1; ++e) {
    int running = 0;
    for (uint b = 0; b < p.n_blocks; ++b) {
      const int c = block_counts[ulong(b) * stride + e];
      block_counts[ulong(b) * stride + e] = running;
      running += c;
    }
    counts[e] = running;
    my_valid += running;
    my_rows += int((uint(running) + tm - 1) / tm * tm);
  }
  for (uint b = tid; b < p.n_blocks; b += p.scan_threads) {
    my_bad += block_counts[ulong(b) * stride + E];
  }

  const int rows_before_in_simd = simd_prefix_exclusive_sum(my_rows);
  const int simd_rows = simd_sum(my_rows);
  const int simd_valid = simd_sum(my_valid);
  const int simd_bad = simd_sum(my_bad);
  if (simd_lane == 0) {
    sg_rows[simd_group] = simd_rows;
    sg_valid[simd_group] = simd_valid;
    sg_bad[simd_group] = simd_bad;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  int row = rows_before_in_simd, n_rows = 0, n_valid = 0, n_bad = 0;
  for (uint s = 0; s < p.scan_threads / 32; ++s) {
    if (s < simd_group) row += sg_rows[s];
    n_rows += sg_rows[s];
    n_valid += sg_valid[s];
    n_bad += sg_bad[s];
  }

  for (uint e = e0; e < e1; ++e) {
    const int c = counts[e];
    const int end = row + int((uint(c) + tm - 1) / tm * tm);
    for (int r = row + c; r < end; ++r) {
      sorted_token[r] = -1;
      sorted_weight[r] = 0.0f;
    }
    for (uint j = uint(row) / tm; j < uint(end) / tm; ++j) tile_expert[j] = int(e);
    offsets[e + 1] = end;
    row = end;
  }
  for (uint r = uint(n_rows) + tid; r < p.r_max; r += p.scan_threads) {
    sorted_token[r] = -1;
    sorted_weight[r] = 0.0f;
  }
  for (uint j = uint(n_rows) / tm + tid; j < p.n_tiles; j += p.scan_threads) tile_expert[j] = -1;
  if (tid == 0) {
    offsets[0] = 0;
    meta[ARGON_META_N_ROWS] = n_rows;
    meta[ARGON_META_N_TILES] = n_rows / int(tm);
    meta[ARGON_META_N_VALID] = n_valid;
    meta[ARGON_META_N_BAD_IDS] = n_bad;
  }
}

// Sum of the four 8-bit fields of a packed counter word.
inline uint sum_bytes(uint x) {
  x = (x & 0x00ff00ffu) + ((x >> 8) & 0x00ff00ffu);
  return (x & 0xffffu) + (x >> 16);
}

// plan_place: the stable row of each entry of block b.
// Launch: n_blocks threadgroups of p.block threads (a multiple of 128); lane tid places entry
// i = b * block + tid. rank(i) = entries of the same expert before i in the block
//   = (its count in earlier 32-entry sub-blocks: 8-bit fields of `packed`, one field per
//      (expert, sub-block), at most block / 128 words to read)
//   + (lanes before it in its own sub-block with the same expert: a scan of the 32 ids of its
//      simdgroup in threadgroup memory).
// row = offsets[e] + block_counts[b, e] (the rank base plan_scan left) + rank.
// The first lane of each (expert, sub-block) adds the sub-block's count into its field; a field
// holds up to 255, a sub-block at most 32 entries, so it is exact for every input.
kernel void plan_place(device const int* ids [[buffer(0)]],
                       device const uchar* weights [[buffer(1)]],
                       constant ArgonPlanParams& p [[buffer(2)]],
                       device const int* block_counts [[buffer(3)]],
                       device const int* offsets [[buffer(4)]],
                       device int* sorted_token [[buffer(5)]],
                       device float* sorted_weight [[buffer(6)]],
                       device int* pos [[buffer(7)]],
                       uint b [[threadgroup_position_in_grid]],
                       uint tid [[thread_position_in_threadgroup]]) {
  threadgroup int block_ids[ARGON_PLAN_MAX_BLOCK];
  threadgroup atomic_uint packed[ARGON_PLAN_PACKED_WORDS];

  const uint words_per_expert = p.block / 128;  // 32 sub-blocks of 32 -> 8 words
  const uint n_words = p.n_expert * words_per_expert;
  for (uint w = tid; w < n_words; w += p.block) {
    atomic_store_explicit(&packed[w], 0u, memory_order_relaxed);
  }
  const uint i = b * p.block + tid;
  int e = i < p.n_entries ? load_plan_id(ids, i, p) : -1;
  if (e == ARGON_BAD_ID) e = -1;
  block_ids[tid] = e;
  threadgroup_barrier(mem_flags::mem_threadgroup);

  const uint sub = tid / 32, lane = tid % 32;
  uint before = 0, here = 0;
  if (e >= 0) {
    for (uint j = 0; j < 32; ++j) {
      const bool same = block_ids[sub * 32 + j] == e;
      before += (same && j < lane) ? 1u : 0u;
      here += same ? 1u : 0u;
    }
    if (before == 0) {
      atomic_fetch_add_explicit(&packed[uint(e) * words_per_expert + sub / 4],
                                here << (8 * (sub % 4)), memory_order_relaxed);
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  if (i >= p.n_entries) return;
  if (e < 0) {
    pos[i] = -1;
    return;
  }
  const uint first_word = uint(e) * words_per_expert;
  uint rank = before;
  for (uint w = 0; w < sub / 4; ++w) {
    rank += sum_bytes(atomic_load_explicit(&packed[first_word + w], memory_order_relaxed));
  }
  const uint partial = atomic_load_explicit(&packed[first_word + sub / 4], memory_order_relaxed);
  rank += sum_bytes(partial & ((1u << (8 * (sub % 4))) - 1u));

  const int row = offsets[e] + block_counts[ulong(b) * (p.n_expert + 1) + uint(e)] + int(rank);
  sorted_token[row] = int(i / p.top_k);
  sorted_weight[row] = load_f(weights, p.weight_dtype, i);
  pos[i] = row;
}
