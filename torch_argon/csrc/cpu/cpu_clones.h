// ARGON_CPU_CLONES: compile a function twice, for the build's baseline ISA and for AVX2, and
// let the loader pick the one the CPU runs (GCC's target_clones, an ifunc). A plain loop in it
// then vectorises with 256-bit registers where the CPU has them, though the wheel targets
// baseline x86-64. Only where GCC builds for x86-64 with glibc (ifuncs); elsewhere (Clang, which
// refuses clones of templates; musl; macOS; arm64, whose baseline NEON is what we want) it is
// empty, and the baseline loop (SSE2 on x86-64) runs.
// The clones compute the same bits: the build has -ffp-contract=off, so neither clone fuses a
// multiply and an add, and every other operation is IEEE-rounded in both.
#pragma once
#include <cstddef>  // defines __GLIBC__ where the C library is glibc

#if defined(__x86_64__) && defined(__GLIBC__) && defined(__GNUC__) && !defined(__clang__)
#define ARGON_CPU_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define ARGON_CPU_CLONES
#endif
