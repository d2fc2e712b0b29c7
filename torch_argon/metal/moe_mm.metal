// moe_mm: grouped GEMM over the plan's tiles, out[r] = xs[r] @ w[e]^T where e = tile_expert[r / tm].
// Rows of tiles whose expert is -1 (or outside [0, E)) are written with zeros: the contract
// defines them. Accumulation in fp32 whatever the storage type; one rounding at the store.
//
// moe_mm_simd (tile_m >= 32): threadgroup (gx, gy) computes out[32 gx .. +32, 32 gy .. +32] with
//   128 threads = 4 simdgroups in a 2 x 2 layout, each owning a 16 x 16 block as 2 x 2
//   simdgroup_float8x8 accumulators. Per 32-wide reduction step: all threads stage the xs tile
//   [32 x 32] and the w tile (transposed to [k][n]) in threadgroup memory as fp32 (zero-padded at
//   the N and Kd edges), barrier, 4 x 4 simdgroup multiply-accumulates per simdgroup, barrier.
//   The result goes through threadgroup memory to masked, converting stores.
//   A 32-row block lies inside one plan tile because tile_m is a power of two >= 32, so the
//   expert is uniform and a -1 tile exits before any barrier.
// moe_mm_rows (any tile_m, the fallback for tile_m < 32): one output element per thread, a plain
//   fp32 dot product. Grid (R, ceil(N / 256)) of 256 threads.
// Limits: N, Kd < 2^32; xs and w may have any strides (64-bit element strides in the params).
#include "argon_common.h"
#include "shared/moe_mm_params.h"

#if defined(__METAL_VERSION__) && __METAL_VERSION__ >= 320
#pragma METAL fp contract(off)
#endif

kernel void moe_mm_simd(device const uchar* xs [[buffer(0)]],
                        device const uchar* w [[buffer(1)]],
                        device const int* tile_expert [[buffer(2)]],
                        device uchar* out [[buffer(3)]],
                        constant ArgonMoeMmParams& p [[buffer(4)]],
                        uint2 tg [[threadgroup_position_in_grid]],
                        uint tid [[thread_index_in_threadgroup]],
                        uint sg [[simdgroup_index_in_threadgroup]]) {
  threadgroup float a_tile[ARGON_MM_TILE * ARGON_MM_TILE_K];  // [row][k]
  threadgroup float b_tile[ARGON_MM_TILE_K * ARGON_MM_TILE];  // [k][col]
  threadgroup float c_tile[ARGON_MM_TILE * ARGON_MM_TILE];    // [row][col]
  const uint T = ARGON_MM_TILE, TK = ARGON_MM_TILE_K;
  const uint row0 = tg.x * T, col0 = tg.y * T;
  const int e = tile_expert[row0 / p.tile_m];

  if (e < 0 || uint(e) >= p.n_expert) {
    for (uint idx = tid; idx < T * T; idx += ARGON_MM_THREADS) {
      const uint c = col0 + idx % T;
      if (c < p.n) store_f(out, p.dtype, ulong(row0 + idx / T) * p.n + c, 0.0f);
    }
    return;
  }

  const ulong w_base = ulong(e) * p.w_expert_stride;
  simdgroup_float8x8 acc[2][2];
  for (uint i = 0; i < 2; ++i)
    for (uint j = 0; j < 2; ++j) acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  const uint sr = (sg / 2) * 16, sc = (sg % 2) * 16;

  for (uint k0 = 0; k0 < p.kd; k0 += TK) {
    for (uint idx = tid; idx < T * TK; idx += ARGON_MM_THREADS) {
      const uint i = idx / TK, k = idx % TK;  // consecutive threads walk Kd: coalesced reads
      a_tile[i * TK + k] =
          k0 + k < p.kd
              ? load_f(xs, p.dtype, ulong(row0 + i) * p.xs_row_stride + ulong(k0 + k) * p.xs_col_stride)
              : 0.0f;
      const uint n = col0 + i;
      b_tile[k * T + i] = (n < p.n && k0 + k < p.kd)
                              ? load_f(w, p.dtype, w_base + ulong(n) * p.w_row_stride +
                                                       ulong(k0 + k) * p.w_col_stride)
                              : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint kk = 0; kk < TK; kk += 8) {
      simdgroup_float8x8 a0, a1, b0, b1;
      simdgroup_load(a0, &a_tile[sr * TK + kk], TK);
      simdgroup_load(a1, &a_tile[(sr + 8) * TK + kk], TK);
      simdgroup_load(b0, &b_tile[kk * T + sc], T);
      simdgroup_load(b1, &b_tile[kk * T + sc + 8], T);
      simdgroup_multiply_accumulate(acc[0][0], a0, b0, acc[0][0]);
      simdgroup_multiply_accumulate(acc[0][1], a0, b1, acc[0][1]);
      simdgroup_multiply_accumulate(acc[1][0], a1, b0, acc[1][0]);
      simdgroup_multiply_accumulate(acc[1][1], a1, b1, acc[1][1]);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }

  for (uint i = 0; i < 2; ++i)
    for (uint j = 0; j < 2; ++j) simdgroup_store(acc[i][j], &c_tile[(sr + 8 * i) * T + sc + 8 * j], T);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint idx = tid; idx < T * T; idx += ARGON_MM_THREADS) {
    const uint c = col0 + idx % T;
    if (c < p.n) store_f(out, p.dtype, ulong(row0 + idx / T) * p.n + c, c_tile[idx]);
  }
}

kernel void moe_mm_rows(device const uchar* xs [[buffer(0)]],
                        device const uchar* w [[buffer(1)]],
                        device const int* tile_expert [[buffer(2)]],
                        device uchar* out [[buffer(3)]],
                        constant ArgonMoeMmParams& p [[buffer(4)]],
                        uint2 tg [[threadgroup_position_in_grid]],
                        uint tid [[thread_index_in_threadgroup]]) {
  const uint c = tg.y * ARGON_ELEMWISE_THREADS + tid, r = tg.x;
  if (c >= p.n) return;
  const int e = tile_expert[r / p.tile_m];
  float acc = 0.0f;
  if (e >= 0 && uint(e) < p.n_expert) {
    const ulong w_row = ulong(e) * p.w_expert_stride + ulong(c) * p.w_row_stride;
    for (uint k = 0; k < p.kd; ++k) {
      const float prod = load_f(xs, p.dtype, ulong(r) * p.xs_row_stride + ulong(k) * p.xs_col_stride) *
                         load_f(w, p.dtype, w_row + ulong(k) * p.w_col_stride);
      acc = acc + prod;
    }
  }
  store_f(out, p.dtype, ulong(r) * p.n + c, acc);
}
