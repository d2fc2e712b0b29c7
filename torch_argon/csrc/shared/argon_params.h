// What every argon Metal kernel's parameters share: the field types, the float storage types, and
// the launch geometry of the row-wise kernels. Each op family's params struct has its own header
// in this folder (plan_params.h, gather_params.h, combine_params.h, swiglu_params.h,
// moe_mm_params.h, quant_params.h), written in the common subset of portable.h; the kernels and
// the host C++ include the same headers, so the two sides cannot disagree on a layout. Plain old
// data, passed with set_bytes on the GPU and by pointer on the host.
//
// The field-type rule, for every params struct:
//   - counts, sizes, indices, codes and flags: argon_u32 (argon_i32 where negative is meaningful);
//   - strides and offsets (in elements or bytes): argon_u64, one field (Metal's ulong), never a
//     value split by hand into 32-bit words;
//   - 64-bit fields first, so neither side inserts padding; each struct's size is asserted below
//     its definition (static_assert works in Metal too).
#pragma once

#include "shared/portable.h"  // argon_u32, argon_i32, argon_u64

// Float storage types, as the host names them to the kernels.
enum ArgonDtype { ARGON_F32 = 0, ARGON_F16 = 1, ARGON_BF16 = 2 };

// Threads per threadgroup of the row-wise kernels (gather, combine, swiglu, moe_mm_rows): one
// threadgroup covers 256 consecutive elements (or 4-element vectors) of one row.
#define ARGON_ELEMWISE_THREADS 256
