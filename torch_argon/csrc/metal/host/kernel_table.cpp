#include "kernel_table.h"

#include <map>
#include <stdexcept>

namespace argon_host {
namespace {
std::map<std::string, KernelEntry>& table() {
  static std::map<std::string, KernelEntry> t;
  return t;
}
}  // namespace

const KernelEntry& find_kernel(const std::string& name) {
  auto it = table().find(name);
  if (it == table().end()) throw std::invalid_argument("no host kernel named " + name);
  return it->second;
}

KernelRegistrar::KernelRegistrar(const char* name, bool synchronising, KernelFn fn) {
  table()[name] = KernelEntry{fn, synchronising};
}

}  // namespace argon_host
