// Binding a kernel's arguments by parameter name. The names and [[buffer(i)]] indices come from a
// table that setup.py generates from the .metal files' kernel signatures (build_tools/metal_codegen.py,
// the same parse that generates the host adapters), so the recipe never spells an index: a
// buffer reordered in a kernel moves its binding with it on every backend. Misuse is an error
// when the recipe is recorded (before anything is encoded): a kernel or parameter name the table
// lacks, a parameter bound twice or left unbound, a params struct for a buffer (or the reverse),
// or a params struct whose size is not the kernel's.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <type_traits>

#include "metal/encoder.h"

namespace argon::metal {

// One [[buffer(i)]] parameter of a kernel: its name, its index, and for a `constant T&` (a params
// struct, passed with set_bytes) sizeof(T); 0 for a buffer.
struct KernelParam {
  const char* name;
  uint32_t index;
  uint32_t bytes;
};

struct KernelSignature {
  const char* name;
  const KernelParam* params;
  uint32_t n_params;
};

// The library kernel named `name`, or nullptr.
const KernelSignature* find_signature(std::string_view name);

// One argument for launch(): a buffer, or a params struct passed by value, under the name of the
// kernel parameter it binds.
struct KernelArg {
  const char* name;
  const BufArg* buffer = nullptr;
  const void* bytes = nullptr;
  size_t size = 0;

  KernelArg(const char* n, const BufArg& b) : name(n), buffer(&b) {}
  template <typename Params, typename = std::enable_if_t<!std::is_same_v<Params, BufArg>>>
  KernelArg(const char* n, const Params& p) : name(n), bytes(&p), size(sizeof(Params)) {
    static_assert(std::is_trivially_copyable_v<Params>, "params must be plain old data");
  }
  // `size` bytes at `data` as a params struct (for tests of the binding checks).
  static KernelArg raw_bytes(const char* n, const void* data, size_t size) {
    KernelArg a(n, BufArg{});
    a.buffer = nullptr;
    a.bytes = data;
    a.size = size;
    return a;
  }
};

// set_kernel, every argument at its parameter's index, dispatch. Throws std::logic_error naming
// the kernel and the parameter on any mismatch with the kernel's signature.
void launch(Encoder& enc, const char* kernel, const KernelArg* args, size_t n_args,
            Size3 threadgroups, Size3 threads_per_group);
inline void launch(Encoder& enc, const char* kernel, std::initializer_list<KernelArg> args,
                   Size3 threadgroups, Size3 threads_per_group) {
  launch(enc, kernel, args.begin(), args.size(), threadgroups, threads_per_group);
}

}  // namespace argon::metal
