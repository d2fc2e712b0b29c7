// The q8 integer GEMM of moe_qmm on the CPU (activation_quant="q8"): the data it moves between
// its steps and the table of kernels each ISA variant provides (q8_kernels_<isa>.cpp).
//
// Steps (moe_qmm_q8_cpu.cpp runs them):
// 1. quantize: every row of xs once per call, as torch_argon/quant/activation_q8.py defines it:
//    int8 codes, one float32 scale d per 32 values, and the sum of the codes per 16 values.
// 2. decode: a task's block of weight rows (output columns) into a Panel: the codes of 16
//    columns interleaved by 4 values (the layout of one vpdpbusd: 16 int32 lanes, each the dot
//    product of 4 code bytes of its column with 4 broadcast activation bytes), then per 16
//    columns and sub-block the scales s (and mins m) of q8_decode.h.
// 3. gemm: C[r, n] = sum over sub-blocks of d * (s[n] * isum - m[n] * qsum), isum the integer
//    dot product of the sub-block, qsum the sum of its activation codes.
//
// Code bias: vpdpbusd multiplies UNSIGNED bytes (the weights) by signed bytes (the activations),
// so the VNNI variants store code + 128 and start each integer sum at -128 * qsum, which makes
// it exact again; the other variants store the signed codes (bias 0).
//
// Torch-free: the ISA files include it and compile on their own.
#pragma once
#include <cstdint>
#include <type_traits>

namespace argon::q8 {

constexpr int kBlock = 32;  // activation values per scale (quant/activation_q8.py)
constexpr int kCols = 16;   // panel columns per group: one int32 lane each in a 512-bit register
constexpr int kQuad = 4;    // code bytes of one column next to each other in the panel

enum class Dtype : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

// The quantized rows of xs: row r's codes at q + r * n_in (n_in bytes), its scales at
// d + r * (n_in / 32), its code sums at sum + r * (n_in / 16).
struct Rows {
  const int8_t* q;
  const float* d;
  const int32_t* sum;
  int64_t n_in;
};

// A decoded block of weight rows: `groups` groups of 16 columns (the last padded with code 0 and
// scale 0), each `codes` n_in * 16 bytes ((k / 4) * 64 + column * 4 + k % 4), `scales` and `mins`
// n_in / sub * 16 floats (sub-block * 16 + column; mins only for formats with them).
struct Panel {
  uint8_t* codes;
  float* scales;
  float* mins;
  int64_t groups;
  int64_t n_in;
};

// Bytes and floats a panel of `cols` columns of n_in values takes (the caller's buffers).
inline int64_t panel_groups(int64_t cols) { return (cols + kCols - 1) / kCols; }
inline int64_t panel_code_bytes(int64_t cols, int64_t n_in) {
  return panel_groups(cols) * kCols * n_in;
}
inline int64_t panel_scale_floats(int64_t cols, int64_t n_in) {
  return panel_groups(cols) * kCols * (n_in / 16);  // enough for a sub-block of 16
}

// rows x n_in values of xs (element (r, k) at x + r * row_stride + k * col_stride, in elements)
// into codes q [rows, n_in], scales d [rows, n_in / 32], sums [rows, n_in / 16].
using QuantizeFn = void (*)(Dtype dtype, const void* x, int64_t row_stride, int64_t col_stride,
                            int64_t rows, int64_t n_in, int8_t* q, float* d, int32_t* sum);
// `cols` weight rows (row c at w + c * row_stride, GGUF blocks of n_in values) into `panel`.
using DecodeFn = void (*)(const uint8_t* w, int64_t row_stride, int64_t cols, const Panel& panel);
// c[r * ldc + n] = the q8 product of rows [r0, r0 + rows) of x with the panel's columns n
// (all panel.groups * 16 of them are written). sub: 16 or 32; with_min: the panel has mins.
using GemmFn = void (*)(const Rows& x, int64_t r0, int64_t rows, const Panel& panel, int sub,
                        bool with_min, float* c, int64_t ldc);

// f(sub, with_min) with both as compile-time constants (std::integral_constant, bool_constant):
// a variant's GEMM instantiates its kernel for the four (sub-block, min) kinds through it.
template <typename F>
inline void with_sub_and_min(int sub, bool with_min, F&& f) {
  using Sub16 = std::integral_constant<int, 16>;
  using Sub32 = std::integral_constant<int, 32>;
  if (sub == 16) {
    with_min ? f(Sub16{}, std::true_type{}) : f(Sub16{}, std::false_type{});
  } else {
    with_min ? f(Sub32{}, std::true_type{}) : f(Sub32{}, std::false_type{});
  }
}

// Decoders in the order of ARGON_Q8_DECODERS (q8_decode.h).
constexpr int kFormats = 13;

struct Kernels {
  const char* isa;
  QuantizeFn quantize;
  DecodeFn decode[kFormats];
  GemmFn gemm;
};

// One table per ISA variant (q8_kernels_<isa>.cpp); nullptr where this build or platform has
// no such variant.
const Kernels* kernels_portable();
const Kernels* kernels_avx2();
const Kernels* kernels_avx512();

}  // namespace argon::q8
