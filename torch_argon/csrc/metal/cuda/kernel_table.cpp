#include "metal/cuda/kernel_table.h"

#include <map>
#include <stdexcept>

namespace argon_cuda {
namespace {
std::map<std::string, Launcher>& table() {
  static std::map<std::string, Launcher> t;
  return t;
}
}  // namespace

Launcher find_kernel(const std::string& name) {
  auto it = table().find(name);
  if (it == table().end()) throw std::invalid_argument("no metal_cuda kernel named " + name);
  return it->second;
}

KernelRegistrar::KernelRegistrar(const char* name, Launcher launch) { table()[name] = launch; }

}  // namespace argon_cuda
