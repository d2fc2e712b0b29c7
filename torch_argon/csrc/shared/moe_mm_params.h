// moe_mm's params (moe_mm.metal): out[r] = xs[r] @ w[e]^T for rows of tiles owned by expert e,
// zero where e is -1; and moe_mm_simd's tile geometry.
#pragma once

#include "shared/argon_params.h"

struct ArgonMoeMmParams {
  // Strides in elements (xs and w may be views).
  argon_u64 xs_row_stride, xs_col_stride;
  argon_u64 w_expert_stride, w_row_stride, w_col_stride;
  argon_u32 rows;      // R_max
  argon_u32 n;         // N (output columns)
  argon_u32 kd;        // Kd (reduction)
  argon_u32 tile_m;    // the plan's rows per tile
  argon_u32 n_expert;  // E (an expert outside [0, E) gives zero rows)
  argon_u32 dtype;     // ArgonDtype of xs, w and out
};
static_assert(sizeof(ArgonMoeMmParams) == 64, "ArgonMoeMmParams: 5 x u64 + 6 x u32");

#define ARGON_MM_TILE 32     // moe_mm_simd: 32 x 32 outputs per threadgroup
#define ARGON_MM_TILE_K 32   // moe_mm_simd: reduction step
#define ARGON_MM_THREADS 128  // moe_mm_simd: 4 simdgroups, 16 x 16 outputs each

// moe_mm_weight_grad's params (moe_mm_weight_grad.metal): out[e] = sum over rows r of tiles with
// tile_expert == e of grad_out[r]^T xs[r]; xs [R, Kd] and grad_out [R, N] contiguous.
struct ArgonMoeMmWeightGradParams {
  argon_u32 rows;      // R_max
  argon_u32 n;         // N (grad_out's columns, out's rows per expert)
  argon_u32 kd;        // Kd (xs's columns)
  argon_u32 tile_m;    // the plan's rows per tile
  argon_u32 n_expert;  // E (out's experts; tiles of other experts add to none)
  argon_u32 dtype;     // ArgonDtype of xs, grad_out and out
};
static_assert(sizeof(ArgonMoeMmWeightGradParams) == 24, "ArgonMoeMmWeightGradParams: 6 x u32");
