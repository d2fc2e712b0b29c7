// What every argon Metal kernel's parameters share: the field types, the float storage types, and
// the launch geometry of the row-wise kernels. Each op family's params struct lives in its own
// header next to its kernels (plan_params.h, gather_params.h, combine_params.h, swiglu_params.h,
// moe_mm_params.h); the host C++ includes the same headers, so the two sides cannot disagree on
// a layout. Plain old data, passed with set_bytes on the GPU and by pointer on the host. No
// shader header includes anything outside torch_argon/metal/.
//
// The field-type rule, for every params struct:
//   - counts, sizes, indices, codes and flags: argon_u32 (argon_i32 where negative is meaningful);
//   - strides and offsets (in elements or bytes): argon_u64, one field (Metal's ulong), never a
//     value split by hand into 32-bit words;
//   - 64-bit fields first, so neither side inserts padding; each struct's size is asserted below
//     its definition (static_assert works in Metal too).
#pragma once

#ifdef __METAL_VERSION__
typedef uint argon_u32;
typedef int argon_i32;
typedef ulong argon_u64;
#else
#include <stdint.h>
typedef uint32_t argon_u32;
typedef int32_t argon_i32;
typedef uint64_t argon_u64;
#endif

// Float storage types, as the host names them to the kernels.
enum ArgonDtype { ARGON_F32 = 0, ARGON_F16 = 1, ARGON_BF16 = 2 };

// Threads per threadgroup of the row-wise kernels (gather, combine, swiglu, moe_mm_rows): one
// threadgroup covers 256 consecutive elements (or 4-element vectors) of one row.
#define ARGON_ELEMWISE_THREADS 256
