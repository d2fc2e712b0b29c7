// The argon _out ops on MPS: the shared op bodies (metal_recipe_ops.cpp) with a target that
// encodes into the current MPS stream. The recipe runs first into a CommandRecorder, and
// pipelines are fetched, outside the dispatch block; inside it (dispatch_sync on the stream's
// queue) the commands are replayed into the stream's shared compute encoder. No second encoder,
// no commit, no wait: PyTorch commits the stream when it needs to.
#include <ATen/mps/MPSStream.h>
#include <torch/library.h>

#include <vector>

#include "../metal_recipe_ops.h"
#include "metal_library.h"

namespace argon::metal {
namespace {

class MpsTarget final : public Target {
 public:
  BufArg bind(const at::Tensor& t) override {
    // On MPS a storage's data pointer is its id<MTLBuffer>; the tensor starts storage_offset in.
    return BufArg{const_cast<void*>(t.storage().data()),
                  static_cast<uint64_t>(t.storage_offset()) * t.element_size()};
  }

  void encode(const std::function<void(Encoder&)>& body) override {
    CommandRecorder recorder;
    body(recorder);
    const std::vector<CommandRecorder::Command>& commands = recorder.commands();
    std::vector<id<MTLComputePipelineState>> pipelines;
    id<MTLComputePipelineState> current = nil;
    for (const auto& c : commands) {
      if (c.kind == CommandRecorder::Kind::Kernel) {
        current = argon::mps::pipeline(c.kernel);
        pipelines.push_back(current);
      } else if (c.kind == CommandRecorder::Kind::Dispatch) {
        const uint64_t threads = uint64_t(c.threads.x) * c.threads.y * c.threads.z;
        TORCH_CHECK(current && threads <= [current maxTotalThreadsPerThreadgroup],
                    "argon: a kernel needs ", threads, " threads per threadgroup; this device "
                    "allows ", current ? [current maxTotalThreadsPerThreadgroup] : 0);
      }
    }
    if (commands.empty()) return;
    const auto* cmds = &commands;
    const auto* psos = &pipelines;
    at::mps::MPSStream* stream = at::mps::getCurrentMPSStream();
    dispatch_sync(stream->queue(), ^() {
      @autoreleasepool {
        id<MTLComputeCommandEncoder> enc = stream->commandEncoder();
        size_t next_pipeline = 0;
        for (const auto& c : *cmds) {
          switch (c.kind) {
            case CommandRecorder::Kind::Kernel:
              [enc setComputePipelineState:(*psos)[next_pipeline++]];
              break;
            case CommandRecorder::Kind::Buffer:
              [enc setBuffer:(__bridge id<MTLBuffer>)c.buf.handle offset:c.buf.offset atIndex:c.index];
              break;
            case CommandRecorder::Kind::Bytes:
              [enc setBytes:c.bytes.data() length:c.bytes.size() atIndex:c.index];
              break;
            case CommandRecorder::Kind::Dispatch:
              [enc dispatchThreadgroups:MTLSizeMake(c.groups.x, c.groups.y, c.groups.z)
                  threadsPerThreadgroup:MTLSizeMake(c.threads.x, c.threads.y, c.threads.z)];
              break;
          }
        }
      }
    });
  }
};

Target& mps_target() {
  static MpsTarget t;
  return t;
}

using Ops = OutOps<mps_target>;

}  // namespace

TORCH_LIBRARY_IMPL(argon, MPS, m) {
  m.impl("moe_plan_out", TORCH_FN(Ops::plan));
  m.impl("moe_gather_out", TORCH_FN(Ops::gather));
  m.impl("moe_combine_out", TORCH_FN(Ops::combine));
  m.impl("swiglu_out", TORCH_FN(Ops::swiglu));
  m.impl("moe_mm_out", TORCH_FN(Ops::moe_mm));
}

}  // namespace argon::metal
