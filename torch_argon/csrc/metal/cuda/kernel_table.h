// The metal_cuda backend's table of compiled .metal kernels: name -> launcher of the kernel's
// generated __global__ wrapper, which takes the encoder's bindings ([[buffer(i)]] <- slot i) as
// its arguments. setup.py generates one CUDA unit per .metal file that compiles it through the
// CUDA prelude and registers its kernels here (build_tools/metal_codegen.py:
// build/argon_generated/cuda_kernels/). Free of torch.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace argon_cuda {

constexpr int kMaxBindings = 31;
constexpr size_t kMaxBytes = 256;

struct Bindings {
  void* ptrs[kMaxBindings] = {};
  alignas(16) unsigned char bytes[kMaxBindings][kMaxBytes] = {};

  void* ptr(int i) const { return ptrs[i]; }
  template <typename P>
  const P& param(int i) const { return *reinterpret_cast<const P*>(bytes[i]); }
};

using Launcher = void (*)(const Bindings&, dim3 groups, dim3 threads, cudaStream_t stream);

Launcher find_kernel(const std::string& name);  // throws std::invalid_argument for an unknown name

struct KernelRegistrar {
  KernelRegistrar(const char* name, Launcher launch);
};

}  // namespace argon_cuda
