// The host implementation of the recipe's encoder: set_kernel looks the kernel up in the host
// table, bindings persist between dispatches (as on a Metal encoder), and dispatch runs the grid
// on the lane runner right away.
#pragma once
#include "kernel_table.h"
#include "metal/encoder.h"

namespace argon_host {

class HostEncoder final : public argon::metal::Encoder {
 public:
  void set_kernel(const char* name) override;
  void set_buffer(uint32_t index, const argon::metal::BufArg& buf) override;
  void set_bytes(uint32_t index, const void* data, size_t size) override;
  void dispatch(argon::metal::Size3 groups, argon::metal::Size3 threads) override;

 private:
  std::string name_;
  const KernelEntry* kernel_ = nullptr;
  Bindings bindings_;
};

}  // namespace argon_host
