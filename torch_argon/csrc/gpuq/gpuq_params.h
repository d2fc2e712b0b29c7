// The arguments of a gpuq GEMM launch, as one plain struct: the Python side (torch_argon/gpuq)
// fills the same layout through ctypes and passes its address to gpuq_gemm (gpuq_launch.h).
#pragma once
#include <cstdint>

namespace gpuq {

enum Activation : int32_t { kActSilu = 0, kActGelu = 1, kActGeluTanh = 2 };

struct GemmParams {
  const void* x;            // activations: bf16 / fp16 [rows, n_in], or q8 codes int8 [rows, n_in]
  int64_t x_stride;         // bytes between rows of x
  const float* x_scale;     // q8: the float scale per 32 values [rows, n_in / 32]
  int64_t x_scale_stride;   // floats between rows of x_scale
  const int32_t* row_token; // the x row of each plan row (sorted_token), or null: row r is x[r]
  const uint8_t* w;         // GGUF blocks [E, N_w, row_bytes]
  int64_t w_stride_e, w_stride_n;  // bytes
  void* out;                // bf16 / fp16 [R, n_out]
  int64_t out_stride;       // elements
  const int32_t* tile_expert;
  const int32_t* meta;      // the plan's counters (n_tiles at meta_n_tiles_index), or null
  int32_t n_out, n_in, n_blocks, tile_m, rows_per_warp, n_expert, n_a_rows, n_tiles_all;
  int32_t activation, zero_unused, meta_n_tiles_index, out_bf16;
};

}  // namespace gpuq
