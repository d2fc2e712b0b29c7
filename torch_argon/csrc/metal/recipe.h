// The launch recipe of the argon Metal kernels, written once: which kernels, in which order, with
// which grid, buffer indices and params. It is written against a tiny encoder interface that two
// backends implement: the MPS stream's compute encoder (mps/) and the host runner that executes
// the same .metal files on CPU threads (host/). So every parity test run on the host also
// checks the recipe the GPU uses. Free of torch, so the standalone ThreadSanitizer build uses it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "argon_params.h"
#include "quant_params.h"

namespace argon::metal {

// A buffer binding: a backend handle (MTLBuffer, or the host base pointer) and a byte offset.
// Offsets are real (storage offsets), so alignment decisions are the same on both backends.
struct BufArg {
  void* handle = nullptr;
  uint64_t offset = 0;
};

struct Size3 {
  uint32_t x = 1, y = 1, z = 1;
};

class Encoder {
 public:
  virtual ~Encoder() = default;
  virtual void set_kernel(const char* name) = 0;
  virtual void set_buffer(uint32_t index, const BufArg& buf) = 0;
  virtual void set_bytes(uint32_t index, const void* data, size_t size) = 0;
  virtual void dispatch(Size3 threadgroups, Size3 threads_per_group) = 0;
};

// ---- moe_plan --------------------------------------------------------------------------------
struct PlanLaunch {
  ArgonPlanParams params{};
  uint64_t scratch_ints = 1;  // int32 elements of the block_counts scratch buffer (>= 1)
};
// Throws std::invalid_argument beyond the limits (E > ARGON_PLAN_MAX_EXPERTS, rows beyond int32).
PlanLaunch plan_launch(int64_t T, int64_t K, int64_t E, int64_t tile_m, int64_t r_max,
                       bool ids_64bit, ArgonDtype weight_dtype);
struct PlanBuffers {
  BufArg ids, weights, counts, offsets, sorted_token, sorted_weight, pos, tile_expert, meta, scratch;
};
void encode_plan(Encoder& enc, const PlanLaunch& launch, const PlanBuffers& b);

// ---- moe_gather ------------------------------------------------------------------------------
struct GatherBuffers {
  BufArg x, sorted_token, out;
};
// The kernel the recipe picks for these params and bindings (exposed for tests and logs).
const char* gather_kernel(const ArgonGatherParams& p, const GatherBuffers& b);
void encode_gather(Encoder& enc, const ArgonGatherParams& p, const GatherBuffers& b);

// ---- moe_combine -----------------------------------------------------------------------------
struct CombineBuffers {
  BufArg y, pos, weights, shared, residual, out;  // shared / residual: any buffer when absent
};
void encode_combine(Encoder& enc, const ArgonCombineParams& p, const CombineBuffers& b);

// ---- swiglu ----------------------------------------------------------------------------------
struct SwigluBuffers {
  BufArg gate, up, out;  // fused [R, 2I] input: up = gate, p.up_offset = I
};
void encode_swiglu(Encoder& enc, const ArgonSwigluParams& p, const SwigluBuffers& b);

// ---- moe_mm ----------------------------------------------------------------------------------
struct MoeMmBuffers {
  BufArg xs, w, tile_expert, out;
};
const char* moe_mm_kernel(const ArgonMoeMmParams& p);
void encode_moe_mm(Encoder& enc, const ArgonMoeMmParams& p, const MoeMmBuffers& b);

// ---- dequantize, moe_qmm (quant_params.h; the kernels are per format) -----------------------
// The kernel for ggml type `qtype`, or nullptr for a type without kernels.
const char* dequantize_kernel(uint32_t qtype);
const char* moe_qmm_kernel(uint32_t qtype);
struct DequantizeBuffers {
  BufArg w, out;
};
// Throws std::invalid_argument for a type without kernels or a grid beyond 2^32 threadgroups.
void encode_dequantize(Encoder& enc, uint32_t qtype, const ArgonDequantParams& p,
                       const DequantizeBuffers& b);
struct MoeQmmBuffers {
  BufArg xs, w, tile_expert, out;
};
void encode_moe_qmm(Encoder& enc, uint32_t qtype, const ArgonMoeQmmParams& p,
                    const MoeQmmBuffers& b);

}  // namespace argon::metal

namespace argon::metal {

// An encoder that only records: both targets run the recipe into it first, then replay it into
// their real encoder (the MPS path does so inside the stream's dispatch block, after every check,
// allocation and pipeline lookup), so the host run exercises the same record-then-replay path.
class CommandRecorder final : public Encoder {
 public:
  enum class Kind { Kernel, Buffer, Bytes, Dispatch };
  struct Command {
    Kind kind = Kind::Kernel;
    std::string kernel;      // Kernel
    uint32_t index = 0;      // Buffer, Bytes
    BufArg buf;              // Buffer
    std::string bytes;       // Bytes
    Size3 groups, threads;   // Dispatch
  };
  void set_kernel(const char* name) override {
    Command& c = add(Kind::Kernel);
    c.kernel = name;
  }
  void set_buffer(uint32_t index, const BufArg& buf) override {
    Command& c = add(Kind::Buffer);
    c.index = index;
    c.buf = buf;
  }
  void set_bytes(uint32_t index, const void* data, size_t size) override {
    Command& c = add(Kind::Bytes);
    c.index = index;
    c.bytes.assign(static_cast<const char*>(data), size);
  }
  void dispatch(Size3 groups, Size3 threads) override {
    Command& c = add(Kind::Dispatch);
    c.groups = groups;
    c.threads = threads;
  }
  const std::vector<Command>& commands() const { return commands_; }
  // Issues the recorded commands, in order, to another encoder.
  void replay(Encoder& into) const {
    for (const Command& c : commands_) {
      switch (c.kind) {
        case Kind::Kernel: into.set_kernel(c.kernel.c_str()); break;
        case Kind::Buffer: into.set_buffer(c.index, c.buf); break;
        case Kind::Bytes: into.set_bytes(c.index, c.bytes.data(), c.bytes.size()); break;
        case Kind::Dispatch: into.dispatch(c.groups, c.threads); break;
      }
    }
  }

 private:
  Command& add(Kind kind) {
    commands_.emplace_back();
    commands_.back().kind = kind;
    return commands_.back();
  }
  std::vector<Command> commands_;
};

}  // namespace argon::metal
