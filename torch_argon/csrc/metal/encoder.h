// The encoder interface the Metal launch recipe (recipe.h) is written against, which two
// backends implement: the MPS stream's compute encoder (mps/) and the host runner that executes
// the same .metal files on CPU threads (host/); and a recorder of it. Free of torch, so the
// standalone ThreadSanitizer build uses it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

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
