// Dispatch over the three float data types argon accepts (fp32, fp16, bf16).
#pragma once
#include <ATen/Dispatch.h>

#define ARGON_DISPATCH_FLOAT(TYPE, NAME, ...) \
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, TYPE, NAME, __VA_ARGS__)

// Two nested dispatches: `in_t` for the input, `out_t` for the output.
#define ARGON_DISPATCH_FLOAT_PAIR(IN_TYPE, OUT_TYPE, NAME, ...)                         \
  ARGON_DISPATCH_FLOAT(IN_TYPE, NAME, [&] {                                            \
    using in_t = scalar_t;                                                             \
    ARGON_DISPATCH_FLOAT(OUT_TYPE, NAME, [&] {                                         \
      using out_t = scalar_t;                                                          \
      __VA_ARGS__();                                                                   \
    });                                                                                \
  })
