// The Q4_K mixed-input Hopper GEMM's C entry point (hopper_mixed_q4k_*.cu, built by nvcc for
// sm_90a against CUTLASS's headers like the padded GEMM's units: build_tools/hopper_build.py).
// Free of torch and of CUDA headers. Ran on an H100 (2026-12-06: its 99 GPU tests pass;
// bench/results/h100_quant_mixed.json).
//
// The GEMM, over a plan made with tile_m = 128 (every expert's rows padded to whole 128-row
// tiles), with the weights as torch_argon/quant/mixed_repack.py repacks a Q4_K stack:
//
//   d[128 m + r, j] = sum_k x[128 m + r, k] * w[tile_expert[m]][j, k]   for r < 128, m < used
//   w[e][j, k] = bf16(q[e, j, k] * s[e, j, k / 32] + z[e, j, k / 32])
//
// x [rows, k] bf16 row-major with rows = 128 * max_tiles_m; codes [n_experts, n, k / 2] uint8
// (4-bit, low nibble first); scales and zeros [n_experts, k / 64, n] uint32, each the bf16 bits
// of groups 2t (low half) and 2t + 1 (high half) of K tile t; d [rows, n] bf16, fp32
// accumulation. Every row of a used tile is written; tiles past the used count are left as they
// were; a used tile whose expert is outside [0, n_experts) is written with zeros (the padded
// scheduler's rules, hopper_padded_scheduler.cuh). The launch reads nothing back.
#pragma once
#include <cstdint>

extern "C" {

typedef struct ArgonHopperMixedQ4kGemm {
  const void* x;         // bf16 [rows, k]
  const void* codes;     // uint8 [n_experts, n, k / 2]
  const void* scales;    // uint32 [n_experts, k / 64, n]
  const void* zeros;     // uint32 [n_experts, k / 64, n]
  void* d;               // bf16 [rows, n]
  const int32_t* tile_expert;  // [max_tiles_m], the plan's
  const int32_t* used_tiles;   // the plan's meta[ARGON_META_N_TILES], on the device
  int max_tiles_m;
  int n_experts;
  int n;  // a multiple of 8
  int k;  // a multiple of 256
  int sm_count;
  void* stream;
} ArgonHopperMixedQ4kGemm;

// Launches the GEMM (no workspace). Returns 0, or 1 with a message in err (n or k out of range,
// a configuration CUTLASS refused, a launch the runtime refused).
int argon_hopper_mixed_q4k_gemm(const ArgonHopperMixedQ4kGemm* gemm, char* err, int err_len);
}
