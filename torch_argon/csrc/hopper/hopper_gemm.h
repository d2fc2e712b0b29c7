// The Hopper grouped GEMM's C entry points (csrc/hopper/*.cu, built by nvcc for sm_90a against
// CUTLASS 3's headers: build_tools/hopper_build.py), as the torch glue (hopper_ops.cpp) calls
// them. Free of torch and of CUDA headers, so that the C++ glue includes it as it is.
//
// The GEMM, for every expert e of the plan (groups of rows that the plan already laid out):
//
//   d[offsets[e] + r, :] = a[offsets[e] + r, :] @ b[e]^T      for r < counts[e]
//
// a [rows, k] and d [rows, n] row-major, b [n_groups, n, k] (each expert's weight row-major,
// i.e. K-major, as the experts' stacks are stored), fp16 or bf16, fp32 accumulation, d in a's
// dtype. Every other row of d (the plan's padding and tail) is left as it was. offsets and counts
// are the plan's int32 device tensors: the problem shapes and the per-expert pointers are made
// from them on the device, so a launch reads nothing back (CUDA graphs capture it). a and d have
// `rows` rows: a group whose rows would fall outside them is clipped to the rows inside (empty
// where it starts outside), so offsets and counts that no plan makes never reach past a or d.
#pragma once
#include <cstddef>
#include <cstdint>

extern "C" {

// The tile configurations the unit is built with, by index (the `config` argument). The names
// are the Python side's (torch_argon/hopper/configs.py lists them in this order):
//   0 "pingpong_64x128"       ping-pong consumers, tile 64 x 128 x 64, cluster 1 x 1
//   1 "pingpong_128x128"      ping-pong consumers, tile 128 x 128 x 64, cluster 1 x 1
//   2 "cooperative_128x256"   cooperative consumers, tile 128 x 256 x 64, cluster 2 x 1
enum { ARGON_HOPPER_N_CONFIGS = 3 };

enum ArgonHopperDtype { ARGON_HOPPER_FP16 = 0, ARGON_HOPPER_BF16 = 1 };

// Bytes of device workspace a launch of (dtype, config) over n_groups experts needs on a device
// of sm_count multiprocessors: the problem shapes, pointer and stride arrays, then CUTLASS's own
// (its tensor-map slots per multiprocessor). From these four numbers alone (no data).
size_t argon_hopper_workspace_bytes(int dtype, int config, int n_groups, int sm_count);

// One launch: the operands (a [rows, k], b [n_groups, n, k], d [rows, n], device pointers of one
// element type), the plan's offsets [n_groups + 1] and counts [n_groups] (int32, on the device),
// the workspace (workspace_bytes bytes of device memory, 128-byte aligned), the device's
// multiprocessor count and the cudaStream_t to launch on.
typedef struct ArgonHopperGemm {
  int dtype;   // ArgonHopperDtype
  int config;  // an index of the list above
  const void* a;
  const void* b;
  void* d;
  const int32_t* offsets;
  const int32_t* counts;
  int n_groups;
  int64_t rows;
  int n;
  int k;
  void* workspace;
  size_t workspace_bytes;
  int sm_count;
  void* stream;
} ArgonHopperGemm;

// Launches the grouped GEMM. Returns 0, or 1 with a message in err (a configuration CUTLASS
// refused, a launch the runtime refused); nothing is launched after an error.
int argon_hopper_grouped_gemm(const ArgonHopperGemm* gemm, char* err, int err_len);
}
