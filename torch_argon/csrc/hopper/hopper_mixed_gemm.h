// The mixed-input Hopper GEMM's C entry point (hopper_mixed_entry.cu, dispatching to the units
// hopper_mixed_u<bits>_*.cu, built by nvcc for sm_90a against CUTLASS's headers like the padded
// GEMM's units: build_tools/hopper_build.py). Free of torch and of CUDA headers.
//
// The GEMM, over a plan made with tile_m = t, t = tile_rows: 128, or 64 (every expert's rows
// padded to whole t-row tiles), with the weights as torch_argon/quant/mixed_repack.py repacks a
// GGUF stack of 32-value affine groups (w = s * u + z per group):
//
//   d[t m + r, j] = sum_k x[t m + r, k] * w[tile_expert[m]][j, k]   for r < t, m < used
//   w[e][j, k] = bf16(u[e, j, k] * s[e, j, k / 32] + z[e, j, k / 32])
//
// x [rows, k] bf16 row-major with rows = t * max_tiles_m; codes [n_experts, k / 16, n / 16,
// 256 values] (uint8 bytes; bits 4: value o in byte o / 2, the low nibble for even o; bits 8:
// one byte a value): 16 x 16 blocks (row j, k) with the value of (j, k) at o = 32 (j % 8) +
// 8 ((k % 8) / 2) + 4 (k % 2) + 2 ((k % 16) / 8) + (j % 16) / 8 of its block (every thread's
// codes of a K block together: hopper_mixed_convert.cuh, CodesAtom);
// scales and zeros [n_experts, k / 64, n] uint32, each the bf16 bits of groups 2t (low half) and
// 2t + 1 (high half) of K tile t; d [rows, n] bf16, fp32 accumulation. Every row of a used tile
// is written; tiles past the used count are left as they were; a used tile whose expert is
// outside [0, n_experts) is written with zeros (the padded scheduler's rules,
// hopper_padded_scheduler.cuh). The launch reads nothing back.
#pragma once
#include <cstdint>

extern "C" {

typedef struct ArgonHopperMixedGemm {
  const void* x;         // bf16 [rows, k]
  const void* codes;     // uint8 [n_experts, k / 16, n / 16, 32 * code_bits] (above)
  const void* scales;    // uint32 [n_experts, k / 64, n]
  const void* zeros;     // uint32 [n_experts, k / 64, n]
  void* d;               // bf16 [rows, n]
  const int32_t* tile_expert;  // [max_tiles_m], the plan's
  const int32_t* used_tiles;   // the plan's meta[ARGON_META_N_TILES], on the device
  int max_tiles_m;
  int n_experts;
  int n;          // a multiple of 16
  int k;          // a multiple of 64
  int code_bits;  // 4 or 8
  int tile_rows;  // the plan's tile_m, the kernel's token tile: 64 or 128
  int sm_count;
  void* stream;
} ArgonHopperMixedGemm;

// Launches the GEMM (no workspace). Returns 0, or 1 with a message in err (n, k or code_bits
// or tile_rows out of range, a configuration CUTLASS refused, a launch the runtime refused).
int argon_hopper_mixed_gemm(const ArgonHopperMixedGemm* gemm, char* err, int err_len);
}
