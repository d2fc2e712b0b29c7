#include "metal/cuda/cuda_encoder.h"

#include <cstring>
#include <stdexcept>

namespace argon_cuda {

void CudaEncoder::set_kernel(const char* name) {
  launch_ = find_kernel(name);
  name_ = name;
}

void CudaEncoder::set_buffer(uint32_t index, const argon::metal::BufArg& buf) {
  if (index >= kMaxBindings) throw std::out_of_range("buffer index beyond the binding table");
  bindings_.ptrs[index] = static_cast<char*>(buf.handle) + buf.offset;
}

void CudaEncoder::set_bytes(uint32_t index, const void* data, size_t size) {
  if (index >= kMaxBindings || size > kMaxBytes) throw std::out_of_range("set_bytes too large");
  std::memcpy(bindings_.bytes[index], data, size);
}

void CudaEncoder::dispatch(argon::metal::Size3 groups, argon::metal::Size3 threads) {
  if (!launch_) throw std::logic_error("dispatch before set_kernel");
  launch_(bindings_, dim3(groups.x, groups.y, groups.z), dim3(threads.x, threads.y, threads.z),
          stream_);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw std::runtime_error("metal_cuda: launching " + name_ + " failed: " +
                             cudaGetErrorString(err));
  }
}

}  // namespace argon_cuda
