// How the Hopper GEMMs' units (hopper_grouped_gemm.cuh, hopper_padded_gemm.cuh) launch a CUTLASS
// device GEMM whose arguments they have built, and how they report a failure: the C entry points
// return 1 with a message in the caller's buffer, and nothing is launched after an error.
#pragma once

#include <cstdio>

#include <cutlass/cutlass.h>

namespace argon_hopper_launch {

// Writes "<kernel>: <what><detail>" into err; returns 1 (the entry points' failure).
inline int fail(char* err, int err_len, const char* kernel, const char* what,
                const char* detail) {
  snprintf(err, static_cast<size_t>(err_len), "%s: %s%s", kernel, what, detail);
  return 1;
}

// CUTLASS's three steps on `args` (can_implement, initialize with `workspace`, run on `stream`),
// then the runtime's launch error; 0, or 1 naming the step that failed.
template <class Gemm>
int launch(const typename Gemm::Arguments& args, void* workspace, cudaStream_t stream,
           const char* kernel, char* err, int err_len) {
  Gemm gemm;
  cutlass::Status status = gemm.can_implement(args);
  if (status != cutlass::Status::kSuccess)
    return fail(err, err_len, kernel, "CUTLASS refused the problem: ",
                cutlassGetStatusString(status));
  status = gemm.initialize(args, workspace, stream);
  if (status != cutlass::Status::kSuccess)
    return fail(err, err_len, kernel, "CUTLASS initialize: ", cutlassGetStatusString(status));
  status = gemm.run(stream);
  if (status != cutlass::Status::kSuccess)
    return fail(err, err_len, kernel, "CUTLASS launch: ", cutlassGetStatusString(status));
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess)
    return fail(err, err_len, kernel, "launch: ", cudaGetErrorString(launched));
  return 0;
}

}  // namespace argon_hopper_launch
