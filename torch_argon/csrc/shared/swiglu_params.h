// swiglu's params (swiglu.metal): out[r, i] = act(gate[r, i]) * up[r, i], and the codes of the
// gated epilogue's activation (the functions themselves: activation.h; the CPU and CUDA kernels
// use the same codes).
#pragma once

#include "shared/argon_params.h"

#define ARGON_ACT_SILU 0
#define ARGON_ACT_GELU 1
#define ARGON_ACT_GELU_TANH 2

struct ArgonSwigluParams {
  argon_u64 in_stride;   // elements between rows of gate / up (I, or 2I for one fused tensor)
  argon_u64 up_offset;   // elements from the gate buffer's start to up (fused: I)
  argon_u32 rows;        // R
  argon_u32 cols;        // I
  argon_u32 in_dtype, out_dtype;  // ArgonDtype each
  argon_u32 activation;  // ARGON_ACT_*
  argon_u32 pad0;        // explicit tail padding (the struct is 8-byte aligned)
};
static_assert(sizeof(ArgonSwigluParams) == 40, "ArgonSwigluParams: 2 x u64 + 6 x u32");

// swiglu_backward's params (swiglu_backward.metal): out[r, i] = grad_out * up * act'(gate) and
// out[r, I + i] = grad_out * act(gate), in gate's dtype; gate and up laid out as for swiglu.
struct ArgonSwigluBackwardParams {
  argon_u64 in_stride;    // elements between rows of gate / up (I, or 2I for one fused tensor)
  argon_u64 up_offset;    // elements from the gate buffer's start to up (fused: I)
  argon_u32 rows;         // R
  argon_u32 cols;         // I (grad_out is [R, I] contiguous, out [R, 2I])
  argon_u32 grad_dtype;   // ArgonDtype of grad_out
  argon_u32 value_dtype;  // ArgonDtype of gate, up and out
  argon_u32 activation;   // ARGON_ACT_*
  argon_u32 pad0;         // explicit tail padding (the struct is 8-byte aligned)
};
static_assert(sizeof(ArgonSwigluBackwardParams) == 40,
              "ArgonSwigluBackwardParams: 2 x u64 + 6 x u32");
