// The arguments of the gpuq launches, as plain structs: the torch glue (gpuq_ops.cpp) fills them
// from tensors and the launchers (gpuq_launch.h) pass them to the kernels by value.
#pragma once
#include <cstdint>

namespace gpuq {

enum Activation : int32_t { kActSilu = 0, kActGelu = 1, kActGeluTanh = 2 };

// The element type of an activation or output tensor.
enum FloatKind : int32_t { kBf16 = 0, kFp16 = 1, kFp32 = 2 };

struct GemmParams {
  const void* x;            // activations: bf16 / fp16 [rows, n_in], or q8 codes int8 [rows, n_in]
  int64_t x_stride;         // bytes between rows of x
  const float* x_scale;     // q8: the float scale per 32 values [rows, n_in / 32]
  int64_t x_scale_stride;   // floats between rows of x_scale
  const int32_t* row_token; // the x row of each plan row (sorted_token), or null: row r is x[r]
  const uint8_t* w;         // GGUF blocks [E, N_w, row_bytes]
  int64_t w_stride_e, w_stride_n;  // bytes
  void* out;                // [R, n_out] of out_kind
  int64_t out_stride;       // elements
  const int32_t* tile_expert;
  const int32_t* meta;      // the plan's counters (n_tiles at meta_n_tiles_index), or null
  int32_t n_out, n_in, n_blocks, tile_m, rows_per_warp, n_expert, n_a_rows, n_tiles_all;
  int32_t activation, zero_unused, meta_n_tiles_index, out_kind;
  int32_t row_group0;       // the row group of grid row 0 (a launch of more than 65535 groups)
};

// The decode of GGUF blocks to bf16 / fp16: out[e, n, k] = dequantize(w)[e, n, k] rounded once.
struct DecodeParams {
  const uint8_t* w;                    // GGUF blocks [E, N, row_bytes]
  int64_t w_stride_e, w_stride_n;      // bytes
  void* out;                           // [E, N, n_in] of out_kind (kBf16 or kFp16), rows dense
  int64_t out_stride_e, out_stride_n;  // elements
  int32_t n_expert, n_rows, n_in, out_kind;
  int32_t vector_stores;  // 1: out and its strides are 16-byte aligned (each chunk: 4 stores)
};

}  // namespace gpuq
