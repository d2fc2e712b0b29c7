// moe_qmm: grouped GEMM over the plan's tiles with quantized weights,
//   out[r] = xs[r] @ dequant(w[e])^T, e = tile_expert[r / tile_m],
// the dequant inside the kernel (never a dequantized copy of the weights). Rows of tiles whose
// expert is -1 (or outside [0, E)) are written with zeros. fp32 accumulation, one rounding at
// the store.
//
// One template, instantiated per format with its chunk dequant (quant_blocks.h) as a template
// parameter: "moe_qmm_<format>" for every row of quant_params.h's ARGON_QUANT_FORMATS.
//
// Launch: grid (ceil(R / 32), ceil(N / 64)) threadgroups of 128 threads (4 simdgroups). Threadgroup
//   (gx, gy) computes out[32 gx .. +32, 64 gy .. +64].
// Algorithm: the 32-row block is split into segments of consecutive rows with one expert (one
//   segment whenever tile_m >= 32, the plan's tiles being aligned to tile_m; up to 32 / tile_m
//   below that). Per segment, the reduction runs in steps of 64: all threads stage the segment's
//   rows of xs as float in a_tile (rows outside the segment and past n_in as zero), and each
//   thread dequantizes one 32-value chunk of one of the 64 weight rows (row tid / 2, chunk
//   tid % 2) into w_tile as half (the only rounding of the weights: to half); barrier; each
//   simdgroup multiplies its 16 x 32 part of the output (2 x 4 simdgroup_float8x8 accumulators)
//   with 8-wide steps, reading w_tile transposed; barrier. Then the accumulators go through
//   a_tile (reused as the [32][64] output tile) to masked, converting stores of the segment's
//   rows. Rows of other segments computed alongside (from zero rows of a_tile) are not stored,
//   so a non-finite weight of another expert never reaches them.
// Threadgroup memory: a_tile 32 x 64 float (8 KB) + w_tile 64 x 64 half (8 KB) = 16 KB.
// Control flow is uniform over the threadgroup (segments come from tile_expert alone), so every
// thread reaches every barrier.
// Limits: N, n_in, R < 2^32; w may have any expert and row stride (bytes; a row's blocks are
//   contiguous); xs any element strides. A weight value beyond half's range (65504) becomes inf
//   in w_tile (real GGUF weights are far below); the halves' rounding (2^-11 relative) is the
//   kernel's error against the fp32 reference beyond the summation order.
#include "argon_common.h"
#include "shared/quant_blocks.h"

#if defined(__METAL_VERSION__) && __METAL_VERSION__ >= 320
#pragma METAL fp contract(off)
#endif

template <typename Block, uint ELEMS, void (*DQ)(device const Block*, uint, thread float*)>
kernel void moe_qmm(device const uchar* xs [[buffer(0)]],
                    device const uchar* w [[buffer(1)]],
                    device const int* tile_expert [[buffer(2)]],
                    device uchar* out [[buffer(3)]],
                    constant ArgonMoeQmmParams& p [[buffer(4)]],
                    uint2 tg [[threadgroup_position_in_grid]],
                    uint tid [[thread_index_in_threadgroup]],
                    uint sg [[simdgroup_index_in_threadgroup]]) {
  threadgroup float a_tile[ARGON_QMM_BM * ARGON_QMM_BK];  // [row][k]; then the output [row][col]
  threadgroup half w_tile[ARGON_QMM_BN * ARGON_QMM_BK];   // [weight row][k]
  const uint BM = ARGON_QMM_BM, BN = ARGON_QMM_BN, BK = ARGON_QMM_BK;
  const uint chunks_per_step = BK / ARGON_QUANT_CHUNK;  // 2: with 128 threads, one chunk each
  const uint per_block = ELEMS / ARGON_QUANT_CHUNK;
  const uint row0 = tg.x * BM, col0 = tg.y * BN;
  const uint rows_here = min(BM, p.rows - row0);
  const uint sr = (sg / 2) * 16, sc = (sg % 2) * 32;  // this simdgroup's 16 x 32 output part
  // The weight row and chunk this thread dequantizes each step.
  const uint wn = tid / chunks_per_step, wc = tid % chunks_per_step;
  const uint n_chunks = p.n_in / ARGON_QUANT_CHUNK;

  for (uint seg0 = 0; seg0 < rows_here;) {
    // The segment: from seg0 to the end of its plan tile, then whole tiles of the same expert.
    const int e = tile_expert[(row0 + seg0) / p.tile_m];
    uint seg1 = seg0;
    do {  // to the end of the plan tile holding row seg1 (64-bit: no overflow near 2^32 rows)
      const ulong tile_end = (ulong((row0 + seg1) / p.tile_m) + 1) * p.tile_m;
      seg1 = tile_end - row0 < rows_here ? uint(tile_end - row0) : rows_here;
    } while (seg1 < rows_here && tile_expert[(row0 + seg1) / p.tile_m] == e);

    if (e < 0 || uint(e) >= p.n_expert) {
      for (uint idx = tid; idx < BM * BN; idx += ARGON_QMM_THREADS) {
        const uint i = idx / BN, c = col0 + idx % BN;
        if (i >= seg0 && i < seg1 && c < p.n) store_f(out, p.dtype, ulong(row0 + i) * p.n + c, 0.0f);
      }
      seg0 = seg1;
      continue;
    }

    simdgroup_float8x8 acc[2][4];
    for (uint i = 0; i < 2; ++i)
      for (uint j = 0; j < 4; ++j) acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    device const uchar* w_row = w + ulong(e) * p.w_expert_stride + ulong(col0 + wn) * p.w_row_stride;

    for (uint k0 = 0; k0 < p.n_in; k0 += BK) {
      for (uint idx = tid; idx < BM * BK; idx += ARGON_QMM_THREADS) {
        const uint i = idx / BK, k = idx % BK;  // consecutive threads walk n_in: coalesced reads
        a_tile[idx] = (i >= seg0 && i < seg1 && k0 + k < p.n_in)
                          ? load_f(xs, p.dtype, ulong(row0 + i) * p.xs_row_stride +
                                                    ulong(k0 + k) * p.xs_col_stride)
                          : 0.0f;
      }
      const uint chunk = k0 / ARGON_QUANT_CHUNK + wc;
      float v[ARGON_QUANT_CHUNK];
      if (col0 + wn < p.n && chunk < n_chunks) {
        DQ((device const Block*)w_row + chunk / per_block, chunk % per_block, v);
      } else {
        for (uint j = 0; j < ARGON_QUANT_CHUNK; ++j) v[j] = 0.0f;
      }
      for (uint j = 0; j < ARGON_QUANT_CHUNK; ++j) {
        w_tile[wn * BK + wc * ARGON_QUANT_CHUNK + j] = half(v[j]);
      }
      threadgroup_barrier(mem_flags::mem_threadgroup);
      for (uint kk = 0; kk < BK; kk += 8) {
        simdgroup_float8x8 a[2];
        simdgroup_half8x8 b[4];
        for (uint i = 0; i < 2; ++i) simdgroup_load(a[i], &a_tile[(sr + 8 * i) * BK + kk], BK);
        for (uint j = 0; j < 4; ++j) {
          // w_tile holds [n][k]; the product needs [k][n]: load transposed.
          simdgroup_load(b[j], &w_tile[(sc + 8 * j) * BK + kk], BK, ulong2(0, 0), true);
        }
        for (uint i = 0; i < 2; ++i)
          for (uint j = 0; j < 4; ++j) simdgroup_multiply_accumulate(acc[i][j], a[i], b[j], acc[i][j]);
      }
      threadgroup_barrier(mem_flags::mem_threadgroup);
    }

    // a_tile as the [BM][BN] output tile (BK == BN), then the segment's rows to out.
    for (uint i = 0; i < 2; ++i)
      for (uint j = 0; j < 4; ++j)
        simdgroup_store(acc[i][j], &a_tile[(sr + 8 * i) * BN + sc + 8 * j], BN);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // No barrier before the next segment: its staging writes, per thread, the very a_tile
    // elements this loop read (same index walk, BK == BN), and w_tile is not read here.
    for (uint idx = tid; idx < BM * BN; idx += ARGON_QMM_THREADS) {
      const uint i = idx / BN, c = col0 + idx % BN;
      if (i >= seg0 && i < seg1 && c < p.n) store_f(out, p.dtype, ulong(row0 + i) * p.n + c, a_tile[idx]);
    }
    seg0 = seg1;
  }
}

typedef decltype(moe_qmm<argon_quant::block_q8_0, 32, argon_quant::dequant_q8_0>) moe_qmm_t;

#define ARGON_MOE_QMM_KERNEL(lower, UPPER, id, elems, bytes)                                   \
  template [[host_name("moe_qmm_" #lower)]] kernel moe_qmm_t                                   \
  moe_qmm<argon_quant::block_##lower, elems, argon_quant::dequant_##lower>;
ARGON_QUANT_FORMATS(ARGON_MOE_QMM_KERNEL)
#undef ARGON_MOE_QMM_KERNEL

static_assert(ARGON_QMM_BK == ARGON_QMM_BN, "a_tile doubles as the output tile, walked as staged");
static_assert(ARGON_QMM_BN * (ARGON_QMM_BK / ARGON_QUANT_CHUNK) == ARGON_QMM_THREADS,
              "one chunk dequant per thread per step");
