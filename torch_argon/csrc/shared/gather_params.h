// moe_gather's params (gather.metal): xs[r] = x[sorted_token[r]], zero where it is -1.
#pragma once

#include "shared/argon_params.h"

struct ArgonGatherParams {
  argon_u32 rows;       // R (rows of xs)
  argon_u32 cols;       // H
  argon_u32 n_tokens;   // T (rows of x): any other index gives a zero row
  argon_u32 src_dtype;  // ArgonDtype of x
  argon_u32 dst_dtype;  // ArgonDtype of xs
};
static_assert(sizeof(ArgonGatherParams) == 20, "ArgonGatherParams: 5 x u32");
