// The argon _out ops on MPS: the shared op bodies (metal/out_ops.cpp) with a target that
// encodes into the current MPS stream. The recipe runs first into a CommandRecorder, and
// pipelines are fetched, outside the dispatch block; inside it (dispatch_sync on the stream's
// queue) the commands are replayed into the stream's shared compute encoder. No second encoder,
// no commit, no wait: PyTorch commits the stream when it needs to. The host target replays the
// same recorder into the host runner, so only StreamEncoder's four calls are Mac-only code.
#include <ATen/mps/MPSStream.h>
#include <torch/library.h>

#include <string>
#include <unordered_map>

#include "metal/out_ops.h"
#include "metal_library.h"

namespace argon::metal {
namespace {

// The stream's compute encoder behind the recipe's Encoder interface. Pipelines come from a
// table filled before the dispatch block, so nothing inside it compiles, allocates or throws.
class StreamEncoder final : public Encoder {
 public:
  StreamEncoder(id<MTLComputeCommandEncoder> enc,
                const std::unordered_map<std::string, id<MTLComputePipelineState>>* pipelines)
      : enc_(enc), pipelines_(pipelines) {}
  void set_kernel(const char* name) override {
    [enc_ setComputePipelineState:pipelines_->at(name)];
  }
  void set_buffer(uint32_t index, const BufArg& buf) override {
    [enc_ setBuffer:(__bridge id<MTLBuffer>)buf.handle offset:buf.offset atIndex:index];
  }
  void set_bytes(uint32_t index, const void* data, size_t size) override {
    [enc_ setBytes:data length:size atIndex:index];
  }
  void dispatch(Size3 groups, Size3 threads) override {
    [enc_ dispatchThreadgroups:MTLSizeMake(groups.x, groups.y, groups.z)
         threadsPerThreadgroup:MTLSizeMake(threads.x, threads.y, threads.z)];
  }

 private:
  id<MTLComputeCommandEncoder> enc_;
  const std::unordered_map<std::string, id<MTLComputePipelineState>>* pipelines_;
};

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
    if (recorder.commands().empty()) return;
    // Pipelines (compiled on first use) and the threadgroup-size check, before the block.
    std::unordered_map<std::string, id<MTLComputePipelineState>> pipelines;
    id<MTLComputePipelineState> current = nil;
    for (const auto& c : recorder.commands()) {
      if (c.kind == CommandRecorder::Kind::Kernel) {
        current = argon::mps::pipeline(c.kernel);
        pipelines.emplace(c.kernel, current);
      } else if (c.kind == CommandRecorder::Kind::Dispatch) {
        const uint64_t threads = uint64_t(c.threads.x) * c.threads.y * c.threads.z;
        TORCH_CHECK(current && threads <= [current maxTotalThreadsPerThreadgroup],
                    "argon: a kernel needs ", threads, " threads per threadgroup; this device "
                    "allows ", current ? [current maxTotalThreadsPerThreadgroup] : 0);
      }
    }
    const CommandRecorder* commands = &recorder;
    const auto* table = &pipelines;
    at::mps::MPSStream* stream = at::mps::getCurrentMPSStream();
    dispatch_sync(stream->queue(), ^() {
      @autoreleasepool {
        StreamEncoder enc(stream->commandEncoder(), table);
        commands->replay(enc);
      }
    });
  }
};

Target& mps_target() {
  static MpsTarget t;
  return t;
}

}  // namespace

TORCH_LIBRARY_IMPL(argon, MPS, m) {
  register_out_ops<mps_target>(m);
}

}  // namespace argon::metal
