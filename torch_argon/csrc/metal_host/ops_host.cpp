// The `argon_host` op library: the argon _out ops run by the .metal kernels on host threads, on
// CPU tensors, through the same recipe as MPS (metal_recipe_ops.cpp). The test suite selects it
// as backend "metal_host". Like the GPU, out-of-range ids are treated as -1 and counted in meta.
#include <torch/library.h>

#include "host_encoder.h"
#include "lane_runner.h"
#include "metal_recipe_ops.h"

namespace argon::metal {
namespace {

class HostTarget final : public Target {
 public:
  BufArg bind(const at::Tensor& t) override {
    const uint64_t offset = static_cast<uint64_t>(t.storage_offset()) * t.element_size();
    char* data = static_cast<char*>(const_cast<void*>(t.const_data_ptr()));
    return BufArg{data - offset, offset};
  }
  void encode(const std::function<void(Encoder&)>& body) override {
    argon_host::HostEncoder enc;
    try {
      body(enc);
    } catch (const argon_host::LaneError& e) {
      TORCH_CHECK(false, "argon_host: ", e.what());
    }
  }
};

Target& host_target() {
  static HostTarget t;
  return t;
}

using Ops = OutOps<host_target>;

void set_schedule(const std::string& name) { argon_host::set_schedule_override(name.c_str()); }

}  // namespace

// Host-only helper for the Metal tests: pick the lane schedule ("free", "forward", "reverse";
// "" goes back to ARGON_HOST_SCHEDULE).
TORCH_LIBRARY_FRAGMENT(argon_host, m) {
  m.def("set_lane_schedule(str name) -> ()", TORCH_FN(set_schedule));
}

TORCH_LIBRARY_IMPL(argon_host, CPU, m) {
  m.impl("moe_plan_out", TORCH_FN(Ops::plan));
  m.impl("moe_gather_out", TORCH_FN(Ops::gather));
  m.impl("moe_combine_out", TORCH_FN(Ops::combine));
  m.impl("swiglu_out", TORCH_FN(Ops::swiglu));
  m.impl("moe_mm_out", TORCH_FN(Ops::moe_mm));
}

}  // namespace argon::metal
