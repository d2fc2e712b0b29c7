// Which build of the gpuq kernels a unit belongs to: the GPU's (nvcc, torch_argon._C) or the
// host emulation's (torch_argon._C_test). Every gpuq function lives in gpuq::GPUQ_TARGET, an
// inline namespace, so the two builds' functions have different names: where both libraries are
// loaded, neither can bind to the other's (nvcc's host pass makes a stub of every device
// function, which must never stand in for the emulation's).
#pragma once

#if defined(__CUDACC__) || defined(GPUQ_GLUE_FOR_CUDA)
#define GPUQ_TARGET cuda_target
#else
#define GPUQ_TARGET host_target
#endif

// `#pragma unroll` for nvcc, nothing for the host compiler (which does not know it).
#if defined(__CUDACC__)
#define GQ_UNROLL _Pragma("unroll")
#else
#define GQ_UNROLL
#endif
