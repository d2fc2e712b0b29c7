// The instruction-set variant the CPU experts kernels run (moe_qmm's q8 kernels, moe_mm's choice
// of GEMM), chosen once per process at first use: the best variant this CPU runs and this build
// has, or the one TORCH_ARGON_CPU_ISA names (portable | avx2 | avx512 | amx); a variant the CPU
// or the build lacks raises a ValueError naming the variable, never an illegal instruction.
//   portable  plain C++ for the build's baseline (any CPU)
//   avx2      x86-64 with AVX2 + FMA
//   avx512    x86-64 with AVX-512 F/BW/VL/DQ + VNNI
//   amx       Intel AMX tiles: no kernels in this build (no AMX machine to verify them on)
// Adding a variant (AMX): a q8_kernels_<isa>.cpp defining its kernel table (q8_kernels.h), its
// CPU test in runs_here() and its table in q8_kernels_for() (cpu_isa.cpp).
// The torch ops argon_cpu::isa(), argon_cpu::isas() and argon_cpu::set_isa(name) read and set
// the choice (tests run every variant through them).
#pragma once
#include <string>
#include <vector>

#include "q8_kernels.h"

namespace argon {

enum class CpuIsa : int { kPortable = 0, kAvx2 = 1, kAvx512 = 2, kAmx = 3 };

const char* cpu_isa_name(CpuIsa isa);
// The variant in use (chosen at the first call).
CpuIsa cpu_isa();
// The q8 kernels of the variant in use.
const q8::Kernels& q8_kernels();
// The variants this CPU and build run, from the most portable.
std::vector<std::string> cpu_isas_here();

}  // namespace argon
