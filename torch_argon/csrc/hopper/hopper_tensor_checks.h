// The argument checks the Hopper GEMMs' torch glue shares (hopper_ops.cpp: the ptr-array grouped
// GEMM; hopper_padded_ops.cpp: the padded one): dtypes, plan vectors, devices, and TMA's 16-byte
// alignment of the operands. Every failure is a ValueError naming the caller's argument.
#pragma once

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include <cstdint>
#include <limits>

namespace argon::hopper_ops {

constexpr int64_t kTmaAlign = 16;  // TMA: 16-byte aligned base addresses and row strides

inline void check_matrix_dtype(const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16, name,
                    " must be float16 or bfloat16, got ", t.scalar_type());
}

inline void check_plan_vector(const at::Tensor& t, const char* name, int64_t size) {
  TORCH_CHECK_VALUE(t.dim() == 1 && t.size(0) == size && t.scalar_type() == at::kInt, name,
                    " must be int32 of shape [", size, "] (the plan's), got ", t.scalar_type(),
                    " of shape ", t.sizes());
}

inline void check_same_device(const at::Tensor& t, const char* name, const at::Tensor& a) {
  TORCH_CHECK_VALUE(t.device() == a.device(), name, " is on ", t.device(), ", a on ", a.device(),
                    ": every tensor must be on one device");
}

// a [R, K] and w [E, N, K] of one fp16 / bf16 dtype, K and N multiples of 8 (16-byte TMA rows),
// E, N and K in int32 (CUTLASS's problem shapes).
inline void check_operands(const at::Tensor& a, const at::Tensor& w) {
  TORCH_CHECK_VALUE(a.dim() == 2, "a must be [R, K], got shape ", a.sizes());
  TORCH_CHECK_VALUE(w.dim() == 3, "w must be [E, N, K], got shape ", w.sizes());
  check_matrix_dtype(a, "a");
  TORCH_CHECK_VALUE(w.scalar_type() == a.scalar_type(), "w must have a's dtype ",
                    a.scalar_type(), ", got ", w.scalar_type());
  TORCH_CHECK_VALUE(w.size(2) == a.size(1), "w's last dimension (K) must equal a's, got ",
                    w.size(2), " and ", a.size(1));
  TORCH_CHECK_VALUE(w.size(0) > 0 && w.size(0) <= std::numeric_limits<int32_t>::max(),
                    "w must hold between 1 and 2^31 - 1 experts, got ", w.size(0));
  TORCH_CHECK_VALUE(a.size(1) > 0 && a.size(1) % 8 == 0 && w.size(1) % 8 == 0,
                    "K (a's columns) and N (w's rows) must be multiples of 8 (16-byte rows), K "
                    "positive, "
                    "got K=", a.size(1), " N=", w.size(1));
  TORCH_CHECK_VALUE(w.size(1) <= std::numeric_limits<int32_t>::max() &&
                        a.size(1) <= std::numeric_limits<int32_t>::max(),
                    "N and K must fit in int32, got N=", w.size(1), " K=", a.size(1));
}

inline bool tma_ready(const at::Tensor& t) {
  return t.is_contiguous() && reinterpret_cast<uintptr_t>(t.data_ptr()) % kTmaAlign == 0;
}

// t itself, or a dense copy at a fresh (aligned) address where TMA could not read it.
inline at::Tensor tma_readable(const at::Tensor& t) {
  return tma_ready(t) ? t : t.clone(at::MemoryFormat::Contiguous);
}

// out: the op's output of `shape` in a's dtype, on a's device, where TMA can write it.
inline void check_out(const at::Tensor& out, at::IntArrayRef shape, const at::Tensor& a) {
  TORCH_CHECK_VALUE(out.sizes() == shape && out.scalar_type() == a.scalar_type(), "out must be ",
                    a.scalar_type(), " of shape ", shape, ", got ", out.scalar_type(),
                    " of shape ", out.sizes());
  check_same_device(out, "out", a);
  TORCH_CHECK_VALUE(tma_ready(out), "out must be contiguous with a 16-byte aligned address");
}

// The current device's properties, after checking that it runs sm_90a code (what: the kernel's
// name for the message). Call under a device guard of the operands' device.
inline const cudaDeviceProp* sm90a_device(const char* what) {
  const cudaDeviceProp* prop = at::cuda::getCurrentDeviceProperties();
  TORCH_CHECK_NOT_IMPLEMENTED(prop->major == 9 && prop->minor == 0, what,
                              " runs on compute capability 9.0 (sm_90a code), this GPU is ",
                              prop->major, ".", prop->minor);
  return prop;
}

}  // namespace argon::hopper_ops
