// moe_combine's params (combine.metal): out[t] = sum_k w[t,k] * y[pos[t,k]] (+ shared[t])
// (+ residual[t]).
#pragma once

#include "shared/argon_params.h"

struct ArgonCombineParams {
  argon_u32 n_tokens;   // T
  argon_u32 top_k;      // K
  argon_u32 cols;       // H
  argon_u32 y_rows;     // R: a pos outside [0, R) is skipped like -1
  argon_u32 y_dtype, w_dtype, shared_dtype, residual_dtype, out_dtype;  // ArgonDtype each
  argon_u32 has_shared, has_residual;                                   // 0 or 1
};
static_assert(sizeof(ArgonCombineParams) == 44, "ArgonCombineParams: 11 x u32");
