#include "host_encoder.h"

#include <stdexcept>

#include "lane_runner.h"

namespace argon_host {

void HostEncoder::set_kernel(const char* name) {
  kernel_ = &find_kernel(name);
  name_ = name;
}

void HostEncoder::set_buffer(uint32_t index, const argon::metal::BufArg& buf) {
  if (index >= kMaxBindings) throw std::out_of_range("buffer index beyond the host table");
  bindings_.ptrs[index] = static_cast<char*>(buf.handle) + buf.offset;
}

void HostEncoder::set_bytes(uint32_t index, const void* data, size_t size) {
  if (index >= kMaxBindings || size > kMaxBytes) throw std::out_of_range("set_bytes too large");
  std::memcpy(bindings_.bytes[index], data, size);
  bindings_.ptrs[index] = bindings_.bytes[index];
}

void HostEncoder::dispatch(argon::metal::Size3 groups, argon::metal::Size3 threads) {
  if (!kernel_) throw std::logic_error("dispatch before set_kernel");
  const Bindings bound = bindings_;
  const KernelFn fn = kernel_->fn;
  run_dispatch(name_.c_str(), Dim3{groups.x, groups.y, groups.z},
               Dim3{threads.x, threads.y, threads.z}, kernel_->synchronising,
               [&bound, fn](const LanePosition& l) { fn(bound, l); });
}

}  // namespace argon_host
