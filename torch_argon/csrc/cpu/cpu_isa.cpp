// The CPU ISA variant: detection, TORCH_ARGON_CPU_ISA, and the argon_cpu ops (cpu_isa.h).
#include "cpu_isa.h"

#include <torch/library.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "cpu_isa_targets.h"

namespace argon {
namespace {

constexpr CpuIsa kAllIsas[] = {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAmx};

const q8::Kernels* q8_kernels_for(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kPortable: return q8::kernels_portable();
    case CpuIsa::kAvx2: return q8::kernels_avx2();
    case CpuIsa::kAvx512: return q8::kernels_avx512();
    case CpuIsa::kAmx: return nullptr;
  }
  return nullptr;
}

// Whether this CPU (and the OS, which must save the wider registers: __builtin_cpu_supports
// reads XCR0 as well as cpuid) has the variant's instructions.
bool cpu_has(CpuIsa isa) {
#ifdef ARGON_X86_VARIANTS
  __builtin_cpu_init();
  switch (isa) {
    case CpuIsa::kPortable: return true;
    case CpuIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("bmi2");
    case CpuIsa::kAvx512:
      return cpu_has(CpuIsa::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
    case CpuIsa::kAmx: return false;  // not detected: there are no AMX kernels to run
  }
  return false;
#else
  return isa == CpuIsa::kPortable;
#endif
}

bool runs_here(CpuIsa isa) { return q8_kernels_for(isa) != nullptr && cpu_has(isa); }

CpuIsa parse_isa(const std::string& name, const char* what) {
  for (CpuIsa isa : kAllIsas) {
    if (name == cpu_isa_name(isa)) {
      TORCH_CHECK_VALUE(q8_kernels_for(isa) != nullptr, what, " asks for the CPU variant \"",
                        name, "\", which this build of torch_argon has no kernels for (",
                        isa == CpuIsa::kAmx ? "AMX kernels are not written yet" : "not an x86-64 "
                        "build", "); variants here: ", c10::Join(", ", cpu_isas_here()));
      TORCH_CHECK_VALUE(cpu_has(isa), what, " asks for the CPU variant \"", name, "\", but this "
                        "CPU lacks its instructions; variants here: ",
                        c10::Join(", ", cpu_isas_here()));
      return isa;
    }
  }
  TORCH_CHECK_VALUE(false, what, " must be one of portable, avx2, avx512, amx, got \"", name,
                    "\"");
  return CpuIsa::kPortable;
}

std::atomic<int> chosen{-1};
std::mutex choose_mutex;

CpuIsa choose() {
  const char* env = std::getenv("TORCH_ARGON_CPU_ISA");
  if (env != nullptr && *env != '\0') return parse_isa(env, "TORCH_ARGON_CPU_ISA");
  CpuIsa best = CpuIsa::kPortable;
  for (CpuIsa isa : kAllIsas) {
    if (runs_here(isa)) best = isa;
  }
  return best;
}

std::string isa_op() { return cpu_isa_name(cpu_isa()); }
void set_isa_op(c10::string_view name) {
  chosen.store(static_cast<int>(parse_isa(std::string(name), "set_isa")));
}
std::vector<std::string> isas_op() { return cpu_isas_here(); }

}  // namespace

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kPortable: return "portable";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAmx: return "amx";
  }
  return "?";
}

CpuIsa cpu_isa() {
  int isa = chosen.load(std::memory_order_acquire);
  if (isa < 0) {
    std::lock_guard<std::mutex> lock(choose_mutex);
    isa = chosen.load();
    if (isa < 0) {  // an invalid TORCH_ARGON_CPU_ISA raises here, on every call until fixed
      isa = static_cast<int>(choose());
      chosen.store(isa, std::memory_order_release);
    }
  }
  return static_cast<CpuIsa>(isa);
}

const q8::Kernels& q8_kernels() { return *q8_kernels_for(cpu_isa()); }

std::vector<std::string> cpu_isas_here() {
  std::vector<std::string> names;
  for (CpuIsa isa : kAllIsas) {
    if (runs_here(isa)) names.emplace_back(cpu_isa_name(isa));
  }
  return names;
}

TORCH_LIBRARY(argon_cpu, m) {
  m.def("isa() -> str", &isa_op);
  m.def("isas() -> str[]", &isas_op);
  m.def("set_isa(str isa) -> ()", &set_isa_op);
}

}  // namespace argon
