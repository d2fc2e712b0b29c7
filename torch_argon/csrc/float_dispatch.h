// Dispatch over the float data types argon accepts, shared by the CPU and CUDA kernels.
#pragma once
#include <ATen/ATen.h>

// Dispatch over fp32 / fp16 / bf16 (the checks admit no other type), and over a pair of them
// (`in_t`, `out_t`). Written out rather than AT_DISPATCH_FLOATING_TYPES_AND2, which would also
// instantiate every kernel for double.
#define ARGON_DISPATCH_FLOAT(TYPE, NAME, ...)                                          \
  [&] {                                                                                \
    switch (TYPE) {                                                                    \
      case at::kFloat: {                                                               \
        using scalar_t = float;                                                        \
        return __VA_ARGS__();                                                          \
      }                                                                                \
      case at::kHalf: {                                                                \
        using scalar_t = c10::Half;                                                    \
        return __VA_ARGS__();                                                          \
      }                                                                                \
      case at::kBFloat16: {                                                            \
        using scalar_t = c10::BFloat16;                                                \
        return __VA_ARGS__();                                                          \
      }                                                                                \
      default:                                                                         \
        TORCH_CHECK_VALUE(false, NAME, ": unsupported dtype ", TYPE);                        \
    }                                                                                  \
  }()

#define ARGON_DISPATCH_FLOAT_PAIR(IN_TYPE, OUT_TYPE, NAME, ...)                        \
  ARGON_DISPATCH_FLOAT(IN_TYPE, NAME, [&] {                                            \
    using in_t = scalar_t;                                                             \
    ARGON_DISPATCH_FLOAT(OUT_TYPE, NAME, [&] {                                         \
      using out_t = scalar_t;                                                          \
      __VA_ARGS__();                                                                   \
    });                                                                                \
  })
