// The recipe's encoder on CUDA (the metal_cuda backend): set_kernel looks the kernel up in the
// table of generated wrappers, bindings persist between dispatches (as on a Metal encoder), and
// dispatch launches the wrapper on the stream, a Metal threadgroup as a CUDA block. Free of torch.
#pragma once
#include "metal/cuda/kernel_table.h"
#include "metal/encoder.h"

namespace argon_cuda {

class CudaEncoder final : public argon::metal::Encoder {
 public:
  explicit CudaEncoder(cudaStream_t stream) : stream_(stream) {}
  void set_kernel(const char* name) override;
  void set_buffer(uint32_t index, const argon::metal::BufArg& buf) override;
  void set_bytes(uint32_t index, const void* data, size_t size) override;
  // Throws std::runtime_error naming the kernel when the launch fails.
  void dispatch(argon::metal::Size3 groups, argon::metal::Size3 threads) override;

 private:
  cudaStream_t stream_;
  std::string name_;
  Launcher launch_ = nullptr;
  Bindings bindings_;
};

}  // namespace argon_cuda
