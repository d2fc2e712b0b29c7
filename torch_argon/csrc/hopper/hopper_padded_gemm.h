// The padded Hopper GEMM's C entry points (csrc/hopper/hopper_padded_*.cu, built by nvcc for
// sm_90a against CUTLASS 3's headers like the grouped GEMM's units: build_tools/hopper_build.py),
// as the torch glue (hopper_padded_ops.cpp) calls them. Free of torch and of CUDA headers.
//
// The GEMM, over a plan made with tile_m = 128 (every expert's rows padded to whole 128-row
// tiles):
//
//   d[128 m + r, :] = a[128 m + r, :] @ b[tile_expert[m]]^T    for r < 128, m < used tiles
//
// a [rows, k] and d [rows, n] row-major with rows = 128 * max_tiles_m, b [n_experts, n, k] (each
// expert's weight row-major, as the experts' stacks are stored), fp16 or bf16, fp32
// accumulation, d in a's dtype. Every row of a used tile is computed and written, padding rows
// included (the gather's -1 rows: zeros in, zeros out); the tiles past the used count are left as
// they were. tile_expert [max_tiles_m] and the used-tile count (one int32, the plan's
// meta[ARGON_META_N_TILES]) are read on the device only: a launch reads nothing back (CUDA graphs
// capture it). A used count outside [0, max_tiles_m] is clipped to it; a used tile whose expert
// is outside [0, n_experts) is written with zeros.
#pragma once
#include <cstddef>
#include <cstdint>

extern "C" {

// The tile configurations the padded units are built with, by index (the `config` argument);
// torch_argon/hopper/configs.py PADDED_CONFIGS lists the names in this order. M is 128 in both:
// the plan's tile.
//   0 "pingpong_128x128"      ping-pong consumers, tile 128 x 128 x 64, cluster 1 x 1
//   1 "cooperative_128x256"   cooperative consumers, tile 128 x 256 x 64, cluster 1 x 1
enum { ARGON_HOPPER_PADDED_N_CONFIGS = 2, ARGON_HOPPER_PADDED_TILE_M = 128 };

// The gate/up GEMM with the activation in its epilogue (argon_hopper_padded_act_gemm below,
// csrc/hopper/hopper_padded_act_epilogue.cuh): b is the gate/up stack with gate and up rows
// interleaved in blocks of 8 (b[e] rows [16 j, 16 j + 8) are gate rows [8 j, 8 j + 8), rows
// [16 j + 8, 16 j + 16) up rows [8 j, 8 j + 8): torch_argon/hopper/padded_ops.py
// interleave_gate_up), n = 2I (a multiple of 16) and d = h [max_tiles_m * 128, I]:
//
//   h[r, c] = rnd(act(g) * u),  g = rnd(a[r] . b[e, 16 (c / 8) + c % 8]),
//                               u = rnd(a[r] . b[e, 16 (c / 8) + 8 + c % 8])
//
// for every row r of a used tile (e its expert), rnd the round to nearest even to the output
// dtype, act(g) * u in fp32 as the swiglu op computes it (argon_gated, csrc/shared/
// activation.h): the bits of hopper_padded_mm on the original stack followed by swiglu.
// activation: ARGON_ACT_* (csrc/shared/swiglu_params.h); the plain GEMM ignores it.

// One launch: the operands (device pointers of one element type: a [max_tiles_m * 128, k],
// b [n_experts, n, k], d [max_tiles_m * 128, n]), the plan's tile_expert [max_tiles_m] and a
// pointer to its used-tile count (int32, on the device), the device's multiprocessor count and
// the cudaStream_t to launch on. dtype is hopper_gemm.h's ArgonHopperDtype.
typedef struct ArgonHopperPaddedGemm {
  int dtype;
  int config;  // an index of the list above
  const void* a;
  const void* b;
  void* d;
  const int32_t* tile_expert;
  const int32_t* used_tiles;
  int max_tiles_m;
  int n_experts;
  int n;
  int k;
  int sm_count;
  void* stream;
  int activation;  // the fused gate/up GEMM's (ARGON_ACT_*)
} ArgonHopperPaddedGemm;

// Launches the padded GEMM (no workspace: nothing per expert is built). Returns 0, or 1 with a
// message in err (a configuration CUTLASS refused, a launch the runtime refused).
int argon_hopper_padded_gemm(const ArgonHopperPaddedGemm* gemm, char* err, int err_len);

// Launches the gate/up GEMM with the activation in its epilogue (above: d is h [rows, n / 2]);
// returns as argon_hopper_padded_gemm, and 1 for an n not a multiple of 16 or an unknown
// activation.
int argon_hopper_padded_act_gemm(const ArgonHopperPaddedGemm* gemm, char* err, int err_len);
}
