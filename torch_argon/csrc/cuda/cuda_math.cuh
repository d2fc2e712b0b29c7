// The primitives the shared activations (shared/activation.h) take from a backend, for the CUDA
// kernels (swiglu, swiglu_backward): CUDA's expf, erff, tanhf (not the __expf intrinsics).
#pragma once

namespace argon::cuda {

struct CudaMath {
  static __host__ __device__ __forceinline__ float expf(float x) { return ::expf(x); }
  static __host__ __device__ __forceinline__ float erff(float x) { return ::erff(x); }
  static __host__ __device__ __forceinline__ float tanhf(float x) { return ::tanhf(x); }
};

}  // namespace argon::cuda
