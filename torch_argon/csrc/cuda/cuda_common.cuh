// Helpers shared by the CUDA kernels: launch checks, the current stream, fixed-width vectors for
// 16-byte loads and stores, and float conversion of the three data types argon accepts.
//
// Conversions go through c10::Half / c10::BFloat16, whose device code rounds to nearest even,
// the same rounding the CPU backend and the reference use, so gather and combine are bit-exact.
#pragma once
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>

namespace argon::cuda {

// Every launch is followed by this: a bad configuration surfaces at the op, not later.
#define ARGON_CUDA_CHECK_LAUNCH() C10_CUDA_KERNEL_LAUNCH_CHECK()

inline cudaStream_t stream() { return at::cuda::getCurrentCUDAStream().stream(); }

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
__device__ __forceinline__ int64_t ceil_div_dev(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A grid for a grid-stride loop over `work` items: enough blocks to fill the chip a few
// times over, never more than the work needs, never zero (callers skip empty work first).
inline int grid_for(int64_t work, int threads, int blocks_per_sm = 8) {
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t want = ceil_div(work, threads);
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(want, int64_t{sms} * blocks_per_sm)));
}

// True when `p` (a tensor's data pointer, storage offset included) and every row start
// (row stride `stride_elems` elements of `elem_bytes` each) are aligned to `bytes`.
inline bool rows_aligned(const void* p, int64_t stride_elems, int64_t elem_bytes, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0 && (stride_elems * elem_bytes) % bytes == 0;
}

// N elements of T, loaded and stored as one aligned unit (16 bytes when N * sizeof(T) == 16;
// a 32-byte unit compiles to two 16-byte accesses).
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

template <typename T>
__device__ __forceinline__ float to_float(T x) {
  return static_cast<float>(x);
}

template <typename T>
__device__ __forceinline__ T from_float(float x) {
  return static_cast<T>(x);  // c10::Half / c10::BFloat16: round to nearest even
}

// Load N elements of T starting at p (aligned to the vector) as floats.
template <typename T, int N>
__device__ __forceinline__ void load_as_float(const T* p, float (&out)[N]) {
  const Vec<T, N> v = *reinterpret_cast<const Vec<T, N>*>(p);
#pragma unroll
  for (int j = 0; j < N; ++j) out[j] = to_float(v.v[j]);
}

// Runtime dtype of an optional float operand (combine's shared / residual), so one kernel
// instantiation serves every combination of their dtypes.
enum class FloatKind : int { kF32 = 0, kF16 = 1, kBF16 = 2 };

inline FloatKind float_kind(at::ScalarType t) {
  return t == at::kFloat ? FloatKind::kF32 : t == at::kHalf ? FloatKind::kF16 : FloatKind::kBF16;
}

// Load N consecutive elements of a runtime-typed buffer as floats. `aligned`: the vector path
// (N elements aligned to their size); otherwise element by element.
template <int N>
__device__ __forceinline__ void load_kind_as_float(const void* base, FloatKind kind, int64_t idx,
                                                   float (&out)[N]) {
  switch (kind) {
    case FloatKind::kF32:
      load_as_float<float, N>(static_cast<const float*>(base) + idx, out);
      break;
    case FloatKind::kF16:
      load_as_float<c10::Half, N>(static_cast<const c10::Half*>(base) + idx, out);
      break;
    default:
      load_as_float<c10::BFloat16, N>(static_cast<const c10::BFloat16*>(base) + idx, out);
      break;
  }
}

}  // namespace argon::cuda

namespace argon::cuda {

// One element of a runtime-typed float buffer, as float.
__device__ __forceinline__ float load_kind_scalar(const void* base, FloatKind kind, int64_t idx) {
  switch (kind) {
    case FloatKind::kF32:
      return static_cast<const float*>(base)[idx];
    case FloatKind::kF16:
      return to_float(static_cast<const c10::Half*>(base)[idx]);
    default:
      return to_float(static_cast<const c10::BFloat16*>(base)[idx]);
  }
}

}  // namespace argon::cuda
