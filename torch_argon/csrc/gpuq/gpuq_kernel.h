// The gpuq grouped GEMM: out[r, n] = sum_k A[r, k] * W_e[n, k] over a plan's tiles, with W_e an
// expert's GGUF-quantized weights read as they are stored, for every format of gpuq_formats.h.
//
// Algorithm. The weights are the MMA's A operand (16 weight rows per m16n8k16 / m16n8k32), the
// tokens its B operand (8 per MMA). Each lane decodes, for its two weight rows (g and g + 8 of
// a 16-row group) and each 32-value chunk, its 8 codes straight from the GGUF bytes into the A
// fragment (no shared memory, no dequantized tile): the integer codes, exact in bf16 / fp16 /
// int8, and never scaled. The MMA sums codes times activations over one group of 16 or 32
// values into a fresh fp32 (int32 for q8) partial, and the group's scale and min are applied to
// that partial in fp32:
//
//     acc += s * P + z * Sigma,   z = -(s * BIAS + m),   Sigma = the group's activation sum
//
// where BIAS is what the code-to-operand conversion added (the exponent trick: bf16 bits
// 0x4300 | u are 128 + u; fp16 0x6400 | u are 1024 + u) plus the format's offset. Sigma comes
// from one more MMA per token block with an all-ones A. So the product is the exact-dequant
// GEMM up to float32 rounding: no weight is rounded to bf16.
//
// Tiles of more than 8 tokens per warp (NT >= 2, bf16, not q8) take the scaled path instead:
// the per-group epilogue would then cost 2 FFMA per accumulator per group, more than the MMAs,
// so each lane scales its codes to bf16 weights (two bf16x2 FMAs per pair: the bias off, then
// s * code - m, s and m rounded to bf16) and the MMA accumulates over the whole row: each weight
// rounded to bf16 once more, as the Triton kernels round it (their tolerance, 1.5e-2).
//
// activation_quant "q8" (Q8 = true): the activations are int8 codes with a float scale per 32
// values (quant/activation_q8.py; gpuq_quantize.h makes them), the MMA is int8 (m16n8k32, or
// m16n8k16 for the formats with 16-value groups) into an int32 partial started at 0x4B400000
// (the partial's float is then its bits less 12582912: no int-to-float conversion), and
// acc += (s * d_a) * P + z * (d_a * Sigma_q).
//
// Launch shape: blocks of kWarps warps; block (x, y) computes rows [(y + row_group0) *
// rows_per_warp, + rows_per_warp) of the plan (one tile's, or part of one; a plan of more than
// 65535 row groups takes several launches) against columns [x * kWarps * 16 * WN, + ...), each
// warp 16 * WN columns (SWIGLU: WN gate and WN up row groups, the epilogue act(gate) * up).
// The K loop walks the row's blocks and their 32-value chunks; every lane loads its own bytes
// (4-byte loads where the format's alignment allows; a block's header bytes through the words
// that hold them, one load a word for all its chunks) and its activations (one 8-byte load per
// token and 16 values). Each warp is independent; the block shares only the format's lookup
// table (IQ2_XS, IQ3_S), copied into shared memory at the start (one block barrier), and in
// the smem_act loop the staged activations (below).
//
// K loops (template argument LOOP; WarpK below). The plain loop loads and decodes each chunk
// in turn: inside a block the compiler issues the block's loads early, but at each block
// boundary the warp waits for the next block's bytes. The pipelined loop keeps a ring of the
// next GPUQ_PIPELINE_DEPTH chunks' raw words in registers (each format's `load`; its `decode`
// runs on the chunk DEPTH behind), so those loads are in flight while the current chunk is
// decoded and multiplied. The smem_act loop (16- and 32-token tiles; 8-token calls run the
// plain loop) stages the block's token rows in shared memory, 256 values at a time, by 16-byte
// cp.async copies of all 128 threads, double buffered with one block barrier per stage, and
// each warp reads its B words there: the plain loop has every warp of a block load the same
// tile's activations itself (4x the load instructions and L1 wavefronts; Nsight Compute found
// the 32-token kernel bound by L1 at 80 % of its throughput). Shared memory: 2 x 8 NT rows of
// 544 bytes (bf16 / fp16; 34 KB at NT = 4) or 272 (q8), plus 8 NT row pointers. All three give
// the same bits (the same products in the same order: only where a B word comes from changes).
// The pipelined and smem_act loops are built only in a lab build (GPUQ_LAB_LOOPS=1; the
// emulation always) and chosen per call by ARGON_GPUQ_LOOP=pipelined / smem_act
// (gpuq_ops.cpp): either becomes the default once a device run measures it faster
// (bench/lab/gpuq_loops.py; bench/quant_gpuq_notes.md).
//
// Launch shape at small T (the configs at T = 128, testing.routing's uniform top-K,
// tile_m 8: one 8-token block per warp; 528 resident blocks on an H100 at 4 per SM):
//   E=512 K=10 I=512: 475 used tiles (every expert hit has one); gate/up 8 column blocks x 475
//   = 3800 blocks (7.2 waves), down 16 x 475 = 7600 (14.4 waves);
//   E=128 K=8 I=768: 178 used tiles (all 128 experts; 50 of them take two); gate/up 12 x 178 =
//   2136 blocks (4.0 waves), down 16 x 178 = 2848 (5.4 waves).
// Every SM has work in both, with no split along K: each warp streams its 32 weight rows whole
// (8 Q4_K blocks for gate/up, 2-3 for down), and a split along K would add a reduction for no
// more warps. E=128's higher cost per weight byte comes from the experts of two tiles (their
// weights decoded twice, the second read mostly from L2: 1.39x the decode of E=512's one tile
// per expert) and from its short down rows (3 blocks: the loop's prologue weighs more), not
// from idle SMs. (python bench/lab/gpuq_loops.py records each case's grid.)
//
// Compile-time knobs; each default is the one that keeps the kernels unspilled or was faster:
// GPUQ_PREFETCH=1 prefetches each weight row's bytes 256 on into L1 at every block (plain
// loop); GPUQ_MIN_BLOCKS_NT1=n asks ptxas for n resident blocks of the 8-token kernels (the
// default 4 keeps them at 128 registers, trading a few spilled bytes for occupancy at small
// T); GPUQ_MIN_BLOCKS_NT1_PIPELINED the same for the pipelined loop (default 3: 168
// registers, no spills; at 4 its ring spills, tools/gpuq_sass_check.py --small-t);
// GPUQ_PIPELINE_DEPTH the chunks in flight (default 2); GPUQ_LAB_LOOPS=1 builds all three loops;
// GPUQ_MIN_BLOCKS_WIDE=n asks for n resident blocks of the 16- and 32-token kernels (default 1:
// ptxas's choice, up to 190 registers, so 2 blocks per SM for the K-quants at 32 tokens, where
// Nsight Compute found them bound by L1 traffic at 12.5 % occupancy; 3 keeps every format but
// Q3_K (12 spilled bytes) at <= 168 registers without spills, 3 blocks per SM; not yet timed);
// GPUQ_MIN_BLOCKS_SMEM_ACT the same for the smem_act loop's kernels (default: WIDE's).
//
// Limits: n_in a multiple of the format's block; activations bf16 or fp16 with 8-byte aligned
// rows, q8 codes 4-byte (the smem_act loop: both 16-byte); tensors aligned to the format's
// ALIGN; rows_per_warp <= 8 * NT and a divisor of tile_m or tile_m itself;
// |codes| * 32 * 127 < 2^22 (true of every format).
#pragma once
#include "gpuq/gpuq_launch.h"
#include "gpuq_formats.h"
#include "gpuq_params.h"
#include "gpuq_smem.h"

#ifndef GPUQ_PREFETCH
#define GPUQ_PREFETCH 0
#endif
#ifndef GPUQ_MIN_BLOCKS_NT1
#define GPUQ_MIN_BLOCKS_NT1 4
#endif
#ifndef GPUQ_MIN_BLOCKS_NT1_PIPELINED
#define GPUQ_MIN_BLOCKS_NT1_PIPELINED 3
#endif
#ifndef GPUQ_PIPELINE_DEPTH
#define GPUQ_PIPELINE_DEPTH 2
#endif
#ifndef GPUQ_MIN_BLOCKS_WIDE
#define GPUQ_MIN_BLOCKS_WIDE 1
#endif
#ifndef GPUQ_MIN_BLOCKS_SMEM_ACT
#define GPUQ_MIN_BLOCKS_SMEM_ACT GPUQ_MIN_BLOCKS_WIDE
#endif
#if defined(__CUDACC__)
#define GQ_KERNEL(NT, LOOP)                                                                   \
  __global__ void __launch_bounds__(                                                         \
      128, (LOOP) == kLoopSmemAct       ? GPUQ_MIN_BLOCKS_SMEM_ACT                           \
           : (NT) != 1                  ? GPUQ_MIN_BLOCKS_WIDE                               \
           : (LOOP) == kLoopPipelined ? GPUQ_MIN_BLOCKS_NT1_PIPELINED                       \
                                        : GPUQ_MIN_BLOCKS_NT1)
#else
#define GQ_KERNEL(NT, LOOP) inline void
#endif

namespace gpuq {
inline namespace GPUQ_TARGET {

constexpr int kWarps = 4;
constexpr uint32_t kMagicPartial = 0x4B400000u;  // int32 partials start here: float bits
constexpr float kMagicPartialValue = 12582912.0f;

// The bias the code-to-operand conversion adds to a format's true code, plus its OFF.
template <class F, bool BF16, bool Q8>
struct CodeBias {
  static constexpr int value = Q8      ? (F::CODE == U7 ? F::OFF : 0)
                               : !BF16 ? (F::CODE == U7 ? 1024 + F::OFF : 1152)
                                       : (F::CODE == U7 ? 128 + F::OFF : (F::CODE == S6 ? 192 : 0));
};

// Two 16-bit operands from bytes 0 and 2 (lo) or 1 and 3 (hi) of a word of codes.
template <class F, bool BF16>
GQ_DEV void codes_to_pairs(uint32_t w, uint32_t& p02, uint32_t& p13) {
  const uint32_t w13 = w >> 8;
  if (!BF16) {  // fp16: 1024 + (u or v + 128), exact for any byte
    const uint32_t flip = F::CODE == U7 ? 0u : 0x00800080u;
    p02 = ((w ^ flip) & 0x00FF00FFu) | 0x64006400u;
    p13 = ((w13 ^ flip) & 0x00FF00FFu) | 0x64006400u;
  } else if (F::CODE == U7) {  // 128 + u
    p02 = (w & 0x007F007Fu) | 0x43004300u;
    p13 = (w13 & 0x007F007Fu) | 0x43004300u;
  } else if (F::CODE == S6) {  // 192 + v: (v ^ 64) & 127 is v + 64 for v in [-64, 63]
    p02 = ((w ^ 0x00400040u) & 0x007F007Fu) | 0x43004300u;
    p13 = ((w13 ^ 0x00400040u) & 0x007F007Fu) | 0x43004300u;
  } else {  // S8: (128 + low 7 bits) + (-128 or -256 by the sign bit) = v, exactly
    p02 = bf16x2_add((w & 0x007F007Fu) | 0x43004300u, (w & 0x00800080u) ^ 0xC300C300u);
    p13 = bf16x2_add((w13 & 0x007F007Fu) | 0x43004300u, (w13 & 0x00800080u) ^ 0xC300C300u);
  }
}

GQ_DEV float apply_activation(int which, float g) {
  if (which == kActGelu) return 0.5f * g * (1.0f + erff(g * 0.70710678118654752f));
  if (which == kActGeluTanh) {
    const float inner = 0.79788456080286536f * (g + 0.044715f * g * g * g);
    return 0.5f * g * (1.0f + tanhf(inner));
  }
  return g / (1.0f + expf(-g));
}

// The x row that token slot `slot` of a warp's rows (from plan row row0) reads, sorted_token
// applied, or -1 where it is masked (past rows_per_warp, a -1 id, out of range): every loop
// reads zeros there.
GQ_DEV int64_t x_row_of_slot(const GemmParams& p, int64_t row0, int slot) {
  int64_t r = slot < p.rows_per_warp ? row0 + slot : -1;
  if (r >= 0 && p.row_token) r = p.row_token[r];
  return r >= 0 && r < p.n_a_rows ? r : -1;
}

GQ_DEV void store_value(const GemmParams& p, int64_t row, int col, float v) {
  const int64_t at = row * p.out_stride + col;
  if (p.out_kind == kFp32) {
    static_cast<float*>(p.out)[at] = v;
  } else {
    static_cast<uint16_t*>(p.out)[at] =
        p.out_kind == kBf16 ? float_to_bf16_bits(v) : float_to_half_bits(v);
  }
}

// One warp's K loop, chunk by chunk: the lane's weight rows (g and g + 8 of each of its G row
// groups) and activation rows, what it loads for a 32-value chunk (Raw: the words as the loads
// return them) and what it does with them (step: the B fragments, the groups' activation sums,
// the decode, the MMAs and the group epilogue into acc). The two K loops below differ only in
// when a chunk's loads are issued.
template <class F, bool BF16, int NT, bool SWIGLU, bool Q8>
struct WarpK {
  static constexpr int WN = SWIGLU ? 1 : 2;       // output row groups per warp
  static constexpr int G = SWIGLU ? 2 * WN : WN;  // weight row groups per warp
  static constexpr int SUBS = F::BE / 32;         // chunks per block
  static constexpr int GROUPS = F::GROUPS;
  static constexpr int BIAS = CodeBias<F, BF16, Q8>::value;
  static constexpr bool SCALED = BF16 && !Q8 && NT >= 2;  // scaled bf16 weights, no epilogue
  static constexpr bool NEEDS_SUM = !SCALED && (F::HAS_MIN || BIAS != 0);

  struct Raw {
    typename F::Raw w[G][2];  // [row group][row g / g + 8]
    uint32_t x[NT][2][2];     // per token block and 16-value word: bf16 / fp16 values 4t .. + 3
                              // as two words; q8: [0] the 4 codes
    float da[NT][2];          // q8: the scales of the lane's two accumulator tokens
  };

  const uint8_t* wrow[G][2];
  const uint8_t* xrow[NT];  // the x row of token slot nt * 8 + g (row 0 where masked)
  bool xok[NT];
  const float* drow[NT][2];  // q8: the scale rows of token slots nt * 8 + 2t (+ 1), or null
  int t;

  // The chunk `ch` of block `blk` along the row: the weights' words and the activations.
  GQ_DEV void load(Raw& r, int blk, int ch) const {
GQ_UNROLL
    for (int gi = 0; gi < G; ++gi)
GQ_UNROLL
      for (int h = 0; h < 2; ++h)
        F::load(wrow[gi][h] + static_cast<int64_t>(blk) * F::BB, ch, t, r.w[gi][h]);
    load_x(r, blk, ch);
  }

  static constexpr int XB = Q8 ? 1 : 2;  // bytes per activation value

  GQ_DEV void load_x(Raw& r, int blk, int ch) const {
    const int k0 = blk * F::BE + 32 * ch;  // the chunk's first value along the row
GQ_UNROLL
    for (int nt = 0; nt < NT; ++nt) x_words(r, nt, xrow[nt] + XB * k0, xok[nt]);
    load_scales(r, k0);
  }

  // Token block nt's B words of a chunk from `chunk`, the lane's token's row at the chunk's
  // first value (global or shared memory); zeros where !ok.
  GQ_DEV void x_words(Raw& r, int nt, const uint8_t* chunk, bool ok) const {
    if (Q8) {
      r.x[nt][0][0] = ok ? load_u32(chunk + 4 * t) : 0u;
      r.x[nt][1][0] = ok ? load_u32(chunk + 16 + 4 * t) : 0u;
    } else {
GQ_UNROLL
      for (int w = 0; w < 2; ++w) {
        r.x[nt][w][0] = r.x[nt][w][1] = 0u;  // values 16w + 4t .. + 3: one 64-bit load
        if (ok) load_2u32(chunk + 2 * (16 * w + 4 * t), r.x[nt][w][0], r.x[nt][w][1]);
      }
    }
  }

  // q8: the scales of the lane's two accumulator tokens for the 32 values from k0 on.
  GQ_DEV void load_scales(Raw& r, int k0) const {
    if constexpr (Q8) {
GQ_UNROLL
      for (int nt = 0; nt < NT; ++nt)
GQ_UNROLL
        for (int j = 0; j < 2; ++j) r.da[nt][j] = drow[nt][j] ? drow[nt][j][k0 / 32] : 0.f;
    }
  }

  // The chunk's MMAs. LOADED: r holds the chunk's weight words (the pipelined loop); else each
  // row's words are loaded here, row group by row group, after the activation sums (the plain
  // loop: the order its code was tuned in).
  template <bool LOADED>
  GQ_DEV void step(const Raw& r, int blk, int ch, float (&acc)[G][NT][4],
                   const uint32_t* table) const {
    // q8: every int32 partial starts at the magic, so that its bits are a float
    const int32_t c0[4] = {int32_t(kMagicPartial), int32_t(kMagicPartial), int32_t(kMagicPartial),
                           int32_t(kMagicPartial)};
    // B fragments: per token block and group word (L16: values 16w + 4t .. + 3).
    uint32_t b[NT][2][2];
    float sigma[NT][GROUPS][2];  // the lane's two tokens' sums per group (scaled for q8)
    const float(&da)[NT][2] = r.da;
GQ_UNROLL
    for (int nt = 0; nt < NT; ++nt) {
      if (Q8) {
        b[nt][0][0] = r.x[nt][0][0];
        b[nt][1][0] = r.x[nt][1][0];
      } else {
GQ_UNROLL
        for (int w = 0; w < 2; ++w) {
          b[nt][w][0] = byte_perm(r.x[nt][w][0], r.x[nt][w][1], 0x5410);  // values 0, 2
          b[nt][w][1] = byte_perm(r.x[nt][w][0], r.x[nt][w][1], 0x7632);  // values 1, 3
        }
      }
      if (NEEDS_SUM) {
        if (Q8) {
          const uint32_t ones[4] = {0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u};
GQ_UNROLL
          for (int gr = 0; gr < GROUPS; ++gr) {
            int32_t qs[4];
            if (GROUPS == 1) {
              const uint32_t bb[2] = {b[nt][0][0], b[nt][1][0]};
              mma_s8_k32(qs, ones, bb, c0);
            } else {
              mma_s8_k16(qs, ones, &b[nt][gr][0], c0);
            }
GQ_UNROLL
            for (int j = 0; j < 2; ++j)
              sigma[nt][gr][j] = (as_float(uint32_t(qs[j])) - kMagicPartialValue) * da[nt][j];
          }
        } else {
          const uint32_t one = BF16 ? 0x3F803F80u : 0x3C003C00u;
          const uint32_t ones[4] = {one, one, one, one};
          const float zero[4] = {0.f, 0.f, 0.f, 0.f};
          float sum[4];
          if (GROUPS == 1) {
            if (BF16) {
              mma_bf16(sum, ones, b[nt][0], zero);
              mma_bf16(sum, ones, b[nt][1], sum);
            } else {
              mma_f16(sum, ones, b[nt][0], zero);
              mma_f16(sum, ones, b[nt][1], sum);
            }
            sigma[nt][0][0] = sum[0];
            sigma[nt][0][1] = sum[1];
          } else {
GQ_UNROLL
            for (int gr = 0; gr < GROUPS; ++gr) {
              if (BF16) mma_bf16(sum, ones, b[nt][gr], zero);
              else mma_f16(sum, ones, b[nt][gr], zero);
              sigma[nt][gr][0] = sum[0];
              sigma[nt][gr][1] = sum[1];
            }
          }
        }
      }
    }

GQ_UNROLL
    for (int gi = 0; gi < G; ++gi) {
      uint32_t wq[2][2];  // [row g / g + 8][word]
      float s[2][GROUPS], m[2][GROUPS], z[2][GROUPS];
GQ_UNROLL
      for (int h = 0; h < 2; ++h) {
        if (LOADED) F::decode(r.w[gi][h], ch, t, wq[h], s[h], m[h], table);
        else F::chunk(wrow[gi][h] + static_cast<int64_t>(blk) * F::BB, ch, t, wq[h], s[h], m[h],
                      table);
GQ_UNROLL
        for (int gr = 0; gr < GROUPS; ++gr) z[h][gr] = -fmaf(s[h][gr], float(BIAS), m[h][gr]);
      }
      if (Q8) {
GQ_UNROLL
        for (int nt = 0; nt < NT; ++nt) {
GQ_UNROLL
          for (int gr = 0; gr < GROUPS; ++gr) {
            int32_t part[4];
            if (GROUPS == 1) {
              const uint32_t a[4] = {wq[0][0], wq[1][0], wq[0][1], wq[1][1]};
              const uint32_t bb[2] = {b[nt][0][0], b[nt][1][0]};
              mma_s8_k32(part, a, bb, c0);
            } else {
              const uint32_t a[2] = {wq[0][gr], wq[1][gr]};
              mma_s8_k16(part, a, &b[nt][gr][0], c0);
            }
GQ_UNROLL
            for (int j = 0; j < 4; ++j) {
              const float pf = as_float(uint32_t(part[j])) - kMagicPartialValue;
              float v = acc[gi][nt][j];
              if (NEEDS_SUM) v = fmaf(z[j / 2][gr], sigma[nt][gr][j % 2], v);
              acc[gi][nt][j] = fmaf(s[j / 2][gr] * da[nt][j % 2], pf, v);
            }
          }
        }
      } else {
        uint32_t a[2][4];  // per word (k16 step): the A fragment
GQ_UNROLL
        for (int w = 0; w < 2; ++w) {
          codes_to_pairs<F, BF16>(wq[0][w], a[w][0], a[w][2]);
          codes_to_pairs<F, BF16>(wq[1][w], a[w][1], a[w][3]);
        }
        if (SCALED) {
          const uint32_t minus_bias = pack_bf16x2(-float(BIAS), -float(BIAS));
GQ_UNROLL
          for (int w = 0; w < 2; ++w) {
            const int gr = GROUPS == 1 ? 0 : w;
            const uint32_t scale[2] = {pack_bf16x2(s[0][gr], s[0][gr]),
                                       pack_bf16x2(s[1][gr], s[1][gr])};
            const uint32_t neg_min[2] = {pack_bf16x2(-m[0][gr], -m[0][gr]),
                                         pack_bf16x2(-m[1][gr], -m[1][gr])};
GQ_UNROLL
            for (int q = 0; q < 4; ++q) {  // registers 0, 2: row g; 1, 3: row g + 8
              const uint32_t code = BIAS ? bf16x2_add(a[w][q], minus_bias) : a[w][q];
              a[w][q] = bf16x2_fma(code, scale[q & 1], neg_min[q & 1]);
            }
          }
GQ_UNROLL
          for (int nt = 0; nt < NT; ++nt) {
            mma_bf16(acc[gi][nt], a[0], b[nt][0], acc[gi][nt]);
            mma_bf16(acc[gi][nt], a[1], b[nt][1], acc[gi][nt]);
          }
        } else {
GQ_UNROLL
          for (int nt = 0; nt < NT; ++nt) {
            const float zero[4] = {0.f, 0.f, 0.f, 0.f};
            float part[GROUPS][4];
            if (GROUPS == 1) {
              if (BF16) {
                mma_bf16(part[0], a[0], b[nt][0], zero);
                mma_bf16(part[0], a[1], b[nt][1], part[0]);
              } else {
                mma_f16(part[0], a[0], b[nt][0], zero);
                mma_f16(part[0], a[1], b[nt][1], part[0]);
              }
            } else {
GQ_UNROLL
              for (int gr = 0; gr < GROUPS; ++gr) {
                if (BF16) mma_bf16(part[gr], a[gr], b[nt][gr], zero);
                else mma_f16(part[gr], a[gr], b[nt][gr], zero);
              }
            }
GQ_UNROLL
            for (int gr = 0; gr < GROUPS; ++gr)
GQ_UNROLL
              for (int j = 0; j < 4; ++j) {
                float v = acc[gi][nt][j];
                if (NEEDS_SUM) v = fmaf(z[j / 2][gr], sigma[nt][gr][j % 2], v);
                acc[gi][nt][j] = fmaf(s[j / 2][gr], part[gr][j], v);
              }
          }
        }  // exact path
      }
    }
  }

  // The plain loop: each chunk's loads, then its step. Within a block (the chunk loop unrolled)
  // the compiler issues the block's loads early, but nothing of block blk + 1 is in flight while
  // block blk is decoded.
  GQ_DEV void plain_loop(const GemmParams& p, float (&acc)[G][NT][4],
                         const uint32_t* table) const {
    constexpr int PREFETCH_AHEAD = 256;  // bytes past the current block
    const int64_t row_bytes = static_cast<int64_t>(p.n_blocks) * F::BB;
    for (int blk = 0; blk < p.n_blocks; ++blk) {
      const int64_t ahead = static_cast<int64_t>(blk) * F::BB + PREFETCH_AHEAD + 64 * t;
      if (GPUQ_PREFETCH && ahead < row_bytes) {
GQ_UNROLL
        for (int gi = 0; gi < G; ++gi)
GQ_UNROLL
          for (int h = 0; h < 2; ++h) prefetch_l1(wrow[gi][h] + ahead);
      }
GQ_UNROLL
      for (int ch = 0; ch < SUBS; ++ch) {
        Raw r;
        load_x(r, blk, ch);
        step<false>(r, blk, ch, acc, table);
      }
    }
  }

  // The pipelined loop: a ring of DEPTH chunks' Raw in registers. Chunk c's step runs after the
  // loads of chunk c + DEPTH were issued, so the loads of the next DEPTH chunks (across a block
  // boundary too) are in flight while chunk c is decoded. An iteration covers U chunks (one
  // block, or DEPTH blocks of the 32-value formats) so that every ring slot is a compile-time
  // register. The iterations whose loads stay inside the row run without a check; the last few
  // (the tail) load the row's last block in place of those past its end (valid bytes, never
  // used) and stop at its last block where n_blocks is not a multiple of U / SUBS.
  static constexpr int DEPTH = GPUQ_PIPELINE_DEPTH;
  static constexpr int U = SUBS > DEPTH ? SUBS : DEPTH;  // chunks per iteration
  static constexpr int BLOCKS = U / SUBS;                // blocks per iteration
  static constexpr int REACH = (U - 1 + DEPTH) / SUBS;   // the furthest block an iteration loads
  static_assert(U % DEPTH == 0 && U % SUBS == 0, "DEPTH and SUBS must be powers of two");

  template <bool TAIL>
  GQ_DEV void pipelined_iteration(Raw (&ring)[DEPTH], int b0, int last, float (&acc)[G][NT][4],
                                  const uint32_t* table) const {
GQ_UNROLL
    for (int j = 0; j < U; ++j) {
      if (TAIL && BLOCKS > 1 && b0 + j / SUBS > last) break;  // warp-uniform
      const int ahead = b0 + (j + DEPTH) / SUBS;
      step<true>(ring[j % DEPTH], b0 + j / SUBS, j % SUBS, acc, table);
      // into the slot just decoded (its registers free again; the scheduler still issues these
      // loads ahead of this chunk's MMAs)
      load(ring[j % DEPTH], TAIL && ahead > last ? last : ahead, (j + DEPTH) % SUBS);
    }
  }

  GQ_DEV void pipelined_loop(const GemmParams& p, float (&acc)[G][NT][4],
                             const uint32_t* table) const {
    const int last = p.n_blocks - 1;
    if (last < 0) return;
    Raw ring[DEPTH];
GQ_UNROLL
    for (int j = 0; j < DEPTH; ++j) load(ring[j], j / SUBS < last ? j / SUBS : last, j % SUBS);
    int b0 = 0;
    for (; b0 + REACH <= last; b0 += BLOCKS) pipelined_iteration<false>(ring, b0, last, acc, table);
    for (; b0 <= last; b0 += BLOCKS) pipelined_iteration<true>(ring, b0, last, acc, table);
  }

  // The smem_act loop (NT >= 2): the block's 8 * NT token rows staged in shared memory once
  // per stage of STAGE_VALUES values (cp.async, 16 bytes a copy, every thread of the block),
  // double buffered: stage s + 1's copies are in flight while the warps multiply stage s, one
  // block barrier per stage. Each warp then reads its B words from shared memory exactly as
  // the plain loop reads them from global memory (x_words), so its steps are the plain loop's.
  // A stage is 256 values (one block of the 256-value formats, 8 of the 32-value ones): 16 KB
  // a buffer at NT = 4 in bf16, and 8 chunks of MMAs between barriers to cover the copies'
  // latency. The rows are padded by PAD bytes so that the reads are free of bank conflicts:
  // 64-bit reads (bf16 / fp16) go by half-warps, token rows g = 0..3 at 32 * g mod 128 bytes
  // (a row of 544 bytes) cover the 32 banks; q8's 32-bit reads, rows g = 0..7 at 16 * g mod 128
  // (a row of 272). `active`: false for a warp past n_out, which stages and waits with the
  // block but multiplies nothing.
  static constexpr int STAGE_VALUES = 256;
  static_assert(STAGE_VALUES % F::BE == 0, "a stage holds whole blocks of the format");
  static constexpr int STAGE_BLOCKS = STAGE_VALUES / F::BE;
  static constexpr int SPAN = STAGE_VALUES * XB;  // bytes of a token row per stage
  static constexpr int PAD = Q8 ? 16 : 32;
  static constexpr int STRIDE = SPAN + PAD;        // bytes between staged token rows
  static constexpr int ROWS = 8 * NT;              // token rows staged
  static constexpr int PIECES = SPAN / 16;         // 16-byte copies per row and stage
  static constexpr int COPIES = ROWS * PIECES / (kWarps * 32);  // per thread and stage
  static_assert(COPIES * kWarps * 32 == ROWS * PIECES, "every thread copies as many pieces");

  GQ_DEV void smem_loop(const GemmParams& p, int64_t row0, bool active, float (&acc)[G][NT][4],
                        const uint32_t* table) const {
    static_assert(NT >= 2, "the 8-token kernels keep the plain loop");
    alignas(16) GQ_SHARED uint8_t staged[2][ROWS * STRIDE];
    GQ_SHARED const uint8_t* source[ROWS];  // each token row's x row, or null where masked
    const int tid = thread_in_block(), g = lane_id() >> 2;
    if (tid < ROWS) {
      const int64_t xr = x_row_of_slot(p, row0, tid);
      source[tid] = xr >= 0 ? static_cast<const uint8_t*>(p.x) + xr * p.x_stride : nullptr;
    }
    block_sync();

    const int64_t row_bytes = static_cast<int64_t>(p.n_in) * XB;
    // Stage s's copies into buffer s % 2: the pieces inside the row (a last stage may be
    // short), zero-filled for a masked token row as the plain loop reads it.
    auto copy_stage = [&](int s) {
      const int64_t first = static_cast<int64_t>(s) * SPAN;
      uint8_t* buffer = staged[s & 1];
GQ_UNROLL
      for (int i = 0; i < COPIES; ++i) {
        const int c = tid + i * kWarps * 32, row = c / PIECES, at = 16 * (c % PIECES);
        const uint8_t* src = source[row];
        if (first + at < row_bytes)
          cp_async_16(buffer + row * STRIDE + at,
                      src ? src + first + at : static_cast<const uint8_t*>(p.x), src != nullptr);
      }
      cp_async_commit();
    };

    const int stages = (p.n_blocks + STAGE_BLOCKS - 1) / STAGE_BLOCKS;
    if (stages > 0) copy_stage(0);
    for (int s = 0; s < stages; ++s) {
      cp_async_wait_all();
      // stage s has landed for every thread, and every warp is done with stage s - 1's buffer,
      // which stage s + 1's copies overwrite
      block_sync();
      if (s + 1 < stages) copy_stage(s + 1);
      if (!active) continue;
      const uint8_t* rows = staged[s & 1] + g * STRIDE;
      const int b0 = s * STAGE_BLOCKS;
      const int nb = p.n_blocks - b0 < STAGE_BLOCKS ? p.n_blocks - b0 : STAGE_BLOCKS;
      for (int b = 0; b < nb; ++b) {
GQ_UNROLL
        for (int ch = 0; ch < SUBS; ++ch) {
          Raw r;
          const int k = b * F::BE + 32 * ch;  // the chunk's first value in the stage
GQ_UNROLL
          for (int nt = 0; nt < NT; ++nt) x_words(r, nt, rows + nt * 8 * STRIDE + XB * k, true);
          load_scales(r, b0 * F::BE + k);
          step<false>(r, b0 + b, ch, acc, table);
        }
      }
    }
  }
};

template <class F, bool BF16, int NT, bool SWIGLU, bool Q8, int LOOP>
GQ_KERNEL(NT, LOOP) qmm_kernel(const GemmParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // bf16 and int8 mma.sync need sm_80 (the ops refuse older devices before a launch)
#else
  using K = WarpK<F, BF16, NT, SWIGLU, Q8>;
  constexpr int WN = K::WN, G = K::G;

  // The format's lookup table (IQ2_XS, IQ3_S), copied into shared memory once per block: the
  // grid rows are then read there instead of through L1 for every 4 codes.
  constexpr int TW = F::TABLE_WORDS;
  GQ_SHARED uint32_t table[TW > 0 ? TW : 1];
  if (TW > 0) {
    const uint32_t* global = F::global_table();
    for (int i = thread_in_block(); i < TW; i += kWarps * 32) table[i] = global[i];
    block_sync();  // before any warp leaves
  }

  const int lane = lane_id(), g = lane >> 2, t = lane & 3;
  const int64_t row0 = (static_cast<int64_t>(block_y()) + p.row_group0) * p.rows_per_warp;
  const int tile = static_cast<int>(row0 / p.tile_m);
  const int col0 = (block_x() * kWarps + warp_id()) * 16 * WN;
  // a warp past n_out leaves (warp-uniform), but for the smem_act loop's block barriers
  const bool active = col0 < p.n_out;
  if (!active && LOOP != kLoopSmemAct) return;
  const int expert = p.tile_expert[tile];
  const int n_tiles = p.meta ? p.meta[p.meta_n_tiles_index] : p.n_tiles_all;

  float acc[G][NT][4];
GQ_UNROLL
  for (int gi = 0; gi < G; ++gi)
GQ_UNROLL
    for (int nt = 0; nt < NT; ++nt)
GQ_UNROLL
      for (int j = 0; j < 4; ++j) acc[gi][nt][j] = 0.f;

  if (tile < n_tiles && expert >= 0 && expert < p.n_expert) {
    K k;
    k.t = t;
    // The lane's weight rows: g and g + 8 of each group, wrapped past n_out (stores are masked).
GQ_UNROLL
    for (int gi = 0; gi < G; ++gi)
GQ_UNROLL
      for (int h = 0; h < 2; ++h) {
        const int n = (col0 + 16 * (gi % WN) + g + 8 * h) % p.n_out;
        const int64_t wn = n + ((SWIGLU && gi >= WN) ? p.n_out : 0);
        k.wrow[gi][h] = p.w + expert * p.w_stride_e + wn * p.w_stride_n;
      }
    // The lane's B column: token slot nt * 8 + g; its x row (0 and masked when out of range).
GQ_UNROLL
    for (int nt = 0; nt < NT; ++nt) {
      const int64_t xr = x_row_of_slot(p, row0, nt * 8 + g);
      k.xok[nt] = xr >= 0;
      k.xrow[nt] = static_cast<const uint8_t*>(p.x) + (k.xok[nt] ? xr : 0) * p.x_stride;
GQ_UNROLL
      for (int j = 0; j < 2; ++j) {
        const int64_t r = Q8 ? x_row_of_slot(p, row0, nt * 8 + 2 * t + j) : -1;
        k.drow[nt][j] = r >= 0 ? p.x_scale + r * p.x_scale_stride : nullptr;
      }
    }
    if constexpr (LOOP == kLoopSmemAct) k.smem_loop(p, row0, active, acc, table);
    else if constexpr (LOOP == kLoopPipelined) k.pipelined_loop(p, acc, table);
    else k.plain_loop(p, acc, table);
    if (!active) return;
  } else if (!p.zero_unused) {
    return;  // an unused tile's rows stay as they are (the whole block: no barrier waits)
  }

  // Epilogue: the lane holds columns col0 + 16 wn + g (+ 8) for tokens nt * 8 + 2t (+ 1).
GQ_UNROLL
  for (int wn = 0; wn < WN; ++wn)
GQ_UNROLL
    for (int nt = 0; nt < NT; ++nt)
GQ_UNROLL
      for (int j = 0; j < 4; ++j) {
        const int col = col0 + 16 * wn + g + 8 * (j / 2);
        const int slot = nt * 8 + 2 * t + (j % 2);
        if (col >= p.n_out || slot >= p.rows_per_warp) continue;
        float v = acc[wn][nt][j];
        if (SWIGLU) v = apply_activation(p.activation, v) * acc[wn + WN][nt][j];
        store_value(p, row0 + slot, col, v);
      }
#endif
}

}  // namespace GPUQ_TARGET
}  // namespace gpuq
