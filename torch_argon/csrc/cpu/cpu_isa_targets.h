// The function attributes that compile one function of the CPU kernels for an ISA variant
// (cpu_isa.h), in a build whose baseline is older: x86-64 with GCC or Clang only. Elsewhere the
// macros are not defined and the x86 variant files compile to nothing.
// A function with one of these attributes may only run where cpu_isa.cpp found its ISA; keep
// such functions in anonymous namespaces (a shared inline function compiled with one would be
// merged by the linker with the baseline copies of other files).
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ARGON_X86_VARIANTS 1
// AVX2 with FMA (Haswell, Zen 1 and later).
#define ARGON_TARGET_AVX2 __attribute__((target("avx2,fma,bmi2")))
// AVX-512 F/BW/VL/DQ with VNNI (Ice Lake, Sapphire Rapids, Zen 4 and later).
#define ARGON_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,bmi2")))
#endif
