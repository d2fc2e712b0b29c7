// The host's table of compiled .metal kernels: name -> adapter that calls the kernel function with
// the encoder's bindings and the lane's position, plus whether it synchronises (threadgroup memory,
// barriers, simd collectives), which decides between lane threads and a plain loop.
// setup.py generates one translation unit per .metal file that compiles it and registers its
// kernels here (build_tools/metal_codegen.py: build/argon_generated/host_kernels/).
#pragma once
#include <cstring>
#include <string>

#include "lane_sync.h"

namespace argon_host {

constexpr int kMaxBindings = 31;  // [[buffer(0)]] .. [[buffer(30)]], as Metal allows
constexpr size_t kMaxBytes = 256;

// The buffers and bytes bound by the encoder, as the kernel's parameters expect them.
struct Bindings {
  void* ptrs[kMaxBindings] = {};
  alignas(16) unsigned char bytes[kMaxBindings][kMaxBytes] = {};

  struct AnyPtr {  // converts to whatever pointer type the kernel parameter has
    void* p;
    template <typename T>
    operator T*() const { return static_cast<T*>(p); }
  };
  AnyPtr buf(int i) const { return AnyPtr{ptrs[i]}; }
  template <typename P>
  const P& param(int i) const { return *reinterpret_cast<const P*>(bytes[i]); }
};

using KernelFn = void (*)(const Bindings&, const LanePosition&);

struct KernelEntry {
  KernelFn fn = nullptr;
  bool synchronising = false;
};

const KernelEntry& find_kernel(const std::string& name);  // throws for an unknown name

struct KernelRegistrar {
  KernelRegistrar(const char* name, bool synchronising, KernelFn fn);
};

}  // namespace argon_host
