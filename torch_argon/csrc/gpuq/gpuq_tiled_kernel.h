// The tile-decode grouped GEMM of the gpuq family, for large T: out[r, n] = sum_k A[r, k] *
// W_e[n, k] over a plan's tiles of BM = 64 or 128 rows, each weight decoded once per tile (BM
// tokens) instead of once per 8-32 tokens as in gpuq_kernel.h, for every format of
// gpuq_formats.h through its `chunk` (no per-format copy of this kernel).
//
// Algorithm. A thread block of kTiledWarps warps owns one plan tile (one expert's BM rows) and
// kTileW weight rows (gate/up: kTileW / 2 gate rows and the matching up rows, so act(gate) * up
// is fused; down: kTileW output columns). Per K step of 32 values (one format chunk):
//   (a) every thread loads its share of the tile's weights from the GGUF bytes (kTileW rows x
//       4 column groups: F::load's raw words, 2 units a thread) and issues
//       cp.async copies of its share of the BM activation rows (16 bytes each; the gather by
//       sorted_token fused: a -1 or out-of-range row is a zero fill), both for the NEXT step;
//   (b) every warp runs mma.sync m16n8k16 over its 32 x (kTileW / WARPS_N) part of the tile
//       from the current step's shared-memory tiles, its operands loaded with ldmatrix.x4;
//   (c) the loaded words are decoded once (F::decode, then gpuq_decode.h's scaled_pairs: the
//       value dequantize_reference gives, rounded once to the activations' type) into the next
//       step's weight tile; then the copies are waited for and the block synchronizes.
// Two stages of both tiles (double buffering): one block barrier per K step. The tiles' rows
// are 64 bytes (32 values); their 16-byte chunks are swizzled (chunk c of row r at c ^ ((r / 2)
// % 4)) so that the 8 rows of an ldmatrix hit 8 different bank groups.
//
// Numerics: each weight is rounded to bf16 / fp16 once (bit for bit gpuq_dequantize's value,
// as the dequant path and the Triton path round it), the products accumulated in fp32: the
// result is the dense GEMM on the decoded weights up to fp32 accumulation order.
//
// Launch shape: kTiledWarps * 32 threads; grid (ceil(n_out / columns per block), tiles), tile
// y + row_group0 of the plan (a plan of more than 65535 tiles takes several launches). Static
// shared memory: 2 stages x (kTileW + BM) rows x 64 bytes (32 KB at BM = 128), plus the format's
// lookup table (IQ2_XS: 4.2 KB). Warps: BM / 32 along the tokens x the rest along the weight
// rows; each warp holds 2 x (kTileW / WARPS_N / 8) m16n8 accumulators (64 floats at BM = 128).
//
// Limits: tile_m == BM; n_in a multiple of the format's block; activations bf16 / fp16 with
// 16-byte aligned rows (the op copies others); weights aligned to the format's ALIGN.
#pragma once
#include "gpuq_decode.h"
#include "gpuq_kernel.h"
#include "gpuq_smem.h"

// GPUQ_TILED_MIN_BLOCKS: the resident blocks per SM asked of ptxas; 2 holds every kernel at 128
// registers without spills.
#ifndef GPUQ_TILED_MIN_BLOCKS
#define GPUQ_TILED_MIN_BLOCKS 2
#endif
#if defined(__CUDACC__)
#define GQ_TILED_KERNEL __global__ void __launch_bounds__(256, GPUQ_TILED_MIN_BLOCKS)
#else
#define GQ_TILED_KERNEL inline void
#endif

namespace gpuq {
inline namespace GPUQ_TARGET {

constexpr int kTiledWarps = 8;
constexpr int kTiledThreads = kTiledWarps * 32;
constexpr int kTileW = 128;     // weight rows per block
constexpr int kStepValues = 32; // K values per step: one chunk of every format
constexpr int kRowWords = kStepValues / 2;  // 32-bit words of a tile row (two 16-bit values)

// The word of shared-memory tile row `row` where its 16-byte chunk `chunk` (0..3) starts.
GQ_DEV int swizzled_word(int row, int chunk) {
  return row * kRowWords + 4 * (chunk ^ ((row >> 1) & 3));
}

// The shape of a block of BM rows.
template <int BM>
struct TiledShape {
  static_assert(BM == 64 || BM == 128, "the tile-decode GEMM takes tiles of 64 or 128 rows");
  static constexpr int WARPS_M = BM / 32;                  // 32 tokens per warp
  static constexpr int WARPS_N = kTiledWarps / WARPS_M;    // 2 or 4
  static constexpr int WARP_W = kTileW / WARPS_N;          // weight rows per warp: 64 or 32
  static constexpr int MI = 2;                             // m16 blocks per warp
  static constexpr int NI = WARP_W / 8;                    // n8 blocks per warp: 8 or 4
  static constexpr int UNITS = kTileW * 4 / kTiledThreads; // (row, column group) per thread
  static constexpr int X_CHUNKS = BM * 4 / kTiledThreads;  // 16-byte activation copies
};

// The tile row (of kTileW) of a warp's n8 block ni: gate/up warps hold the same columns' gate
// rows (first half of the tile) and up rows (second half), so the epilogue pairs them.
template <int BM, bool SWIGLU>
GQ_DEV int tile_row_of_block(int warp_n, int ni) {
  using S = TiledShape<BM>;
  if (!SWIGLU) return warp_n * S::WARP_W + 8 * ni;
  constexpr int HALF = S::NI / 2;
  return (ni >= HALF ? kTileW / 2 : 0) + warp_n * (S::WARP_W / 2) + 8 * (ni % HALF);
}

template <class F, bool BF16, bool SWIGLU, int BM>
GQ_TILED_KERNEL tiled_qmm_kernel(const GemmParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // ldmatrix, cp.async and bf16 mma.sync need sm_80 (the ops refuse older devices)
#else
  using S = TiledShape<BM>;
  constexpr int SUBS = F::BE / 32;
  constexpr int COLS = SWIGLU ? kTileW / 2 : kTileW;  // output columns per block
  alignas(16) GQ_SHARED uint32_t w_tile[2][kTileW * kRowWords];
  alignas(16) GQ_SHARED uint32_t x_tile[2][BM * kRowWords];
  constexpr int TW = F::TABLE_WORDS;
  alignas(16) GQ_SHARED uint32_t table[TW > 0 ? TW : 1];

  const int tid = thread_in_block(), lane = lane_id(), warp = warp_id();
  const int g = lane >> 2, t = lane & 3;
  const int warp_m = warp % S::WARPS_M, warp_n = warp / S::WARPS_M;
  const int tile = block_y() + p.row_group0;
  const int64_t row0 = static_cast<int64_t>(tile) * BM;
  const int col0 = block_x() * COLS;
  const int expert = p.tile_expert[tile];
  const int n_tiles = p.meta ? p.meta[p.meta_n_tiles_index] : p.n_tiles_all;

  if (tile >= n_tiles || expert < 0 || expert >= p.n_expert) {  // uniform over the block
    if (!p.zero_unused) return;
    for (int i = tid; i < BM * COLS; i += kTiledThreads) {
      const int col = col0 + i % COLS;
      if (col < p.n_out) store_value(p, row0 + i / COLS, col, 0.f);
    }
    return;
  }
  if (TW > 0) {
    const uint32_t* global = F::global_table();
    for (int i = tid; i < TW; i += kTiledThreads) table[i] = global[i];
  }

  // This thread's weight units: tile row u / 4 (past n_out: the last row, never stored), column
  // group u % 4; consecutive threads read one row's consecutive bytes.
  const uint8_t* wrow[S::UNITS];
  int unit_row[S::UNITS];
GQ_UNROLL
  for (int i = 0; i < S::UNITS; ++i) {
    const int u = tid + i * kTiledThreads;
    unit_row[i] = u / 4;
    int n = col0 + (SWIGLU ? unit_row[i] % COLS : unit_row[i]);
    n = n < p.n_out ? n : p.n_out - 1;
    const int64_t wn = n + ((SWIGLU && unit_row[i] >= COLS) ? p.n_out : 0);
    wrow[i] = p.w + expert * p.w_stride_e + wn * p.w_stride_n;
  }
  // This thread's activation copies: tile row c / 4, 16-byte chunk c % 4 of the step's 64 bytes.
  const uint8_t* xrow[S::X_CHUNKS];
  bool xok[S::X_CHUNKS];
GQ_UNROLL
  for (int i = 0; i < S::X_CHUNKS; ++i) {
    const int c = tid + i * kTiledThreads;
    int64_t xr = row0 + c / 4;
    if (p.row_token) xr = p.row_token[xr];
    xok[i] = xr >= 0 && xr < p.n_a_rows;
    xrow[i] = static_cast<const uint8_t*>(p.x) + (xok[i] ? xr : 0) * p.x_stride + 16 * (c % 4);
  }

  // The fetched units' raw words (F::load), decoded only after the step's MMAs (F::decode in
  // (c)), so that no warp waits for the weights' latency before its MMAs; at no cost in
  // registers (measured neutral in time: the kernel's stalls are spread, not this one).
  typename F::Raw raw[S::UNITS];
  // (a) of step k: the copies of its activations, the loads of its weight units (chunk k % SUBS
  // of block k / SUBS; a run-time chunk index: unrolling a block's chunks would fold the
  // formats' header offsets, but hoists their loads past 128 registers)
  auto fetch = [&](int k, int stage) {
    const int blk = k / SUBS, ch = k % SUBS;
    const int64_t k_bytes = 2 * kStepValues * static_cast<int64_t>(k);
GQ_UNROLL
    for (int i = 0; i < S::X_CHUNKS; ++i) {
      const int c = tid + i * kTiledThreads;
      cp_async_16(&x_tile[stage][swizzled_word(c / 4, c % 4)], xrow[i] + k_bytes, xok[i]);
    }
    cp_async_commit();
GQ_UNROLL
    for (int i = 0; i < S::UNITS; ++i) {
      const uint8_t* block = wrow[i] + static_cast<int64_t>(blk) * F::BB;
      F::load(block, ch, (tid + i * kTiledThreads) % 4, raw[i]);
    }
  };
  // (c): the units fetched for step k decoded into the weight tile of `stage`
  auto decode = [&](int k, int stage) {
    const int ch = k % SUBS;
GQ_UNROLL
    for (int i = 0; i < S::UNITS; ++i) {
      const int ct = (tid + i * kTiledThreads) % 4;  // values 4ct .. + 3 and 16 + 4ct .. + 3
      uint32_t codes[2], pairs[4];
      float scale[F::GROUPS], minimum[F::GROUPS];
      F::decode(raw[i], ch, ct, codes, scale, minimum, table);
      scaled_pairs<F, BF16>(codes, scale, minimum, pairs);
      uint32_t* row = w_tile[stage];
      store_8_bytes(&row[swizzled_word(unit_row[i], ct / 2) + 2 * (ct % 2)], pairs[0], pairs[1]);
      store_8_bytes(&row[swizzled_word(unit_row[i], 2 + ct / 2) + 2 * (ct % 2)], pairs[2],
                    pairs[3]);
    }
  };
  // (b): the warp's MMAs over the tiles of `stage`, two k16 halves. ldmatrix row addresses: A
  // rows by lane % 16, their k half by lane / 16; B (weight rows) by lane % 8 and 8 more for
  // lane >= 16 (the next n8 block), their k half by (lane / 8) % 2. Every block of rows starts
  // at a multiple of 8, where the swizzle repeats, and the k16 half flips bit 1 of the chunk, so
  // each address is a per-lane word offset (computed once) ^ 8 kh + a constant row offset.
  const int a_lane = swizzled_word(lane & 15, lane >> 4);
  const int b_lane = swizzled_word(8 * (lane >> 4) + (lane & 7), (lane >> 3) & 1);
  const int a_rows = warp_m * 32 * kRowWords;
  float acc[S::MI][S::NI][4];
GQ_UNROLL
  for (int mi = 0; mi < S::MI; ++mi)
GQ_UNROLL
    for (int ni = 0; ni < S::NI; ++ni)
GQ_UNROLL
      for (int j = 0; j < 4; ++j) acc[mi][ni][j] = 0.f;
  auto multiply = [&](int stage) {
GQ_UNROLL
    for (int kh = 0; kh < 2; ++kh) {
      uint32_t a[S::MI][4];
GQ_UNROLL
      for (int mi = 0; mi < S::MI; ++mi)
        ldmatrix_x4(a[mi], &x_tile[stage][a_rows + 16 * mi * kRowWords + (a_lane ^ (8 * kh))]);
GQ_UNROLL
      for (int ni = 0; ni < S::NI; ni += 2) {
        uint32_t b[4];  // b[0], b[1]: block ni; b[2], b[3]: block ni + 1
        const int rows = tile_row_of_block<BM, SWIGLU>(warp_n, ni) * kRowWords;
        ldmatrix_x4(b, &w_tile[stage][rows + (b_lane ^ (8 * kh))]);
GQ_UNROLL
        for (int mi = 0; mi < S::MI; ++mi) {
          if (BF16) {
            mma_bf16(acc[mi][ni], a[mi], &b[0], acc[mi][ni]);
            mma_bf16(acc[mi][ni + 1], a[mi], &b[2], acc[mi][ni + 1]);
          } else {
            mma_f16(acc[mi][ni], a[mi], &b[0], acc[mi][ni]);
            mma_f16(acc[mi][ni + 1], a[mi], &b[2], acc[mi][ni + 1]);
          }
        }
      }
    }
  };

  if (TW > 0) block_sync();  // the table, before the first fetch reads it
  // Step k runs on stage k % 2 while the next step's loads fill the other. n_in = 0 (no steps)
  // loads nothing: the epilogue writes act(0) * 0.
  const int steps = p.n_in / kStepValues;
  if (steps > 0) {
    fetch(0, 0);
    decode(0, 0);
  }
  cp_async_wait_all();
  block_sync();
  for (int k = 0; k < steps; ++k) {
    const int cur = k & 1;
    const bool more = k + 1 < steps;
    if (more) fetch(k + 1, cur ^ 1);
    multiply(cur);
    if (more) decode(k + 1, cur ^ 1);
    cp_async_wait_all();
    block_sync();
  }

  // Epilogue: acc[mi][ni][j] is token 16 mi + g (+ 8 for j >= 2) of the warp's 32, column
  // 2t + j % 2 of its n8 block ni (gate/up: block ni + NI / 2 holds the same columns' up).
  constexpr int OUT_BLOCKS = SWIGLU ? S::NI / 2 : S::NI;
GQ_UNROLL
  for (int mi = 0; mi < S::MI; ++mi)
GQ_UNROLL
    for (int ni = 0; ni < OUT_BLOCKS; ++ni)
GQ_UNROLL
      for (int j = 0; j < 4; ++j) {
        const int col = col0 + tile_row_of_block<BM, SWIGLU>(warp_n, ni) + 2 * t + (j & 1);
        if (col >= p.n_out) continue;
        float v = acc[mi][ni][j];
        if (SWIGLU) v = apply_activation(p.activation, v) * acc[mi][ni + OUT_BLOCKS][j];
        store_value(p, row0 + warp_m * 32 + 16 * mi + g + 8 * (j >> 1), col, v);
      }
#endif
}

}  // namespace GPUQ_TARGET
}  // namespace gpuq
