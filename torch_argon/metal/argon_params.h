// The parameter structs of every argon Metal kernel: plain old data, passed with setBytes on the
// GPU and by pointer on the host, and included by both the host code and the shaders, so the
// two sides cannot disagree on a layout. Also the limits that shape the launches.
#pragma once

#include "plan_layout.h"

#ifdef __METAL_VERSION__
typedef uint argon_u32;
typedef int argon_i32;
#else
#include <stdint.h>
typedef uint32_t argon_u32;
typedef int32_t argon_i32;
#endif

// Float storage types, as the host names them to the kernels.
enum ArgonDtype { ARGON_F32 = 0, ARGON_F16 = 1, ARGON_BF16 = 2 };

// The gated epilogue's activation (swiglu's `activation`; the functions: activation.h).
#define ARGON_ACT_SILU 0
#define ARGON_ACT_GELU 1
#define ARGON_ACT_GELU_TANH 2

// Plan limits. mm_hist holds one threadgroup histogram of E counters; mm_place holds, per expert,
// one 8-bit count per 32-entry sub-block of its block (4 per 32-bit word, exact for any K and
// repeated ids: a sub-block holds at most 32 entries of one expert). The host picks the largest
// block (<= 1024 entries) whose packed counters fit ARGON_PLAN_PACKED_WORDS:
//   E <= 512: 1024, E <= 1024: 512, E <= 2048: 256, E <= 4096: 128.
#define ARGON_PLAN_MAX_EXPERTS 4096
#define ARGON_PLAN_MAX_BLOCK 1024
#define ARGON_PLAN_MIN_BLOCK 128
#define ARGON_PLAN_PACKED_WORDS 4096
#define ARGON_PLAN_SCAN_THREADS 1024
// The value load_plan_id gives an id outside [0, E) other than -1.
#define ARGON_BAD_ID (-2)

struct ArgonPlanParams {
  argon_u32 n_entries;     // T * K
  argon_u32 top_k;         // K: entry i belongs to token i / K
  argon_u32 n_expert;      // E
  argon_u32 tile_m;        // rows per tile, a power of two
  argon_u32 block;         // entries per threadgroup of mm_hist and mm_place
  argon_u32 n_blocks;      // ceil(n_entries / block)
  argon_u32 r_max;         // rows of sorted_token / sorted_weight
  argon_u32 n_tiles;       // r_max / tile_m
  argon_u32 ids_64bit;     // ids are int64: read the low word, check the high word
  argon_u32 weight_dtype;  // ArgonDtype of topk_weights
  argon_u32 scan_threads;  // threads of mm_scan's one threadgroup (a multiple of 32, <= 1024)
};

// Row copies / conversions (moe_gather): xs[r] = x[sorted_token[r]], zero where it is -1.
struct ArgonGatherParams {
  argon_u32 rows;       // R (rows of xs)
  argon_u32 cols;       // H
  argon_u32 n_tokens;   // T (rows of x): any other index gives a zero row
  argon_u32 src_dtype;  // ArgonDtype of x
  argon_u32 dst_dtype;  // ArgonDtype of xs
};

// moe_combine: out[t] = sum_k w[t,k] * y[pos[t,k]] (+ shared[t]) (+ residual[t]).
struct ArgonCombineParams {
  argon_u32 n_tokens;   // T
  argon_u32 top_k;      // K
  argon_u32 cols;       // H
  argon_u32 y_rows;     // R: a pos outside [0, R) is skipped like -1
  argon_u32 y_dtype, w_dtype, shared_dtype, residual_dtype, out_dtype;
  argon_u32 has_shared, has_residual;
};

// swiglu: out[r, i] = silu(gate[r, i]) * up[r, i].
struct ArgonSwigluParams {
  argon_u32 rows;        // R
  argon_u32 cols;        // I
  argon_u32 in_stride;   // elements between rows of gate / up (I, or 2I for one fused tensor)
  argon_u32 up_offset;   // elements from the gate buffer's start to up (fused: I)
  argon_u32 in_dtype, out_dtype;
  argon_u32 activation;  // ARGON_ACT_*
};

// moe_mm: out[r] = xs[r] @ w[e]^T for rows of tiles owned by expert e, zero where e is -1.
struct ArgonMoeMmParams {
  argon_u32 rows;      // R_max
  argon_u32 n;         // N (output columns)
  argon_u32 kd;        // Kd (reduction)
  argon_u32 tile_m;    // the plan's rows per tile
  argon_u32 n_expert;  // E (an expert outside [0, E) gives zero rows)
  argon_u32 dtype;     // ArgonDtype of xs, w and out
  // Strides in elements (w and xs may be views).
  argon_u32 xs_row_stride, xs_col_stride;
  argon_u32 w_expert_stride_lo, w_expert_stride_hi;  // 64-bit: E * N * Kd may pass 2^32
  argon_u32 w_row_stride, w_col_stride;
};

// Kernel geometry shared by the host recipe and the shaders.
#define ARGON_ELEMWISE_THREADS 256  // threads per threadgroup of the row-wise kernels
#define ARGON_MM_TILE 32            // moe_mm_simd: 32 x 32 outputs per threadgroup
#define ARGON_MM_TILE_K 32          // moe_mm_simd: reduction step
#define ARGON_MM_THREADS 128        // moe_mm_simd: 4 simdgroups, 16 x 16 outputs each
