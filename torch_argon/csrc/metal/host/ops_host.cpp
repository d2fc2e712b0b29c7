// The `argon_host` op library: the argon _out ops run by the .metal kernels on host threads, on
// CPU tensors, through the same recipe as MPS (metal/out_ops.cpp). The test suite selects it
// as backend "metal_host". Like the GPU, out-of-range ids are treated as -1 and counted in meta.
#include <torch/library.h>

#include "host_encoder.h"
#include "lane_runner.h"
#include "metal/bind.h"
#include "metal/out_ops.h"

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
    CommandRecorder recorder;
    body(recorder);
    argon_host::HostEncoder enc;
    try {
      recorder.replay(enc);
    } catch (const argon_host::LaneError& e) {
      TORCH_CHECK(false, "argon_host: ", e.what());
    }
  }
};

Target& host_target() {
  static HostTarget t;
  return t;
}

void set_schedule(const std::string& name) { argon_host::set_schedule_override(name.c_str()); }

// Runs one threadgroup of `threads` lanes of a lane_selftest.metal kernel; returns its output.
at::Tensor lane_selftest(const std::string& kernel, int64_t threads) {
  TORCH_CHECK(threads >= 1 && threads <= 1024, "threads must be in [1, 1024]");
  at::Tensor out = at::full({threads}, -1, at::kInt);
  host_target().encode([&](Encoder& enc) {
    enc.set_kernel(kernel.c_str());
    enc.set_buffer(0, host_target().bind(out));
    enc.dispatch({1, 1, 1}, {static_cast<uint32_t>(threads), 1, 1});
  });
  return out;
}

// The kernel the recipe picks for a gather of these dtypes, width and storage offsets.
std::string gather_kernel_for(at::ScalarType src, at::ScalarType dst, int64_t cols,
                              int64_t x_offset_bytes, int64_t out_offset_bytes) {
  ArgonGatherParams p{};
  p.cols = static_cast<uint32_t>(cols);
  p.src_dtype = argon_dtype(src);
  p.dst_dtype = argon_dtype(dst);
  GatherBuffers b;
  b.x.offset = static_cast<uint64_t>(x_offset_bytes);
  b.out.offset = static_cast<uint64_t>(out_offset_bytes);
  return gather_kernel(p, b);
}

// The recipe's binding table for one kernel (generated from its signature): the [[buffer(i)]]
// parameters' names, indices and params-struct sizes (0 for a buffer). Empty for an unknown name.
std::tuple<std::vector<std::string>, std::vector<int64_t>, std::vector<int64_t>> kernel_params(
    const std::string& kernel) {
  std::vector<std::string> names;
  std::vector<int64_t> indices, bytes;
  if (const KernelSignature* sig = find_signature(kernel)) {
    for (uint32_t i = 0; i < sig->n_params; ++i) {
      names.emplace_back(sig->params[i].name);
      indices.push_back(sig->params[i].index);
      bytes.push_back(sig->params[i].bytes);
    }
  }
  return {names, indices, bytes};
}

// Records launch(kernel) with `buffers` bound as (null) buffers and `params` as params structs of
// `params_bytes` bytes each; returns the indices bound, in order. Launch's checks raise.
std::vector<int64_t> launch_indices(const std::string& kernel, std::vector<std::string> buffers,
                                    std::vector<std::string> params, int64_t params_bytes) {
  TORCH_CHECK(params_bytes >= 0 && params_bytes <= 256, "params_bytes must be in [0, 256]");
  std::vector<KernelArg> args;
  const BufArg none;
  const std::vector<char> blob(static_cast<size_t>(params_bytes));
  for (const auto& n : buffers) args.emplace_back(n.c_str(), none);
  for (const auto& n : params) args.push_back(KernelArg::raw_bytes(n.c_str(), blob.data(), blob.size()));
  CommandRecorder rec;
  try {
    launch(rec, kernel.c_str(), args.data(), args.size(), {1, 1, 1}, {1, 1, 1});
  } catch (const std::logic_error& e) {
    TORCH_CHECK(false, e.what());
  }
  std::vector<int64_t> indices;
  for (const auto& c : rec.commands()) {
    if (c.kind == CommandRecorder::Kind::Buffer || c.kind == CommandRecorder::Kind::Bytes) {
      indices.push_back(c.index);
    }
  }
  return indices;
}

}  // namespace

// Host-only helpers for tests/test_metal_host.py: the lane schedule ("auto", "free", "forward",
// "reverse"; "" goes back to ARGON_HOST_SCHEDULE), the runner's self-test kernels, the recipe's
// gather kernel choice, and its binding table and checks (bind.h).
TORCH_LIBRARY_FRAGMENT(argon_host, m) {
  m.def("set_lane_schedule(str name) -> ()", TORCH_FN(set_schedule));
  m.def("lane_selftest(str kernel, int threads) -> Tensor", TORCH_FN(lane_selftest));
  m.def("gather_kernel_for(ScalarType src, ScalarType dst, int cols, int x_offset_bytes, "
        "int out_offset_bytes) -> str", TORCH_FN(gather_kernel_for));
  m.def("kernel_params(str kernel) -> (str[], int[], int[])", TORCH_FN(kernel_params));
  m.def("launch_indices(str kernel, str[] buffers, str[] params, int params_bytes) -> int[]",
        TORCH_FN(launch_indices));
}

TORCH_LIBRARY_IMPL(argon_host, CPU, m) {
  register_out_ops<host_target>(m);
}

}  // namespace argon::metal
